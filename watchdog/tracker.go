package watchdog

import (
	"sync"
	"time"
)

// Tracker records a server's activity for the watchdog: when it last did
// something and how many requests it is handling. Its Snapshot method is a
// ready-made Config.State.
//
// Call Begin when a request has been read and End once its response has
// been written and flushed. Call Touch for any other activity that should
// count against the idle timeout (a notification, a keep-alive).
//
// Both values live under one mutex and Snapshot reads them together. That is
// the point of the type: a watchdog that read "last activity" and "in flight"
// separately could read the old timestamp of a long request, then — after
// the request ended in between — an in-flight count of 0, and reap the
// server just as it finished the request, before the response was flushed.
// With Snapshot it sees either (request start, 1) or (request end, 0); the
// first is busy and the second has just been active, so neither is idle.
//
// The zero Tracker is ready to use with the system clock; its idle time is
// counted from its first use. All methods are safe for concurrent use.
type Tracker struct {
	now func() time.Time // nil: time.Now

	mu       sync.Mutex
	last     time.Time // zero until first use
	inflight int
}

// NewTracker returns a Tracker that reads the clock now (nil: time.Now) and
// whose idle time is counted from this call. Use the same clock as
// Config.Now. The clock is read under the Tracker's lock, so activity is
// recorded in the order it happened; it must not call the Tracker.
func NewTracker(now func() time.Time) *Tracker {
	t := &Tracker{now: now}
	t.last = t.clock()
	return t
}

func (t *Tracker) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// Begin records that a request has started: one more in flight, and
// activity now.
func (t *Tracker) Begin() {
	t.mu.Lock()
	t.inflight++
	t.last = t.clock()
	t.mu.Unlock()
}

// End records that a request has finished: one fewer in flight, and
// activity now, so the idle timeout counts from the end of the request. Call
// it after the response has been flushed. End without a matching Begin
// panics, like a negative sync.WaitGroup counter: undercounting would let
// the idle rule reap a server with work in flight.
func (t *Tracker) End() {
	t.mu.Lock()
	if t.inflight == 0 {
		t.mu.Unlock()
		panic("watchdog: Tracker.End without a matching Begin")
	}
	t.inflight--
	t.last = t.clock()
	t.mu.Unlock()
}

// Touch records activity now without changing the in-flight count.
func (t *Tracker) Touch() {
	t.mu.Lock()
	t.last = t.clock()
	t.mu.Unlock()
}

// Snapshot returns the time of the last activity and the number of requests
// in flight, read together as one consistent pair. A zero Tracker's first
// Snapshot starts its idle clock.
func (t *Tracker) Snapshot() (lastActivity time.Time, inflight int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last.IsZero() {
		t.last = t.clock()
	}
	return t.last, t.inflight
}
