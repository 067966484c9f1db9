//go:build !linux

package proc

import (
	"runtime"
	"syscall"
)

// Outside Linux a tree is contained by its process group alone: no pidfd,
// parent-death signal, subreaper, pid namespace or cgroup. The leader is
// reaped before its group is swept, so a group signal sent right after could
// in theory reach a recycled group id; Stop keeps that window to one
// kill(2).

type platformRuntime struct{}

type platformProcess struct {
	waitErr error
}

func (rt *Runtime) openPlatform() error {
	rep := Report{OS: runtime.GOOS}
	rep.add(LayerProcessGroup, true, "every server runs in its own process group; stop signals the whole group")
	rep.add(LayerPidfd, false, "Linux only")
	rep.add(LayerPdeathsig, false, "Linux only: servers outlive a SIGKILLed mcpvisor")
	rep.add(LayerSubreaper, false, "Linux only: descendants that leave the group are not tracked")
	rep.add(LayerPIDNamespace, false, "Linux only")
	rep.add(LayerCgroup, false, "Linux only")
	rep.add(LayerStaleSweep, false, "Linux only")
	for _, k := range []string{LimitMemory, LimitPIDs, LimitCPU} {
		rep.addLimit(k, false, "resource limits need cgroups: Linux only")
	}
	rep.Accounting = "not measured outside Linux"
	rt.report = rep
	return nil
}

func (rt *Runtime) closePlatform() error { return nil }

// TreeUsage is not measured outside Linux: every Usage is zero and ok
// false.
func TreeUsage(roots []Root) (out []Usage, ok []bool) {
	return make([]Usage, len(roots)), make([]bool, len(roots))
}

// RunShimIfRequested is a no-op outside Linux.
func RunShimIfRequested() {}

func (rt *Runtime) start(p *Process) error {
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return startCmd(p.cmd)
}

func (p *Process) awaitLeaderExit() {
	p.plat.waitErr = p.cmd.Wait()
}

func (p *Process) reap() error { return p.plat.waitErr }

func (p *Process) treeAlive() int {
	if syscall.Kill(-p.pid, 0) == nil {
		return 1
	}
	return 0
}

func (p *Process) signalTree(sig syscall.Signal) {
	if p.pid > 0 { // never kill(-0): that is mcpvisor's own process group
		_ = syscall.Kill(-p.pid, sig)
	}
}

func (p *Process) sweep() {}

func (p *Process) release() {}

func (p *Process) shimStatus() (int, syscall.Signal, bool) { return 0, 0, false }

func (rt *Runtime) killEscaped() {}

func (p *Process) stopping() {}

func (p *Process) limitEvents() limitEvents { return limitEvents{} }
