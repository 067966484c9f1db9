package fleet

import "time"

// activity is the snapshot the idle decision reads: taken under one lock,
// so a request that ends between two reads can never make a busy server
// look idle.
type activity struct {
	now          time.Time
	lastActivity time.Time
	startedAt    time.Time // when the current process connected
	inflight     int
	ready        bool
}

// idleDecision says whether an instance should go dormant now and, if
// not, when to look again (zero: only after something changes).
//
// Dormant requires all of: the process is ready (not starting, stopping or
// restarting); no request is in flight, however small the timeout; the
// spawn grace period since the process connected has passed; no message in
// either direction for the idle timeout. An idle timeout of 0 disables it.
func idleDecision(a activity, idle, grace time.Duration) (sleep bool, next time.Time) {
	if idle <= 0 || !a.ready {
		return false, time.Time{}
	}
	due := a.lastActivity.Add(idle)
	if g := a.startedAt.Add(grace); g.After(due) {
		due = g
	}
	if a.inflight > 0 {
		// Nothing to look at until the last request ends, which re-arms
		// the timer (and counts as activity).
		return false, time.Time{}
	}
	if a.now.Before(due) {
		return false, due
	}
	return true, time.Time{}
}
