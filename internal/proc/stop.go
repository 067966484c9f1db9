package proc

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Stop ends the tree. The first call begins the escalation, which runs on a
// goroutine of the Process: close stdin, wait StdinWait (default 2 s),
// SIGTERM the whole tree, wait TermWait (default 10 s), SIGKILL the tree
// (and its cgroup), sweep escaped descendants, reap.
//
// The first caller's ctx governs the escalation:
//   - If it has a deadline, SIGKILL comes no later than the deadline minus
//     a margin for the kill and the reap: a quarter of the time left when
//     the stop began, at most 500 ms. With the default waits and a 10 s
//     deadline, the tree gets SIGTERM at 2 s and SIGKILL at 9.5 s; with a
//     1.5 s deadline, SIGKILL at 1.125 s and no SIGTERM.
//   - If it ends (cancelled, or past its deadline) before the tree is gone,
//     the tree is SIGKILLed at once.
//
// The contexts of later callers never change the escalation: each bounds
// only that caller's wait.
//
// Every caller, the first included, waits for the end of the escalation or
// of its own ctx, whichever comes first, and returns
//   - nil when the tree is gone and its leader reaped, whether the stop
//     ended it or it had exited by itself (or never started). A caller
//     whose ctx has ended but finds the tree already gone gets nil too;
//   - an error wrapping ctx.Err() (test with errors.Is against
//     context.Canceled or context.DeadlineExceeded) when its ctx ended
//     first. The escalation goes on — for the first caller that means the
//     SIGKILL has been sent — and Done tells when the tree is gone;
//   - any other error when the tree was still present killBound (5 s) after
//     SIGKILL: a process stuck in the kernel. Every caller waiting then, and
//     every later call, gets that error.
//
// Exactly one escalation runs per Process, however many calls there are.
// Stop is safe for concurrent use, and while the process exits by itself.
func (p *Process) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { go p.runStop(ctx) })
	select {
	case <-p.stopEnd:
		return p.stopErr
	case <-ctx.Done():
	}
	select {
	case <-p.done:
		// The escalation ends as soon as it sees the tree gone.
		<-p.stopEnd
		return p.stopErr
	default:
	}
	return fmt.Errorf("proc: stop of %s still under way at step %q: %w", p.spec.Name, p.currentStage(), ctx.Err())
}

// runStop is the goroutine of the one escalation.
func (p *Process) runStop(ctx context.Context) {
	p.stopErr = p.escalate(ctx)
	if p.stopErr == nil {
		closeAll(p.stdout)
	}
	close(p.stopEnd)
}

// The stop steps, as ExitStatus.Stage names them.
const (
	stageStdin = "stdin"
	stageTerm  = "term"
	stageKill  = "kill"
)

// killBound is how long the tree may take to vanish after SIGKILL.
const killBound = 5 * time.Second

// maxKillMargin caps killMargin.
const maxKillMargin = 500 * time.Millisecond

// killMargin is how long before a stop's deadline SIGKILL is sent, given
// the time left when the stop began: a quarter of it, at most
// maxKillMargin. A SIGKILLed tree is gone within milliseconds; the margin
// also covers the sweep of escaped descendants, the reap and the removal of
// the cgroup, on a loaded machine.
func killMargin(left time.Duration) time.Duration {
	return min(max(left, 0)/4, maxKillMargin)
}

// killTime is when the escalation under ctx must send SIGKILL at the
// latest, and whether there is such a time (ctx has a deadline).
func killTime(ctx context.Context) (time.Time, bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	return deadline.Add(-killMargin(time.Until(deadline))), true
}

// escalate takes the stop steps under ctx (see Stop) until the tree is
// gone, and reports an error only when SIGKILL did not clear it within
// killBound.
func (p *Process) escalate(ctx context.Context) error {
	// A spawn under way is short; the stop needs its outcome.
	<-p.spawned
	if p.spawnFailed {
		return nil // nothing was started
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	close(p.stopBegun)
	p.stopping()
	killAt, bounded := killTime(ctx)
	due := func() bool { return ctx.Err() != nil || bounded && !time.Now().Before(killAt) }
	steps := []struct {
		stage string
		wait  time.Duration
	}{
		{stageStdin, p.spec.stdinWait()},
		{stageTerm, p.spec.termWait()},
	}
	for i, s := range steps {
		if i > 0 && due() {
			break
		}
		p.act(s.stage)
		wait := s.wait
		if bounded {
			wait = min(wait, time.Until(killAt))
		}
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-p.done:
			t.Stop()
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	why := "it outlasted the stop's waits"
	switch {
	case ctx.Err() != nil:
		why = "the stop's context ended"
	case due():
		why = "the stop's deadline is near"
	}
	p.act(stageKill)
	p.log.Warn("server did not stop in time; killed its process group", "pid", p.pid, "reason", why)
	// SIGKILL cannot be ignored; the bound only covers a process stuck in
	// the kernel.
	t := time.NewTimer(killBound)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("proc: %s (pid %d) still present %v after SIGKILL", p.spec.Name, p.pid, killBound)
	}
}

// takeStep records stage and takes that stop step: stageStdin closes the
// tree's stdin, stageTerm sends SIGTERM to the whole tree, stageKill
// SIGKILL.
func (p *Process) takeStep(stage string) {
	p.setStage(stage)
	switch stage {
	case stageStdin:
		_ = p.stdin.Close()
	case stageTerm:
		p.signalTree(syscall.SIGTERM)
	case stageKill:
		p.signalTree(syscall.SIGKILL)
	}
}
