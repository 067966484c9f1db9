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
// The escalation has one kill time, the earliest of these bounds (none at
// all: SIGKILL comes when the waits run out):
//   - the deadline of the ctx of every call, the first and every later
//     one, made when that call begins: SIGKILL no later than the deadline
//     minus a margin for the kill and the reap, a quarter of the time left
//     when the call began, at most 500 ms. With the default waits and a
//     10 s deadline, the tree gets SIGTERM at 2 s and SIGKILL at 9.5 s;
//     with a 1.5 s deadline, SIGKILL at 1.125 s and no SIGTERM;
//   - the bound of Runtime.BoundStops, made before or during the stop.
//
// A bound only ever moves the kill earlier, never later; the escalation
// wakes when it does, and a step whose time has passed is skipped (no
// SIGTERM once SIGKILL is due). A bound stays when the ctx that made it is
// later cancelled.
//
// The end of a ctx (cancelled, or past its deadline) before the tree is
// gone SIGKILLs the tree at once only when it is the first caller's ctx.
// A later caller's ctx ending changes nothing in the escalation beyond
// its deadline: it bounds that caller's wait.
//
// Every caller, the first included, waits for the end of the escalation or
// of its own ctx, whichever comes first, and returns
//   - nil when the tree is gone and its leader reaped, whether the stop
//     ended it or it had exited by itself (or never started). A caller
//     whose ctx has ended but finds the tree already gone gets nil too;
//   - an error wrapping ctx.Err() (test with errors.Is against
//     context.Canceled or context.DeadlineExceeded) when its ctx ended
//     first. The escalation goes on — for the first caller that means the
//     SIGKILL has been sent, for any caller with a deadline that the
//     SIGKILL was due before it — and Done tells when the tree is gone;
//   - any other error when the tree was still present killBound (5 s) after
//     SIGKILL: a process stuck in the kernel. Every caller waiting then, and
//     every later call, gets that error.
//
// Exactly one escalation runs per Process, however many calls there are.
// Stop is safe for concurrent use, and while the process exits by itself.
func (p *Process) Stop(ctx context.Context) error {
	if at, ok := killTime(ctx); ok {
		p.boundKill(at)
	}
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

// killTime is when a stop under ctx must send SIGKILL at the latest, and
// whether there is such a time (ctx has a deadline).
func killTime(ctx context.Context) (time.Time, bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	return killTimeBy(deadline), true
}

// killTimeBy is when a stop must send SIGKILL at the latest for the tree to
// be reaped by deadline: deadline minus killMargin of the time left now.
func killTimeBy(deadline time.Time) time.Time {
	return deadline.Add(-killMargin(time.Until(deadline)))
}

// boundKill makes at the latest time of the escalation's SIGKILL, unless
// it already has an earlier one, and then wakes the escalation to
// reconsider its wait. It may come before, during or after the
// escalation.
func (p *Process) boundKill(at time.Time) {
	p.mu.Lock()
	earlier := p.killAt.IsZero() || at.Before(p.killAt)
	if earlier {
		p.killAt = at
	}
	p.mu.Unlock()
	if earlier {
		// One pending wake is enough: the escalation reads killAt after
		// taking it.
		select {
		case p.killMoved <- struct{}{}:
		default:
		}
	}
}

// killBy returns the escalation's kill time, and whether it has one.
func (p *Process) killBy() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killAt, !p.killAt.IsZero()
}

// escalate takes the stop steps (see Stop) until the tree is gone, and
// reports an error only when SIGKILL did not clear it within killBound.
// ctx is the first caller's.
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
	due := func() bool {
		at, ok := p.killBy()
		return ok && !time.Now().Before(at)
	}
	steps := []struct {
		stage string
		wait  time.Duration
	}{
		{stageStdin, p.spec.stdinWait()},
		{stageTerm, p.spec.termWait()},
	}
	for i, s := range steps {
		if i > 0 && (ctx.Err() != nil || due()) {
			break
		}
		p.act(s.stage)
		if p.waitStep(ctx, s.wait) {
			return nil
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

// waitStep waits d after a stop step, or less: until the kill time, which
// may move earlier meanwhile (boundKill wakes it), or until ctx ends. It
// reports whether the tree is gone.
func (p *Process) waitStep(ctx context.Context, d time.Duration) bool {
	end := time.Now().Add(d)
	for ctx.Err() == nil {
		wait := time.Until(end)
		if at, ok := p.killBy(); ok {
			wait = min(wait, time.Until(at))
		}
		if wait <= 0 {
			return false
		}
		t := time.NewTimer(wait)
		select {
		case <-p.done:
			t.Stop()
			return true
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-p.killMoved:
			t.Stop()
		}
	}
	return false
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
