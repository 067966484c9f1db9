package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// Between the end of a session and the supervisor's move to Restarting
// the supervisor hands out no session while its state still says Ready
// (here held there: OnDisconnect waits on the exited event). A request
// then waits for the restart: it neither spins (the bubble's clock would
// not move) nor starts a second process, nor returns.
func TestARequestWaitsWhileTheRunHasNoSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		s := ff.f.Get("s")
		gate := make(chan struct{})
		seen := make(chan struct{})
		was := ff.f.opts.OnEvent
		ff.f.opts.OnEvent = func(e Event) {
			was(e)
			if e.Type == "exited" {
				close(seen)
				<-gate
			}
		}
		c := live(s.Acquire(t.Context(), ""))
		if c == nil {
			t.Fatal("no start")
		}
		c.(*fakeLive).crash()
		<-seen
		in := s.sharedIn()
		if in.live() != nil || !in.supervisor().IsReady() {
			t.Fatalf("not in the window: session %v, ready %v", in.live(), in.supervisor().IsReady())
		}
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := use(s.Acquire(ctx, ""))
			done <- err
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := ff.connects.Load(); n != 1 {
			t.Errorf("%d connects while the supervisor has not restarted, want 1", n)
		}
		select {
		case err := <-done:
			t.Fatalf("the request returned (%v) before the restart", err)
		default:
		}
		close(gate)
		if err := <-done; err != nil {
			t.Fatalf("after the restart: %v", err)
		}
		ff.close(t)
	})
}

// Leaving Running stops the idle timer: update derives it, whichever
// change made the move (a close here).
func TestLeavingRunningStopsTheIdleTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"1s"`)
		defer ff.close(t)
		in := ff.f.Get("s").sharedIn()
		if _, err := use(ff.f.Get("s").Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		var timer *time.Timer
		in.view(func(st *instState) { timer = st.timer })
		if timer == nil {
			t.Fatal("a running instance with nothing in flight has no idle timer")
		}
		if err := in.close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if timer.Stop() {
			t.Fatal("the idle timer was still active after the instance stopped")
		}
	})
}

// The idle timer does not put to sleep an instance whose run gave up and
// that a request is starting again (Running, a start under way): the move
// the start then makes, Sleeping → Running, is one the table refuses, and
// the dormant stop would stop the run just started.
func TestIdleCheckLeavesAStartAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"1s"`)
		defer ff.close(t)
		in := ff.f.Get("s").sharedIn()
		if _, err := use(ff.f.Get("s").Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(9 * time.Second)
		ch := make(chan struct{})
		in.do(func(st *instState) (_ effects) { st.starting = ch; return }) // as lookLocked does
		time.Sleep(2 * time.Second)                                         // idle for its timeout: the timer fires
		synctest.Wait()
		var p phase
		in.view(func(st *instState) { p = st.phase })
		if p != phaseRunning {
			t.Fatalf("phase %s while a start was under way, want running", p)
		}
		in.do(func(st *instState) (_ effects) { st.starting = nil; return })
		close(ch)
	})
}

// An instance is one allocation of the 288-byte size class: a dormant
// server keeps one, so a field added to it costs every server (the next
// class is 320 bytes). Make room elsewhere before raising this.
func TestInstanceFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(instance{}); n > 288 {
		t.Fatalf("an instance is %d bytes, over the 288-byte class it fits", n)
	}
}
