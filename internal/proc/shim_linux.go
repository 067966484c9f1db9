package proc

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// shimEnv tells a re-executed mcpvisor binary to act as the init of a
// server's pid namespace ("run"), or to exit at once ("probe").
const shimEnv = "MCPVISOR_PROC_SHIM"

// RunShimIfRequested must be the first call in main (and in TestMain of any
// test binary that opens a Runtime). In an ordinary start it returns at once;
// in a process the Runtime re-executed as a pid-namespace init it runs the
// init and exits.
//
// A pid namespace's init ignores every signal it has no handler for, and
// the kernel kills the whole namespace when the init dies. So the server
// must not be that init: the shim is. It starts the server, forwards stop
// signals to every process of the namespace, reaps everything, and when the
// server exits gives the rest a short quiesce window, kills them, reports
// the server's status on fd 3 and exits. mcpvisor gives the shim
// Pdeathsig=SIGKILL, so mcpvisor's death, even by SIGKILL, takes the whole
// namespace with it.
func RunShimIfRequested() {
	switch os.Getenv(shimEnv) {
	case "":
		return
	case "probe":
		os.Exit(0)
	case "run":
		os.Exit(shimMain(os.Args[1:]))
	}
}

func (p *Process) wrapInShim(attr *syscall.SysProcAttr, userns bool) error {
	cmd := p.cmd
	if cmd.Err != nil {
		return cmd.Err
	}
	// The shim would only fail to start the server after the fact; find
	// out now, as a direct start would.
	if _, err := exec.LookPath(cmd.Path); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate mcpvisor for the pid-namespace init: %w", err)
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
	args := append([]string{"mcpvisor-shim", quiesce.String(), "--", cmd.Path}, cmd.Args...)
	cmd.Path, cmd.Args = exe, args
	cmd.Env = append(cmd.Env, shimEnv+"=run")
	cmd.ExtraFiles = []*os.File{w, cr}
	namespaceAttr(attr, userns)
	p.plat.shim, p.plat.statusR, p.plat.statusW = true, r, w
	p.plat.stopR, p.plat.stopW = cr, cw
	return nil
}

func parseShimStatus(s string) (code int, sig syscall.Signal, ok bool) {
	var kind string
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%s %d", &kind, &n); err != nil {
		return 0, 0, false
	}
	switch kind {
	case "exit":
		return n, 0, true
	case "signal":
		return -1, syscall.Signal(n), true
	}
	return 0, 0, false
}

// shimMain: args are QUIESCE -- PATH ARGV0 ARGS...
func shimMain(args []string) int {
	if len(args) < 4 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "mcpvisor-shim: bad arguments")
		return 125
	}
	quiesce, err := time.ParseDuration(args[0])
	if err != nil {
		quiesce = DefaultQuiesceWait
	}
	path, argv := args[2], args[3:]
	status := os.NewFile(3, "status")
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, shimEnv+"=") {
			env = append(env, kv)
		}
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	hint := make(chan struct{})
	go func() {
		ctl := os.NewFile(4, "stop")
		var b [1]byte
		_, _ = ctl.Read(b[:]) // EOF when mcpvisor begins a stop or dies
		close(hint)
	}()
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpvisor-shim: start %s: %v\n", path, err)
		fmt.Fprintf(status, "exit 127\n")
		return 127
	}
	// Drop our copies of the server's stdin and stdout, so that EOF on them
	// follows the server alone.
	if null, err := unix.Open(os.DevNull, unix.O_RDWR, 0); err == nil {
		_ = unix.Dup2(null, 0)
		_ = unix.Dup2(null, 1)
		unix.Close(null)
	}

	everyone := func(sig syscall.Signal) {
		if os.Getpid() == 1 {
			_ = syscall.Kill(-1, sig) // every process of the namespace but us
		} else {
			_ = syscall.Kill(-pid, sig)
		}
	}
	// reapAll collects every exited child; it reports the server's status
	// when the server is among them and whether any child is left.
	var server *syscall.WaitStatus
	reapAll := func() (left bool) {
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				return false
			}
			if err == syscall.EINTR {
				continue
			}
			if wpid <= 0 {
				return true
			}
			if wpid == pid {
				server = &ws
			}
		}
	}
	stopping := false
	for server == nil {
		select {
		case s := <-sigs:
			everyone(s.(syscall.Signal))
		case <-hint:
			stopping = true
		case <-chld:
			reapAll()
		}
	}
	select {
	case <-hint:
		stopping = true
	default:
	}
	if stopping {
		quiesce = 0
	}
	// The server is gone; what it left gets SIGTERM and the quiesce window.
	deadline := time.NewTimer(quiesce)
	tick := time.NewTicker(5 * time.Millisecond)
	if reapAll() {
		everyone(syscall.SIGTERM)
	wait:
		for reapAll() {
			select {
			case <-chld:
			case <-tick.C:
			case <-deadline.C:
				break wait
			}
		}
		everyone(syscall.SIGKILL)
		for reapAll() {
			<-tick.C
		}
	}
	if server.Signaled() {
		fmt.Fprintf(status, "signal %d\n", int(server.Signal()))
	} else {
		fmt.Fprintf(status, "exit %d\n", server.ExitStatus())
	}
	return 0
}
