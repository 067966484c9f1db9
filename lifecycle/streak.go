package lifecycle

import (
	"sync"
	"time"
)

// A Streak is a crash loop's record: how many runs in a row failed before
// answering anything (a Connect that failed, a session that ended
// unanswered: see Answerer), the last of those failures, and when the next
// attempt is due. Every Supervisor keeps one; Supervisors that start the
// same thing — a server's process for each of its clients, say — share one
// through Policy.Streak, so that a new Supervisor of a crash loop starts in
// it instead of afresh. The zero value is an empty record. A Streak is
// safe for concurrent use.
type Streak struct {
	mu       sync.Mutex
	failures int
	next     time.Time
	last     error
}

// Fail counts a failed run, ending with err, and sets the next attempt
// after delay of the new count (none when it is 0: Policy.RetryDelay is
// the one a Supervisor uses); it returns both. A Supervisor calls it for
// each run that failed before answering anything; the owner of a Streak
// for something no Supervisor runs (a second process of a server, say)
// calls it the same way.
func (k *Streak) Fail(err error, delay func(failures int) time.Duration) (int, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failures++
	k.last = err
	k.next = time.Time{}
	if d := delay(k.failures); d > 0 {
		k.next = time.Now().Add(d)
	}
	return k.failures, k.next
}

// Reset forgets the record: the next attempt may be made at once. A
// Supervisor resets its own Streak when a session answered or stayed up
// for its healthy period, and on Stop; a shared one only on an answer or
// a healthy period, its owner on whatever else ends the loop (an
// operator's stop, say).
func (k *Streak) Reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failures, k.next, k.last = 0, time.Time{}, nil
}

// snapshot returns the record.
func (k *Streak) snapshot() (failures int, next time.Time, last error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.failures, k.next, k.last
}

// Failures is the count of runs in a row that failed before answering.
func (k *Streak) Failures() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.failures
}

// CrashLoop is the *CrashLoopError of the record, naming name, or nil
// when it is no crash loop (fewer than two failures in a row) or its next
// attempt is due: what a Supervisor's CrashLoop says when it is not
// running, for the owner of a shared Streak that has no Supervisor at
// hand (one about to be made, say).
func (k *Streak) CrashLoop(name string) error {
	failures, next, last := k.snapshot()
	if failures < crashLoopRuns || next.IsZero() || !time.Now().Before(next) {
		return nil
	}
	return &CrashLoopError{Name: name, Failures: failures, Next: next, Last: last}
}
