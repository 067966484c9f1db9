package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// timedCall arms a request timer of timeout, as begin does, whose cancel
// counts its calls and records its cause.
func timedCall(timeout time.Duration) (*flight, *call, *atomic.Int32, *atomic.Value) {
	var n atomic.Int32
	var cause atomic.Value
	f := &flight{timeout: timeout, start: time.Now(), cancel: func(err error) {
		n.Add(1)
		cause.Store(err)
	}}
	c := &f.call
	f.armTimer(c)
	return f, c, &n, &cause
}

// The request timer ends the call once, with errTimeout, when the
// timeout has run out since the last touch, and not before; a touch
// restarts it; a wait on the client holds it.
func TestReqTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, n, cause := timedCall(time.Second)
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if n.Load() != 0 {
			t.Fatal("cancelled before its timeout")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if n.Load() != 1 || !errors.Is(cause.Load().(error), errTimeout) {
			t.Fatalf("at its timeout: %d cancels, cause %v", n.Load(), cause.Load())
		}
		time.Sleep(10 * time.Second)
		if n.Load() != 1 {
			t.Fatalf("%d cancels, want exactly one", n.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		_, c, n, _ := timedCall(time.Second)
		for range 5 { // progress every 600 ms: 3 s in all, never 1 s without
			time.Sleep(600 * time.Millisecond)
			c.touch()
		}
		synctest.Wait()
		if n.Load() != 0 {
			t.Fatal("cancelled although touched within every timeout")
		}
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if n.Load() != 0 {
			t.Fatal("cancelled before a timeout since the last touch")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if n.Load() != 1 {
			t.Fatalf("%d cancels a timeout after the last touch, want 1", n.Load())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		_, c, n, _ := timedCall(time.Second)
		c.waiting.Add(1) // a request of the server's waits on the client
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n.Load() != 0 {
			t.Fatal("cancelled while the server waited on the client")
		}
		c.touch() // the client answered
		c.waiting.Add(-1)
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if n.Load() != 1 {
			t.Fatalf("%d cancels a timeout after the answer, want 1", n.Load())
		}
	})
}

// Once stopped, the timer never ends its call, whatever touches race
// with the stop, and is left unarmed: it holds nothing of the flight.
func TestReqTimerStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c, n, _ := timedCall(time.Second)
		var wg sync.WaitGroup
		ctx, done := context.WithCancel(t.Context())
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					c.touch()
					time.Sleep(time.Millisecond)
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		f.timer.stop()
		time.Sleep(10 * time.Millisecond)
		done()
		wg.Wait()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n.Load() != 0 {
			t.Fatalf("%d cancels after stop", n.Load())
		}
		if f.rt.timer.Load().Stop() {
			t.Fatal("the timer was armed after stop")
		}
	})
	// The interleaving a race may or may not produce: a touch that saw
	// the call running resets the timer after stop.
	synctest.Test(t, func(t *testing.T) {
		f, _, n, _ := timedCall(time.Second)
		f.timer.stop()
		tm := f.rt.timer.Load()
		f.rt.reset(tm, time.Second)
		if tm.Stop() {
			t.Fatal("a reset after stop left the timer armed")
		}
		time.Sleep(5 * time.Second)
		if n.Load() != 0 {
			t.Fatalf("%d cancels after stop", n.Load())
		}
	})
	// No timeout, no timer: touching such a call does nothing.
	var c call
	c.touch()
}
