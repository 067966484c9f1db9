package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines are the request timers of one timeout. The requests of a
// server share its requestTimeout, and a timer restarts only to the full
// timeout, so their deadlines come nearly in the order the timers are
// armed and touched: a list ordered by deadline, with one runtime timer
// armed no later than its head, costs a request a lock and a few pointer
// writes — where a runtime timer of its own (time.AfterFunc, Reset,
// Stop) costs it an allocation and two updates of the runtime's timer
// heap, whose checks every scheduling round then pays too. A request that
// ends takes its timer out of the list and leaves the runtime timer as
// it is: it fires at most once more, finds the head later than that, and
// is armed for it.
type deadlines struct {
	timeout time.Duration
	base    time.Time // the list's clock: deadlines are nanoseconds since base (monotonic)

	mu         sync.Mutex
	head, tail *reqTimer
	timer      *time.Timer // made at the first arm
	armedFor   int64       // the deadline the timer fires at; 0: not armed, only while the list is empty
}

// reqTimer is a forwarded request's timeout (flight.armTimer), in its
// timeout's list. Its methods are safe to call concurrently: touch from
// the goroutines that relay the server's progress and the client's
// answers, stop from the request's, and the list's timer ends the
// request (cancel) after it took it out of the list, outside the list's
// lock (a cancel may take any lock; touch runs under the registry's). A
// stop that races the fire may therefore be followed by that one cancel:
// cancels are idempotent (flight.stop, a context's cancel), and the
// first cause is the one kept.
type reqTimer struct {
	q       *deadlines
	cancel  context.CancelCauseFunc
	waiting *atomic.Int32 // the call's requests waiting on the client

	// Guarded by q.mu.
	deadline   int64
	prev, next *reqTimer
	queued     bool
	fired      *reqTimer // the next of a fire's ended timers
}

// deadlinesOf is the list of the request timers of timeout.
func (g *Gateway) deadlinesOf(timeout time.Duration) *deadlines {
	if q, ok := g.deadlines.Load(timeout); ok {
		return q.(*deadlines)
	}
	q, _ := g.deadlines.LoadOrStore(timeout, &deadlines{timeout: timeout, base: time.Now()})
	return q.(*deadlines)
}

// now is the list's clock.
func (q *deadlines) now() int64 { return int64(time.Since(q.base)) }

// add puts rt in the list, due a timeout after start.
func (q *deadlines) add(rt *reqTimer, start time.Time) {
	due := int64(start.Sub(q.base) + q.timeout)
	q.mu.Lock()
	rt.q = q
	rt.deadline = due
	q.insertLocked(rt)
	if q.armedFor == 0 || due < q.armedFor {
		q.armLocked(due)
	}
	q.mu.Unlock()
}

// insertLocked puts rt in its place by deadline, looked for from the tail
// (where it nearly always is).
func (q *deadlines) insertLocked(rt *reqTimer) {
	p := q.tail
	for p != nil && p.deadline > rt.deadline {
		p = p.prev
	}
	rt.prev = p
	if p == nil {
		rt.next = q.head
		q.head = rt
	} else {
		rt.next = p.next
		p.next = rt
	}
	if rt.next == nil {
		q.tail = rt
	} else {
		rt.next.prev = rt
	}
	rt.queued = true
}

// removeLocked takes rt out of the list.
func (q *deadlines) removeLocked(rt *reqTimer) {
	if rt.prev == nil {
		q.head = rt.next
	} else {
		rt.prev.next = rt.next
	}
	if rt.next == nil {
		q.tail = rt.prev
	} else {
		rt.next.prev = rt.prev
	}
	rt.prev, rt.next, rt.queued = nil, nil, false
}

// armLocked sets the runtime timer to fire at due.
func (q *deadlines) armLocked(due int64) {
	q.armedFor = due
	d := time.Duration(due - q.now())
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.fire)
		return
	}
	q.timer.Reset(d)
}

// fire ends the requests whose deadline passed, with errTimeout — but a
// request that waits on its client starts its timeout again — and arms
// the timer for the next deadline, if any.
func (q *deadlines) fire() {
	var ended *reqTimer
	q.mu.Lock()
	now := q.now()
	q.armedFor = 0
	for rt := q.head; rt != nil && rt.deadline <= now; rt = q.head {
		q.removeLocked(rt)
		if rt.waiting.Load() > 0 {
			rt.deadline = now + int64(q.timeout)
			q.insertLocked(rt)
			continue
		}
		rt.fired, ended = ended, rt
	}
	if q.head != nil {
		q.armLocked(q.head.deadline)
	}
	q.mu.Unlock()
	for rt := ended; rt != nil; {
		next := rt.fired
		rt.fired = nil
		rt.cancel(errTimeout)
		rt = next
	}
}

// touch restarts the timeout. A nil reqTimer (no timeout), or one
// stopped, does nothing.
func (rt *reqTimer) touch() {
	if rt == nil {
		return
	}
	q := rt.q
	q.mu.Lock()
	if rt.queued {
		q.removeLocked(rt)
		rt.deadline = q.now() + int64(q.timeout)
		q.insertLocked(rt)
		// The timer stays as it is: armed (the list is not empty), no
		// later than the old deadline, which this one follows.
	}
	q.mu.Unlock()
}

// stop ends the timer for good: it is out of the list, and holds nothing
// of the flight.
func (rt *reqTimer) stop() {
	q := rt.q
	q.mu.Lock()
	if rt.queued {
		q.removeLocked(rt)
	}
	q.mu.Unlock()
}
