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
// whichever comes first, and its ctx changes nothing in the escalation.
// Before, it waited inside the first caller's sync.Once for the whole
// escalation.
func TestStopLaterCallerKeepsToItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTree(2*time.Second, 10*time.Second, stageKill)
		owner := make(chan error, 1)
		go func() { owner <- f.Stop(context.Background()) }()
		time.Sleep(time.Second)

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := f.Stop(ctx)
		if took := time.Since(start); took != 100*time.Millisecond {
			t.Errorf("a Stop with a 100ms ctx returned after %v", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a Stop whose ctx ended returned %v, want an error wrapping context.DeadlineExceeded", err)
		}
		if err := <-owner; err != nil {
			t.Errorf("the first Stop: %v", err)
		}
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 12 * time.Second})
	})
}

// Many concurrent callers with all kinds of contexts share one escalation.
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
				c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				ctx, want = c, context.DeadlineExceeded
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
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 12 * time.Second})
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

// A later caller's deadline does not move the kill: the escalation
// belongs to the first caller.
func TestStopLaterDeadlineDoesNotMoveTheKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeTree(2*time.Second, 10*time.Second, stageKill)
		first, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		owner := make(chan error, 1)
		go func() { owner <- f.Stop(first) }()
		time.Sleep(time.Second)
		later, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel2()
		if err := f.Stop(later); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("later Stop: %v", err)
		}
		if err := <-owner; err != nil {
			t.Errorf("first Stop: %v", err)
		}
		f.checkSteps(t, fakeStep{stageStdin, 0}, fakeStep{stageTerm, 2 * time.Second}, fakeStep{stageKill, 12 * time.Second})
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
