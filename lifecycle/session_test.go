package lifecycle

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// wantSession fails the test unless s.Session() is want (nil for none).
func wantSession(t *testing.T, s *Supervisor, want *fakeSession) {
	t.Helper()
	got := s.Session()
	switch {
	case want == nil && got != nil:
		t.Fatalf("Session = session %d, want nil", got.(*fakeSession).seq)
	case want != nil && got == nil:
		t.Fatalf("Session = nil, want session %d", want.seq)
	case want != nil && got != Session(want):
		t.Fatalf("Session = session %d, want session %d", got.(*fakeSession).seq, want.seq)
	}
}

// Session is nil until the first connect succeeds, and then the session
// Connect returned.
func TestSessionBeforeAndAfterStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		conn := &fakeConnector{script: func(context.Context, int) error { <-release; return nil }}
		s := newSup(t, conn, Policy{Logger: quiet})
		wantSession(t, s, nil)
		errc := make(chan error, 1)
		go func() { errc <- s.Start(context.Background()) }()
		synctest.Wait()
		wantState(t, s, StateStarting)
		wantSession(t, s, nil) // connecting
		close(release)
		must(t, <-errc)
		wantState(t, s, StateReady)
		wantSession(t, s, conn.last())
		stop(t, s)
	})
}

// sessionWhileMovingToReady holds the Supervisor's state lock while it lets
// a Connect blocked on release return, so that the run stops in its move
// to Ready, and returns the Session seen meanwhile (nil if none comes).
func sessionWhileMovingToReady(s *Supervisor, release chan<- struct{}) Session {
	s.tr.mu.Lock()
	defer s.tr.mu.Unlock()
	release <- struct{}{}
	for range 100_000 {
		if sess := s.Session(); sess != nil {
			return sess
		}
		runtime.Gosched()
	}
	return nil
}

// The session is handed out before the move to Ready, on the first connect
// and on a reconnect: whoever observes Ready (State, Changed, Start
// returning) finds it.
func TestSessionStoredBeforeReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		conn := &fakeConnector{script: func(context.Context, int) error { <-release; return nil }}
		s := newSup(t, conn, Policy{Logger: quiet})
		errc := make(chan error, 1)
		go func() { errc <- s.Start(context.Background()) }()
		synctest.Wait()
		got := sessionWhileMovingToReady(s, release)
		must(t, <-errc)
		first := conn.last()
		if got != Session(first) {
			t.Fatalf("Session while moving to Ready = %v, want the first session", got)
		}

		restarted := s.Restarted()
		first.end(errors.New("crash"))
		synctest.Wait()
		wantState(t, s, StateRestarting) // reconnecting, at once after one failure
		got = sessionWhileMovingToReady(s, release)
		<-restarted
		second := conn.last()
		if second == first || got != Session(second) {
			t.Fatalf("Session while moving to Ready again = %v, want the second session", got)
		}
		stop(t, s)
	})
}

// A session that ends on its own is no longer handed out by the time
// OnDisconnect runs; by OnRestart, Session is the new session.
func TestSessionClearedBeforeOnDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		var (
			s              *Supervisor
			mu             sync.Mutex
			inDisconnect   []Session
			inRestart      []Session
			disconnectSeen int
		)
		s = newSup(t, conn, Policy{
			Logger: quiet,
			OnDisconnect: func(error) {
				mu.Lock()
				inDisconnect = append(inDisconnect, s.Session())
				disconnectSeen++
				mu.Unlock()
			},
			OnRestart: func() {
				mu.Lock()
				inRestart = append(inRestart, s.Session())
				mu.Unlock()
			},
		})
		must(t, s.Start(context.Background()))
		first := conn.last()
		wantSession(t, s, first)

		restarted := s.Restarted()
		first.end(errors.New("crash")) // Wait returns an error
		<-restarted
		second := conn.last()
		if second == first {
			t.Fatal("no new session after the crash")
		}
		wantState(t, s, StateReady)
		wantSession(t, s, second)

		stop(t, s) // the second session's end goes through OnDisconnect too
		wantSession(t, s, nil)
		mu.Lock()
		defer mu.Unlock()
		if disconnectSeen != 2 || len(inRestart) != 1 {
			t.Fatalf("OnDisconnect calls = %d, OnRestart calls = %d; want 2 and 1", disconnectSeen, len(inRestart))
		}
		for i, got := range inDisconnect {
			if got != nil {
				t.Fatalf("OnDisconnect %d got Session %d, want nil", i+1, got.(*fakeSession).seq)
			}
		}
		if inRestart[0] != Session(second) {
			t.Fatalf("OnRestart got Session %v, want the new session %d", inRestart[0], second.seq)
		}
	})
}

// After Stop returns, Session is nil; the session Stop closed is not handed
// out even while Stop still waits for it to end.
func TestSessionNilAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		sess := conn.last()
		stop(t, s)
		if sess.closes.Load() == 0 {
			t.Fatal("Stop did not close the session")
		}
		wantSession(t, s, nil)

		// A session slow to end after Close: handed out while its close is
		// under way (it has not ended), nil once it has ended.
		conn.mu.Lock()
		conn.stuck = true
		conn.mu.Unlock()
		must(t, s.Start(context.Background()))
		stuck := conn.last()
		defer stuck.end(nil) // also on a failure, so that Stop can finish
		wantSession(t, s, stuck)
		stopc := make(chan error, 1)
		go func() { stopc <- s.Stop(context.Background()) }()
		synctest.Wait()
		if stuck.closes.Load() == 0 {
			t.Fatal("Stop did not close the session")
		}
		wantSession(t, s, stuck)
		stuck.end(nil)
		must(t, <-stopc)
		wantState(t, s, StateStopped)
		wantSession(t, s, nil)
	})
}

// RestartAndWait: after the call, the new session is handed out, and the
// old one never again.
func TestSessionAcrossRestartAndWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		first := conn.last()
		must(t, s.RestartAndWait(context.Background(), 0))
		second := conn.last()
		if second == first || !first.ended() {
			t.Fatal("RestartAndWait did not replace the session")
		}
		wantSession(t, s, second)
		stop(t, s)
		wantSession(t, s, nil)
	})
}

// MarkDegraded and MarkHealthy leave the session alone.
func TestSessionUnchangedByDegraded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		sess := conn.last()
		must(t, s.MarkDegraded(errors.New("health check: slow")))
		wantState(t, s, StateDegraded)
		wantSession(t, s, sess)
		must(t, s.MarkHealthy())
		wantState(t, s, StateReady)
		wantSession(t, s, sess)
		stop(t, s)
	})
}

// Session is nil during a Restarting wait, while a reconnect is under way,
// and in Failed.
func TestSessionNilWhileRestartingAndFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(ctx context.Context, n int) error {
			switch n {
			case 1, 4:
				return nil
			case 2, 3:
				return ErrServerUnavailable
			case 5:
				return blockUntilCancel(ctx) // until InitTimeout
			default:
				return ErrAuthRequired
			}
		}}
		s := newSup(t, conn, Policy{InitTimeout: time.Minute, Logger: quiet})
		must(t, s.Start(context.Background()))
		conn.last().end(errors.New("crash"))
		advance(time.Second / 2) // attempt 2 failed at once, attempt 3 due in 1s
		wantState(t, s, StateRestarting)
		wantSession(t, s, nil)
		advance(time.Second) // attempt 3 failed, attempt 4 due in 2s
		wantState(t, s, StateRestarting)
		wantSession(t, s, nil)
		advance(2 * time.Second) // attempt 4 connected
		wantState(t, s, StateReady)
		wantSession(t, s, conn.last())

		conn.last().answered.Store(true)
		conn.last().end(errors.New("crash"))
		advance(time.Second) // attempt 5 connecting, at once after a success
		wantState(t, s, StateRestarting)
		if n := conn.nCalls(); n != 5 {
			t.Fatalf("Connect calls = %d, want 5", n)
		}
		wantSession(t, s, nil)
		advance(time.Minute) // attempt 5 timed out; 6 fails permanently
		wantState(t, s, StateFailed)
		wantSession(t, s, nil)
		stop(t, s)
		wantSession(t, s, nil)
	})
}

// A session made by a Connect whose start was interrupted — by Stop or by
// Start's context — is never handed out.
func TestSessionNeverHandsOutADiscardedOne(t *testing.T) {
	for _, by := range []string{"Stop", "Start's context"} {
		t.Run(by, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				conn := &fakeConnector{script: func(context.Context, int) error { <-release; return nil }}
				s := newSup(t, conn, Policy{Logger: quiet})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				errc := make(chan error, 1)
				go func() { errc <- s.Start(ctx) }()
				synctest.Wait()
				stopc := make(chan error, 1)
				if by == "Stop" {
					go func() { stopc <- s.Stop(context.Background()) }()
				} else {
					cancel()
					stopc <- nil
				}
				synctest.Wait()
				wantSession(t, s, nil)
				close(release)
				must(t, <-stopc)
				if err := <-errc; err == nil {
					t.Fatal("interrupted Start returned nil")
				}
				synctest.Wait()
				wantState(t, s, StateStopped)
				sess := conn.last()
				if sess == nil || !sess.ended() {
					t.Fatal("the interrupted connect's session was not closed")
				}
				wantSession(t, s, nil)
			})
		})
	}
}

// TestSessionConcurrentWithRestarts reads Session and State from many
// goroutines while the Supervisor restarts over and over (sessions that
// crash, RestartAndWait, Stop and Start). Whatever Session returns must be
// a session the run has not yet reported ended: OnDisconnect records the
// last session whose end the run saw, and a reader that read that record
// before calling Session must never get that session or an earlier one —
// in particular, never one that Stop closed once Stop has returned. Run
// with -race.
func TestSessionConcurrentWithRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		done := make(chan struct{}) // closed to stop the readers
		var (
			wg     sync.WaitGroup
			ended  atomic.Int64 // seq of the last session OnDisconnect was called for
			checks atomic.Int64 // checks the readers made
			handed atomic.Int64 // non-nil Sessions the readers got
			bad    atomic.Bool  // one report is enough
		)
		s := newSup(t, conn, Policy{
			Restart:     RestartAlways,
			MaxAttempts: -1,
			Logger:      quiet,
			OnDisconnect: func(error) {
				// No Connect runs while a session is watched, so the
				// connector's last session is the one that ended.
				ended.Store(int64(conn.last().seq))
				// Take a while, as a real callback may: let every
				// reader check a few times while the run is here.
				for c0 := checks.Load(); checks.Load() < c0+32; runtime.Gosched() {
					select {
					case <-done:
						return
					default:
					}
				}
			},
		})
		must(t, s.Start(context.Background()))

		// Also on a failure, so that the readers do not outlive the test.
		stopReaders := sync.OnceFunc(func() { close(done); wg.Wait() })
		defer stopReaders()
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					seen := ended.Load()
					sess := s.Session()
					_ = s.State()
					if sess != nil {
						handed.Add(1)
						if f := sess.(*fakeSession); int64(f.seq) <= seen && !bad.Swap(true) {
							t.Errorf("Session = session %d after the run reported session %d ended", f.seq, seen)
						}
					}
					checks.Add(1)
					runtime.Gosched()
				}
			})
		}

		for i := range 300 {
			switch i % 3 {
			case 0: // a crash after useful work: reconnected at once
				restarted := s.Restarted()
				sess := conn.last()
				sess.answered.Store(true)
				sess.end(errors.New("crash"))
				<-restarted
			case 1:
				must(t, s.RestartAndWait(context.Background(), 0))
			case 2:
				last := conn.last()
				must(t, s.Stop(context.Background()))
				if last.closes.Load() == 0 {
					t.Fatal("Stop did not close the session")
				}
				if got := s.Session(); got != nil {
					t.Fatalf("Session = session %d after Stop returned", got.(*fakeSession).seq)
				}
				must(t, s.Start(context.Background()))
			}
			if got := s.Session(); got != Session(conn.last()) {
				t.Fatalf("round %d: Session is not the connector's latest session", i)
			}
		}
		stopReaders()
		stop(t, s)
		wantSession(t, s, nil)
		if handed.Load() == 0 {
			t.Fatal("the readers never saw a session; the test exercised nothing")
		}
	})
}
