package proc

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/mcpvisor/mcpvisor/internal/proc/shim"
)

// RunShimIfRequested must be the first call in main (and in TestMain of any
// test binary that opens a Runtime). In an ordinary start it returns at once;
// in a process the Runtime started as a pid-namespace init (or as the probe
// of one) it does that job and exits. See package shim.
//
// mcpvisor gives the shim Pdeathsig=SIGKILL, so mcpvisor's death, even by
// SIGKILL, takes the whole namespace with it.
func RunShimIfRequested() { shim.RunIfRequested() }

// wrapInShim makes cmd start the shim exe in a new pid namespace, with the
// server as its child.
func (p *Process) wrapInShim(attr *syscall.SysProcAttr, exe string, userns bool) error {
	cmd := p.cmd
	if cmd.Err != nil {
		return cmd.Err
	}
	// The shim would only fail to start the server after the fact; find
	// out now, as a direct start would.
	if _, err := exec.LookPath(cmd.Path); err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	// The stop pipe: mcpvisor closes its end when a stop begins (or when it
	// dies); descendants that outlive the server then get no quiesce
	// window, as outside a pid namespace, where the stop's sweep kills
	// them at once. A pipe, unlike a signal, cannot arrive before the shim
	// is ready for it.
	cr, cw, err := os.Pipe()
	if err != nil {
		closeAll(r, w)
		return err
	}
	quiesce := p.spec.PostExit.withDefaults().QuiesceWait
	args := append([]string{shim.Name, quiesce.String(), "--", cmd.Path}, cmd.Args...)
	cmd.Path, cmd.Args = exe, args
	cmd.Env = append(cmd.Env, shim.Env+"="+shim.Run)
	cmd.ExtraFiles = []*os.File{w, cr}
	namespaceAttr(attr, userns)
	p.plat.shim, p.plat.statusR, p.plat.statusW = true, r, w
	p.plat.stopR, p.plat.stopW = cr, cw
	return nil
}
