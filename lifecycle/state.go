package lifecycle

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// State is where a supervised connection is in its life. The zero value is
// StateStopped. See the package documentation for the state diagram; the
// allowed transitions are defined by canTransition and enforced by Tracker.
type State int

const (
	// StateStopped: not running and not trying to. The initial state, and
	// the state after Stop, after a first connect that failed with a
	// transient error, and after a clean session end that the Policy does
	// not restart.
	StateStopped State = iota
	// StateStarting: Start is making the first connection of a run.
	StateStarting
	// StateReady: connected and serving.
	StateReady
	// StateDegraded: connected and serving, but something (a failed health
	// check, a failed call) says it may not be well. Set and cleared by the
	// owner of the Supervisor with MarkDegraded and MarkHealthy; the
	// Supervisor treats it like Ready.
	StateDegraded
	// StateRestarting: the session ended and the Supervisor is waiting out a
	// backoff delay or reconnecting.
	StateRestarting
	// StateFailed: the Supervisor gave up (restart limit, permanent error,
	// or RestartNever after a failure). LastError says why. It stays here
	// until Start or Stop is called.
	StateFailed
)

var stateNames = [...]string{
	StateStopped:    "stopped",
	StateStarting:   "starting",
	StateReady:      "ready",
	StateDegraded:   "degraded",
	StateRestarting: "restarting",
	StateFailed:     "failed",
}

// String returns the lower-case name of s ("stopped", "ready", …), or
// "State(n)" for a value outside the enum.
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// IsTerminal reports whether s is a resting state that only Start or Stop
// leaves: StateStopped or StateFailed. No goroutine of the Supervisor runs
// while it rests in a terminal state.
func (s State) IsTerminal() bool {
	return s == StateStopped || s == StateFailed
}

// canTransition is the lifecycle state machine: the single place that says
// which state changes are allowed. Staying in the same state is always
// allowed (it is not a transition). Every other pair not listed is refused.
func canTransition(from, to State) bool {
	if from == to {
		return from >= StateStopped && from <= StateFailed
	}
	switch from {
	case StateStopped:
		return to == StateStarting
	case StateStarting:
		return to == StateReady || to == StateStopped || to == StateFailed
	case StateReady:
		return to == StateDegraded || to == StateRestarting || to == StateStopped || to == StateFailed
	case StateDegraded:
		return to == StateReady || to == StateRestarting || to == StateStopped || to == StateFailed
	case StateRestarting:
		return to == StateReady || to == StateStopped || to == StateFailed
	case StateFailed:
		return to == StateStarting || to == StateStopped
	}
	return false
}

// StateInfo is a consistent snapshot of a Tracker.
type StateInfo struct {
	State State
	// Since is when State was entered. Zero for a zero Tracker that has
	// never changed state.
	Since time.Time
	// LastError is the error recorded by the last Fail, or nil if a Set
	// has entered a new state since.
	LastError error
	// Restarts counts, in a Supervisor, the reconnect attempts it made
	// since the last Start.
	Restarts int
	// Failures is, in a Supervisor's state, its Streak's count: the runs
	// in a row that failed before answering anything (a Connect that
	// failed, a session that ended unanswered: see Answerer) since the
	// last reset. It spans Starts. Two or more make a crash loop. A
	// Tracker alone leaves it 0.
	Failures int
	// NextAttempt is when the next connect attempt is due: a Restarting
	// Supervisor's, or, in Stopped or Failed, the earliest a Start
	// connects in a crash loop (see Supervisor.CrashLoop). Zero when none
	// is due later: an attempt is in progress or may be made at once.
	// A Tracker's is cleared by entering Starting, Ready or Degraded.
	NextAttempt time.Time
}

// Tracker holds one connection's state, the time it was entered, the last
// error and a restart counter, and refuses state changes that
// canTransition does not allow. It is safe for concurrent use.
//
// The zero value is ready to use and in StateStopped.
type Tracker struct {
	mu       sync.Mutex
	state    State
	since    time.Time
	lastErr  error
	restarts int
	next     time.Time
	changed  chan struct{} // closed and replaced at each change; nil until asked for
}

// Changed returns a channel that is closed at the next change of the
// state, of the last error or of the next attempt's time. Read it before
// looking at the state you mean to wait on, so that no change is missed.
func (t *Tracker) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	return t.changed
}

// notifyLocked wakes the waiters of Changed. Callers hold mu.
func (t *Tracker) notifyLocked() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// SetNextAttempt records when the next connect attempt is due (zero: none
// scheduled). It is kept across state changes but those to Starting, Ready
// and Degraded, which clear it.
func (t *Tracker) SetNextAttempt(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next = at
	t.notifyLocked()
}

// NewTracker returns a Tracker in StateStopped whose Since is now.
func NewTracker() *Tracker {
	return &Tracker{since: time.Now()}
}

// Set moves the Tracker to s and clears the last error. Setting the current
// state again is a no-op that keeps Since and the last error. A transition
// the state machine does not allow is not applied; Set returns an error
// wrapping ErrInvalidTransition.
func (t *Tracker) Set(s State) error {
	return t.transition(nil, s, nil)
}

// Fail moves the Tracker to s and records err as the last error. If s is the
// current state, only the last error is updated (Since is kept), which is
// how a Supervisor records each failed attempt while Restarting. Fail with
// a nil err behaves like Set. Refused transitions are not applied and
// return an error wrapping ErrInvalidTransition.
func (t *Tracker) Fail(s State, err error) error {
	return t.transition(nil, s, err)
}

// transition is the only mutator of state. If from is non-nil, the change
// is applied only when the current state is one of *from (a compare-and-set
// for callers racing with the Supervisor's own goroutine).
func (t *Tracker) transition(from []State, to State, err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.state
	if from != nil && !contains(from, cur) {
		return fmt.Errorf("%w: %s → %s (only from %v)", ErrInvalidTransition, cur, to, from)
	}
	if !canTransition(cur, to) {
		return fmt.Errorf("%w: %s → %s", ErrInvalidTransition, cur, to)
	}
	if cur == to {
		if err != nil {
			t.lastErr = err
			t.notifyLocked()
		}
		return nil
	}
	t.state = to
	t.since = time.Now()
	t.lastErr = err
	if to == StateStarting || to == StateReady || to == StateDegraded {
		t.next = time.Time{} // an attempt is made: none is due
	}
	t.notifyLocked()
	return nil
}

func contains(list []State, s State) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// State returns the current state.
func (t *Tracker) State() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// LastError returns the error recorded by the most recent Fail, or nil if a
// Set has moved to another state since.
func (t *Tracker) LastError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

// IncRestarts adds one to the restart counter and returns the new value.
func (t *Tracker) IncRestarts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.restarts++
	return t.restarts
}

// ResetRestarts sets the restart counter to zero. A Supervisor calls it on
// Start.
func (t *Tracker) ResetRestarts() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.restarts = 0
}

// Restarts returns the restart counter.
func (t *Tracker) Restarts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.restarts
}

// Snapshot returns state, since, last error and restart counter read
// together.
func (t *Tracker) Snapshot() StateInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return StateInfo{State: t.state, Since: t.since, LastError: t.lastErr, Restarts: t.restarts, NextAttempt: t.next}
}
