package lifecycle

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var allStates = []State{StateStopped, StateStarting, StateReady, StateDegraded, StateRestarting, StateFailed}

// allowed is the state machine written out independently of canTransition:
// every (from, to) pair with from != to that must be accepted.
var allowed = map[[2]State]bool{
	{StateStopped, StateStarting}: true,

	{StateStarting, StateReady}:   true,
	{StateStarting, StateStopped}: true,
	{StateStarting, StateFailed}:  true,

	{StateReady, StateDegraded}:   true,
	{StateReady, StateRestarting}: true,
	{StateReady, StateStopped}:    true,
	{StateReady, StateFailed}:     true,

	{StateDegraded, StateReady}:      true,
	{StateDegraded, StateRestarting}: true,
	{StateDegraded, StateStopped}:    true,
	{StateDegraded, StateFailed}:     true,

	{StateRestarting, StateReady}:   true,
	{StateRestarting, StateStopped}: true,
	{StateRestarting, StateFailed}:  true,

	{StateFailed, StateStarting}: true,
	{StateFailed, StateStopped}:  true,
}

func TestCanTransition(t *testing.T) {
	for _, from := range allStates {
		for _, to := range allStates {
			want := from == to || allowed[[2]State{from, to}]
			if got := canTransition(from, to); got != want {
				t.Errorf("canTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	for _, bad := range []State{-1, 6, 100} {
		for _, s := range allStates {
			if canTransition(bad, s) || canTransition(s, bad) {
				t.Errorf("transition between %s and out-of-range %s allowed", s, bad)
			}
		}
	}
}

func TestTrackerEnforcesTransitions(t *testing.T) {
	for _, from := range allStates {
		for _, to := range allStates {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				tr := &Tracker{state: from}
				err := tr.Set(to)
				want := from == to || allowed[[2]State{from, to}]
				if want {
					if err != nil {
						t.Fatalf("Set: %v", err)
					}
					if got := tr.State(); got != to {
						t.Fatalf("state = %s, want %s", got, to)
					}
					return
				}
				if !errors.Is(err, ErrInvalidTransition) {
					t.Fatalf("Set error = %v, want ErrInvalidTransition", err)
				}
				if got := tr.State(); got != from {
					t.Fatalf("refused transition applied: state = %s, want %s", got, from)
				}
				if err := tr.Fail(to, errors.New("x")); !errors.Is(err, ErrInvalidTransition) {
					t.Fatalf("Fail error = %v, want ErrInvalidTransition", err)
				}
				if tr.LastError() != nil {
					t.Fatal("refused Fail recorded its error")
				}
			})
		}
	}
}

func TestStateString(t *testing.T) {
	want := []string{"stopped", "starting", "ready", "degraded", "restarting", "failed"}
	for i, s := range allStates {
		if s.String() != want[i] {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want[i])
		}
	}
	if got := State(42).String(); got != "State(42)" {
		t.Errorf("State(42).String() = %q", got)
	}
	if got := State(-1).String(); got != "State(-1)" {
		t.Errorf("State(-1).String() = %q", got)
	}
}

func TestStateIsTerminal(t *testing.T) {
	for _, s := range allStates {
		want := s == StateStopped || s == StateFailed
		if s.IsTerminal() != want {
			t.Errorf("%s.IsTerminal() = %v, want %v", s, s.IsTerminal(), want)
		}
	}
}

func TestTrackerSetAndFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var zero Tracker
		if info := zero.Snapshot(); info.State != StateStopped || !info.Since.IsZero() || info.LastError != nil || info.Restarts != 0 {
			t.Fatalf("zero Tracker snapshot = %+v", info)
		}

		tr := NewTracker()
		t0 := time.Now()
		if info := tr.Snapshot(); info.State != StateStopped || !info.Since.Equal(t0) {
			t.Fatalf("NewTracker snapshot = %+v", info)
		}

		<-time.After(time.Second) // fake clock
		must(t, tr.Set(StateStarting))
		boom := errors.New("boom")
		must(t, tr.Fail(StateFailed, boom))
		t1 := time.Now()
		if tr.LastError() != boom || tr.State() != StateFailed {
			t.Fatalf("after Fail: %+v", tr.Snapshot())
		}

		// Same-state Fail updates the error but keeps Since.
		<-time.After(time.Second)
		boom2 := errors.New("boom2")
		must(t, tr.Fail(StateFailed, boom2))
		if info := tr.Snapshot(); info.LastError != boom2 || !info.Since.Equal(t1) {
			t.Fatalf("same-state Fail: %+v", info)
		}
		// Same-state Set is a no-op: error and Since kept.
		must(t, tr.Set(StateFailed))
		if info := tr.Snapshot(); info.LastError != boom2 || !info.Since.Equal(t1) {
			t.Fatalf("same-state Set: %+v", info)
		}
		// Same-state Fail with nil keeps the error.
		must(t, tr.Fail(StateFailed, nil))
		if tr.LastError() != boom2 {
			t.Fatal("same-state Fail(nil) cleared the error")
		}

		// Set to a new state clears the error and moves Since.
		<-time.After(time.Second)
		must(t, tr.Set(StateStopped))
		if info := tr.Snapshot(); info.LastError != nil || !info.Since.Equal(time.Now()) || info.State != StateStopped {
			t.Fatalf("after Set: %+v", info)
		}

		if n := tr.IncRestarts(); n != 1 {
			t.Fatalf("IncRestarts = %d", n)
		}
		if n := tr.IncRestarts(); n != 2 || tr.Restarts() != 2 || tr.Snapshot().Restarts != 2 {
			t.Fatalf("IncRestarts = %d, Restarts = %d", n, tr.Restarts())
		}
		tr.ResetRestarts()
		if tr.Restarts() != 0 {
			t.Fatalf("after ResetRestarts: %d", tr.Restarts())
		}
	})
}

func TestTrackerCompareAndSet(t *testing.T) {
	tr := &Tracker{state: StateRestarting}
	err := tr.transition([]State{StateReady, StateDegraded}, StateDegraded, errors.New("x"))
	if !errors.Is(err, ErrInvalidTransition) || tr.State() != StateRestarting || tr.LastError() != nil {
		t.Fatalf("guarded transition from wrong state: err=%v state=%s", err, tr.State())
	}
	tr = &Tracker{state: StateReady}
	must(t, tr.transition([]State{StateReady}, StateDegraded, nil))
	if tr.State() != StateDegraded {
		t.Fatalf("state = %s", tr.State())
	}
}

func TestTrackerConcurrent(t *testing.T) {
	tr := NewTracker()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				_ = tr.Set(allStates[(i+j)%len(allStates)])
				_ = tr.Fail(allStates[(i*j)%len(allStates)], errors.New("e"))
				tr.IncRestarts()
				_ = tr.Snapshot()
				_ = tr.LastError()
				if j%50 == 0 {
					tr.ResetRestarts()
				}
			}
		}()
	}
	wg.Wait()
	if s := tr.State(); s < StateStopped || s > StateFailed {
		t.Fatalf("state out of range: %d", s)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
