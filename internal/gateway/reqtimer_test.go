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
	return timedCallOf(&Gateway{}, timeout, time.Now())
}

// timedCallOf is timedCall in g's lists, started at start.
func timedCallOf(g *Gateway, timeout time.Duration, start time.Time) (*flight, *call, *atomic.Int32, *atomic.Value) {
	var n atomic.Int32
	var cause atomic.Value
	f := &flight{g: g, timeout: timeout, start: start, cancel: func(err error) {
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
// with the stop, and is out of its list: it holds nothing of the flight.
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
		q := f.rt.q
		q.mu.Lock()
		defer q.mu.Unlock()
		if f.rt.queued || q.head != nil || q.tail != nil {
			t.Fatalf("after stop: queued %v, list %p…%p", f.rt.queued, q.head, q.tail)
		}
	})
	// A touch after the stop puts nothing back.
	synctest.Test(t, func(t *testing.T) {
		f, c, n, _ := timedCall(time.Second)
		f.timer.stop()
		c.touch()
		if f.rt.queued {
			t.Fatal("a touch after stop put the timer back in its list")
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

// Many requests of one timeout share a list: each ends exactly at its own
// deadline — whatever order they were armed in (a request that waited
// before it was forwarded is armed from its arrival), stopped or touched
// in — a stopped one never, one waiting on its client not while it waits;
// and the list's timer, armed for the first deadline, is re-armed as the
// head changes.
func TestReqTimerList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &Gateway{}
		t0 := time.Now()
		type timed struct {
			f *flight
			c *call
			n *atomic.Int32
		}
		var all []timed
		// Started 0, 300, 100, 200 … ms before now, armed in that order.
		for _, ago := range []time.Duration{0, 300, 100, 200, 50, 250} {
			f, c, n, _ := timedCallOf(g, time.Second, t0.Add(-ago*time.Millisecond))
			all = append(all, timed{f, c, n})
		}
		all[4].f.timer.stop()              // ended: due at 950 ms, never
		all[5].c.waiting.Add(1)            // waits on its client: due at 750 ms, held
		time.Sleep(400 * time.Millisecond) // now t0+400
		all[0].c.touch()                   // due at 1400 ms now
		check := func(at string, want ...int32) {
			t.Helper()
			synctest.Wait()
			for i, x := range all {
				if x.n.Load() != want[i] {
					t.Fatalf("at %s: request %d ended %d times, want %d", at, i, x.n.Load(), want[i])
				}
			}
		}
		time.Sleep(299 * time.Millisecond) // t0+699: none due yet
		check("699 ms", 0, 0, 0, 0, 0, 0)
		time.Sleep(2 * time.Millisecond) // t0+701: the one started 300 ms before
		check("701 ms", 0, 1, 0, 0, 0, 0)
		time.Sleep(100 * time.Millisecond) // t0+801: 200 ms before (800)
		check("801 ms", 0, 1, 0, 1, 0, 0)
		time.Sleep(100 * time.Millisecond) // t0+901: 100 ms before (900)
		check("901 ms", 0, 1, 1, 1, 0, 0)
		time.Sleep(100 * time.Millisecond) // t0+1001: the first was touched
		check("1001 ms", 0, 1, 1, 1, 0, 0)
		time.Sleep(400 * time.Millisecond) // t0+1401
		check("1401 ms", 1, 1, 1, 1, 0, 0)
		all[5].c.touch() // its client answered
		all[5].c.waiting.Add(-1)
		time.Sleep(999 * time.Millisecond)
		check("999 ms after the answer", 1, 1, 1, 1, 0, 0)
		time.Sleep(2 * time.Millisecond)
		check("a timeout after the answer", 1, 1, 1, 1, 0, 1)
		time.Sleep(time.Minute)
		check("a minute later", 1, 1, 1, 1, 0, 1)
		q := g.deadlinesOf(time.Second)
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.head != nil || q.armedFor != 0 {
			t.Fatalf("every request ended: list head %p, armed for %d", q.head, q.armedFor)
		}
	})
}
