package proc

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A second Stop whose ctx is cancelled after 100 ms returns then, with an
// error wrapping ctx.Err(), while the first caller's escalation of a
// server that ignores stdin EOF and SIGTERM (6 s to SIGKILL) goes on
// untouched: a cancellation without a deadline does not kill.
func TestStopSecondCallerKeepsToItsContext(t *testing.T) {
	rt := openRuntime(t, Options{})
	marker := testserver.NewMarker(t)
	spec := fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1")
	spec.StdinWait, spec.TermWait = 2*time.Second, 4*time.Second
	p, err := rt.Spawn(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	newClient(p).initialize(t)

	firstCtx, endFirst := context.WithCancel(context.Background())
	defer endFirst()
	first := make(chan error, 1)
	go func() { first <- p.Stop(firstCtx) }()
	<-p.stopBegun

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	second := make(chan error, 1)
	start := time.Now()
	go func() { second <- p.Stop(ctx) }()
	returned := false
	select {
	case err := <-second:
		returned = true
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the second Stop returned %v, want an error wrapping context.Canceled", err)
		}
		t.Logf("the second Stop returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(2 * time.Second):
		t.Errorf("a Stop whose ctx was cancelled at 100ms is still waiting after 2s")
	}
	// The escalation went on: its waits were not cut short.
	select {
	case <-p.Done():
		t.Errorf("the tree ended (%v) while the first caller's escalation should still wait", p.Status())
	default:
		if stage := p.currentStage(); stage == stageKill {
			t.Errorf("the escalation is at %q already", stage)
		}
	}

	// The first caller gives up: its ctx ends, so the tree is killed now.
	endFirst()
	if err := <-first; !errors.Is(err, context.Canceled) && err != nil {
		t.Errorf("the first Stop: %v", err)
	}
	if !returned {
		<-second
	}
	if _, err := p.Wait(ctxTimeout(t, killBound)); err != nil {
		t.Fatalf("the tree is not gone after the first caller's ctx ended: %v", err)
	}
	if st := p.Status(); st.Kind != ExitStopped || st.Stage != stageKill {
		t.Errorf("status %v, want stopped by the kill", st)
	}
	testserver.WaitGone(t, marker, 0)
}

// With mcpvisor's waits (2 s after closing stdin, 10 s after SIGTERM) and
// a stop deadline of 1.5 s, a server that ignores both is SIGKILLed early
// enough to be reaped before the deadline, in every containment mode.
func TestStopDeadlineKillsAndReapsInTime(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			spec := fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1", "FIXTURE_STDOUT_CHILD=1")
			spec.StdinWait, spec.TermWait = DefaultStdinWait, DefaultTermWait
			p, err := rt.Spawn(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			newClient(p).initialize(t)

			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			deadline, _ := ctx.Deadline()
			err = p.Stop(ctx)
			returned := time.Now()
			if err != nil {
				t.Errorf("Stop: %v", err)
			}
			if !returned.Before(deadline) {
				t.Errorf("Stop returned %v after its deadline", returned.Sub(deadline))
			}
			select {
			case <-p.Done():
			default:
				t.Fatalf("Stop returned before the tree was reaped")
			}
			if st, ok := readStat(p.Pid()); ok {
				t.Errorf("the leader %d is still in the process table (state %c)", p.Pid(), st.state)
			}
			if left := testserver.LiveProcesses(marker); len(left) > 0 {
				testserver.KillProcesses(marker)
				t.Fatalf("processes of the tree remain: %v", left)
			}
			st := p.Status()
			if st.Kind != ExitStopped || st.Stage != stageKill || st.Signal != syscall.SIGKILL {
				t.Errorf("status %v, want stopped by SIGKILL at the kill step", st)
			}
			t.Logf("Stop returned %v before its deadline: %v", deadline.Sub(returned).Round(time.Millisecond), st)
		})
	}
}

// A stop begun without a deadline (12 s to SIGKILL with mcpvisor's waits)
// of a server that ignores stdin EOF and SIGTERM is bounded by a deadline
// that comes after it began, from Runtime.BoundStops or from a later
// caller of Stop: the tree is SIGKILLed and reaped before that deadline,
// in every containment mode. Before, the later deadline did not reach the
// escalation.
func TestLaterDeadlineReachesAStopUnderWay(t *testing.T) {
	bounds := []struct {
		name  string
		bound func(rt *Runtime, p *Process, deadline time.Time) error
	}{
		{"BoundStops", func(rt *Runtime, p *Process, deadline time.Time) error {
			rt.BoundStops(deadline)
			return nil
		}},
		{"later Stop", func(rt *Runtime, p *Process, deadline time.Time) error {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			return p.Stop(ctx)
		}},
	}
	for _, m := range modes {
		for _, b := range bounds {
			t.Run(m.name+"/"+b.name, func(t *testing.T) {
				rt := openRuntime(t, m.opts)
				marker := testserver.NewMarker(t)
				spec := fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1")
				spec.StdinWait, spec.TermWait = DefaultStdinWait, DefaultTermWait
				p, err := rt.Spawn(t.Context(), spec)
				if err != nil {
					t.Fatal(err)
				}
				newClient(p).initialize(t)

				first := make(chan error, 1)
				go func() { first <- p.Stop(context.Background()) }()
				<-p.stopBegun
				time.Sleep(200 * time.Millisecond)
				deadline := time.Now().Add(1500 * time.Millisecond)
				if err := b.bound(rt, p, deadline); err != nil {
					t.Errorf("the later Stop: %v", err)
				}
				select {
				case err := <-first:
					if err != nil {
						t.Errorf("the first Stop: %v", err)
					}
				case <-time.After(time.Until(deadline) + time.Second):
					t.Fatalf("the first Stop is still waiting 1s after the deadline, at step %q", p.currentStage())
				}
				if returned := time.Now(); !returned.Before(deadline) {
					t.Errorf("the first Stop returned %v after the deadline", returned.Sub(deadline))
				} else {
					t.Logf("the tree was reaped %v before the deadline", deadline.Sub(returned).Round(time.Millisecond))
				}
				if left := testserver.LiveProcesses(marker); len(left) > 0 {
					testserver.KillProcesses(marker)
					t.Fatalf("processes of the tree remain: %v", left)
				}
				st := p.Status()
				if st.Kind != ExitStopped || st.Stage != stageKill || st.Signal != syscall.SIGKILL {
					t.Errorf("status %v, want stopped by SIGKILL at the kill step", st)
				}
			})
		}
	}
}

// Close with an ended ctx, racing a spawn it has taken in, returns at once
// with an error wrapping ctx.Err(); the escalation it began waits for the
// spawn's outcome and then kills the new tree at once.
func TestCloseWithEndedContextDuringSpawn(t *testing.T) {
	rt, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	beforeStart = func() { <-hold }
	t.Cleanup(func() { beforeStart = func() {} })
	marker := testserver.NewMarker(t)
	spawned := make(chan *Process, 1)
	go func() {
		p, err := rt.Spawn(context.Background(), fixtureSpec(t, marker, "FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1"))
		if err != nil {
			t.Errorf("Spawn: %v", err)
		}
		spawned <- p
	}()
	for {
		rt.mu.Lock()
		n := len(rt.live)
		rt.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rt.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Close with a cancelled ctx during a spawn: %v, want an error wrapping context.Canceled", err)
	}
	close(hold)
	p := <-spawned
	if p == nil {
		return
	}
	if _, err := p.Wait(ctxTimeout(t, killBound)); err != nil {
		t.Fatalf("the tree spawned under Close is not gone: %v", err)
	}
	if st := p.Status(); st.Kind != ExitStopped || st.Stage != stageKill {
		t.Errorf("status %v, want stopped by the kill", st)
	}
	testserver.WaitGone(t, marker, 0)
}
