package proc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeTree is a Process with nothing behind it, to run Stop's logic under
// testing/synctest. It records every stop step with the bubble's time
// since it was made; the tree goes away fakeReap after the step named by
// dies ("" for never: a process stuck in the kernel).
type fakeTree struct {
	*Process
	start time.Time

	mu    sync.Mutex
	steps []fakeStep
}

type fakeStep struct {
	stage string
	at    time.Duration
}

func (s fakeStep) String() string { return fmt.Sprintf("%s@%v", s.stage, s.at) }

// fakeReap is how long the fake tree takes to be gone and reaped after the
// step it dies of.
const fakeReap = 5 * time.Millisecond

func newFakeTree(stdinWait, termWait time.Duration, dies string) *fakeTree {
	p := newProcess(Spec{Name: "fake", StdinWait: stdinWait, TermWait: termWait}, slog.New(slog.DiscardHandler))
	close(p.spawned)
	f := &fakeTree{Process: p, start: time.Now()}
	var gone sync.Once
	p.act = func(stage string) {
		p.setStage(stage)
		f.mu.Lock()
		f.steps = append(f.steps, fakeStep{stage, time.Since(f.start)})
		f.mu.Unlock()
		if stage == dies {
			time.AfterFunc(fakeReap, func() { gone.Do(func() { close(p.done) }) })
		}
	}
	return f
}

// checkSteps fails t unless exactly the steps want were taken.
func (f *fakeTree) checkSteps(t *testing.T, want ...fakeStep) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.steps, want) {
		t.Errorf("stop steps %v, want %v", f.steps, want)
	}
}

// A later caller of Stop waits for the escalation's end or its own ctx,
// whichever comes first, and the end of its ctx (cancelled, no deadline)
// changes nothing in the escalation. Before, it waited inside the first
// caller's sync.Once for the whole escalation.
func TestStopLaterCallerKeepsToItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTree(2*time.Second, 10*time.Second, stageKill)
		owner := make(chan error, 1)
		go func() { owner <- f.Stop(context.Background()) }()
		time.Sleep(time.Second)

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := f.Stop(ctx)
		if took := time.Since(start); took != 100*time.Millisecond {
			t.Errorf("a Stop whose ctx is cancelled after 100ms returned after %v", took)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a Stop whose ctx ended returned %v, want an error wrapping context.Canceled", err)
		}
		if err := <-owner; err != nil {
			t.Errorf("the first Stop: %v", err)
		}
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 12 * time.Second})
	})
}

// Many concurrent callers with all kinds of contexts share one escalation,
// whose kill time is the earliest that their deadlines ask for; the
// cancelled contexts of later callers do not kill.
func TestStopManyCallersOneEscalation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTree(2*time.Second, 10*time.Second, stageKill)
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		var wg sync.WaitGroup
		for i := range 8 {
			ctx := context.Background()
			var want error // what this caller's Stop wraps
			switch i % 4 {
			case 1:
				ctx, want = cancelled, context.Canceled
			case 2:
				// Callers 2 and 6, at 200 and 600 ms: deadlines at 3.2
				// and 3.6 s, so SIGKILL at 2.7 s and the tree gone
				// before either.
				d := time.Duration(i)*100*time.Millisecond + 3*time.Second
				c, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				ctx = c
			}
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 100 * time.Millisecond)
				err := f.Stop(ctx)
				if want == nil && err != nil || want != nil && !errors.Is(err, want) {
					t.Errorf("caller %d: Stop returned %v, want %v", i, err, want)
				}
			})
		}
		wg.Wait()
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 2700 * time.Millisecond})
	})
}

// A Stop whose ctx has already ended kills the tree at once and returns at
// once. Before, it picked at random between "spawned" and "ctx ended" and,
// half the time, returned without stopping anything.
func TestStopWithEndedContextKillsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 20 {
			f := newFakeTree(2*time.Second, 10*time.Second, stageKill)
			start := time.Now()
			if err := f.Stop(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Stop with a cancelled ctx returned %v, want an error wrapping context.Canceled", err)
			}
			if took := time.Since(start); took != 0 {
				t.Fatalf("Stop with a cancelled ctx took %v", took)
			}
			<-f.Done()
			f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageKill, 0})
		}
	})
}

// The first caller's ctx, cancelled midway, kills the tree at once; Stop
// returns then, without waiting for the reap.
func TestStopCancelledMidwayKillsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTree(2*time.Second, 10*time.Second, stageKill)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(3*time.Second, cancel)
		err := f.Stop(ctx)
		if took := time.Since(f.start); took != 3*time.Second {
			t.Errorf("Stop returned %v after the start, want 3s (its ctx's end)", took)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Stop returned %v, want an error wrapping context.Canceled", err)
		}
		<-f.Done()
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 3 * time.Second})
		// Once the tree is gone, even a caller with an ended ctx hears so.
		if err := f.Stop(ctx); err != nil {
			t.Errorf("Stop of a gone tree with an ended ctx: %v", err)
		}
	})
}

// A deadline on the first caller's ctx moves SIGKILL to the deadline minus
// killMargin, so that the tree is reaped before the deadline, and Stop
// returns nil.
func TestStopDeadlineReachesTheKill(t *testing.T) {
	const s = time.Second
	cases := []struct {
		deadline time.Duration
		dies     string
		want     []fakeStep
	}{
		// mcpvisor's own defaults: 10 s to shut down, waits of 2 s + 10 s.
		{10 * s, stageKill, []fakeStep{{stageStdin, 0}, {stageTerm, 2 * s}, {stageKill, 9500 * time.Millisecond}}},
		{1500 * time.Millisecond, stageKill, []fakeStep{{stageStdin, 0}, {stageKill, 1125 * time.Millisecond}}},
		{3 * s, stageKill, []fakeStep{{stageStdin, 0}, {stageTerm, 2 * s}, {stageKill, 2500 * time.Millisecond}}},
		{100 * time.Millisecond, stageKill, []fakeStep{{stageStdin, 0}, {stageKill, 75 * time.Millisecond}}},
		// Room enough: the escalation keeps its waits.
		{20 * s, stageKill, []fakeStep{{stageStdin, 0}, {stageTerm, 2 * s}, {stageKill, 12 * s}}},
		// A server that goes on SIGTERM is not killed.
		{10 * s, stageTerm, []fakeStep{{stageStdin, 0}, {stageTerm, 2 * s}}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v-dies-at-%s", c.deadline, c.dies), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeTree(2*s, 10*s, c.dies)
				ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
				defer cancel()
				if err := f.Stop(ctx); err != nil {
					t.Errorf("Stop: %v", err)
				}
				if took, last := time.Since(f.start), c.want[len(c.want)-1].at+fakeReap; took != last {
					t.Errorf("Stop returned after %v, want %v (the tree gone)", took, last)
				}
				f.checkSteps(t, c.want...)
			})
		})
	}
}

// A later caller's deadline moves the kill earlier when it asks for an
// earlier one than the escalation has: the escalation, asleep in a wait,
// wakes for it, and skips SIGTERM when SIGKILL is due first. Before, the
// escalation belonged to the first caller and kept its 12 s course.
func TestStopLaterDeadlineMovesTheKillEarlier(t *testing.T) {
	const s = time.Second
	cases := []struct {
		name     string
		first    time.Duration // the first caller's timeout; 0 for none
		at       time.Duration // when the later caller comes
		deadline time.Duration // its timeout
		want     []fakeStep
	}{
		// Deadline at 4 s, margin 500 ms.
		{"during the SIGTERM wait", 0, s, 3 * s, []fakeStep{{stageStdin, 0}, {stageTerm, 2 * s}, {stageKill, 3500 * time.Millisecond}}},
		// Deadline at 2 s, margin 250 ms: no SIGTERM.
		{"during the stdin wait", 0, time.Second, time.Second, []fakeStep{{stageStdin, 0}, {stageKill, 1750 * time.Millisecond}}},
		// Earlier than the first caller's own deadline (kill at 19.5 s).
		{"before the first caller's deadline", 20 * s, 3 * s, 2 * s, []fakeStep{{stageStdin, 0}, {stageTerm, 2 * s}, {stageKill, 4500 * time.Millisecond}}},
		// A deadline already past when the call comes: SIGKILL at once.
		{"already past", 0, 3 * s, -s, []fakeStep{{stageStdin, 0}, {stageTerm, 2 * s}, {stageKill, 3 * s}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeTree(2*s, 10*s, stageKill)
				first := context.Background()
				if c.first > 0 {
					ctx, cancel := context.WithTimeout(first, c.first)
					defer cancel()
					first = ctx
				}
				owner := make(chan error, 1)
				go func() { owner <- f.Stop(first) }()
				time.Sleep(c.at)
				later, cancel := context.WithTimeout(context.Background(), c.deadline)
				defer cancel()
				err := f.Stop(later)
				if c.deadline > 0 && err != nil {
					t.Errorf("later Stop: %v, want nil (the tree gone before its deadline)", err)
				}
				if err := <-owner; err != nil {
					t.Errorf("first Stop: %v", err)
				}
				f.checkSteps(t, c.want...)
			})
		})
	}
}

// A later caller's deadline never moves the kill later: the earliest
// bound stays, and a later caller whose ctx is cancelled, deadline or not,
// does not kill.
func TestStopLaterDeadlineNeverMovesTheKillLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTree(2*time.Second, 10*time.Second, stageKill)
		first, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		owner := make(chan error, 1)
		go func() { owner <- f.Stop(first) }() // SIGKILL at 4.5 s
		time.Sleep(time.Second)
		later, cancelLater := context.WithTimeout(context.Background(), 20*time.Second)
		time.AfterFunc(time.Second, cancelLater) // at 2 s: no kill
		if err := f.Stop(later); !errors.Is(err, context.Canceled) {
			t.Errorf("later Stop, cancelled: %v, want an error wrapping context.Canceled", err)
		}
		if err := f.Stop(context.Background()); err != nil {
			t.Errorf("a third Stop: %v", err)
		}
		if err := <-owner; err != nil {
			t.Errorf("first Stop: %v", err)
		}
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 4500 * time.Millisecond})
	})
}

// fakeRuntime is a Runtime with nothing behind it that tracks fake trees.
func fakeRuntime() *Runtime {
	return &Runtime{live: map[*Process]struct{}{}, log: slog.New(slog.DiscardHandler)}
}

// tracked makes f a process of rt, as Spawn does.
func (f *fakeTree) tracked(t *testing.T, rt *Runtime) *fakeTree {
	t.Helper()
	f.rt = rt
	if err := rt.track(f.Process); err != nil {
		t.Fatal(err)
	}
	return f
}

// BoundStops bounds a stop already under way, begun under a context
// without a deadline: SIGKILL at its deadline minus the margin, the
// escalation woken from its wait.
func TestBoundStopsReachesAStopUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := fakeRuntime()
		f := newFakeTree(2*time.Second, 10*time.Second, stageKill).tracked(t, rt)
		stopped := make(chan error, 1)
		go func() { stopped <- f.Stop(context.Background()) }()
		time.Sleep(time.Second)
		rt.BoundStops(time.Now().Add(10 * time.Second)) // SIGKILL at 10.5 s
		if err := <-stopped; err != nil {
			t.Errorf("Stop: %v", err)
		}
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 10500 * time.Millisecond})
	})
}

// BoundStops bounds the stops that begin after it, of processes live then
// and of those spawned after; it stops nothing itself, and a later call
// with a later deadline does not loosen it.
func TestBoundStopsReachesLaterStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := fakeRuntime()
		before := newFakeTree(2*time.Second, 10*time.Second, stageKill).tracked(t, rt)
		rt.BoundStops(time.Now().Add(4 * time.Second))  // SIGKILL at 3.5 s
		rt.BoundStops(time.Now().Add(40 * time.Second)) // no change
		after := newFakeTree(2*time.Second, 10*time.Second, stageKill).tracked(t, rt)
		idle := newFakeTree(2*time.Second, 10*time.Second, stageKill).tracked(t, rt)
		time.Sleep(time.Second)
		var wg sync.WaitGroup
		for _, f := range []*fakeTree{before, after} {
			wg.Go(func() {
				if err := f.Stop(context.Background()); err != nil {
					t.Errorf("Stop: %v", err)
				}
			})
		}
		wg.Wait()
		want := []fakeStep{{stageStdin, time.Second}, {stageTerm, 3 * time.Second}, {stageKill, 3500 * time.Millisecond}}
		before.checkSteps(t, want...)
		after.checkSteps(t, want...)
		// Past the deadline, a stop begins with SIGKILL due: stdin is
		// closed and the tree killed at once.
		time.Sleep(10 * time.Second)
		idle.checkSteps(t)
		at := time.Since(idle.start)
		if err := idle.Stop(context.Background()); err != nil {
			t.Errorf("Stop after the deadline: %v", err)
		}
		idle.checkSteps(t, fakeStep{stageStdin, at}, fakeStep{stageKill, at})
	})
}

// A tree still present killBound after SIGKILL makes every caller still
// waiting get an error, not a hang.
func TestStopStuckTreeReportsAfterKillBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTree(time.Second, time.Second, "")
		err := f.Stop(context.Background())
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop of a tree that never goes: %v", err)
		}
		if took := time.Since(f.start); took != 2*time.Second+killBound {
			t.Errorf("Stop gave up after %v, want %v", took, 2*time.Second+killBound)
		}
		// A later caller hears the same outcome.
		if err2 := f.Stop(context.Background()); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("later Stop: %v, want %v", err2, err)
		}
	})
}
