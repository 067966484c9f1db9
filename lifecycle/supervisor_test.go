package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"weak"
)

// All Supervisor tests run inside synctest bubbles: the clock is fake and
// advances only when every goroutine in the bubble is blocked, so backoff
// schedules are checked to the nanosecond, and a goroutine left behind when
// the test function returns fails the test.

// advance lets d pass on the bubble's fake clock, then waits for the
// bubble to settle. It costs no real time.
func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

// fakeSession is an in-memory Session. end finishes it with a result;
// Close finishes it with nil unless stuck is set (a misbehaving session).
type fakeSession struct {
	done     chan struct{}
	once     sync.Once
	err      error
	closes   atomic.Int32
	stuck    bool
	answered atomic.Bool // it answered a request (Answerer)
	seq      int         // the Connect call that made it (1-based)
}

func (f *fakeSession) Answered() bool { return f.answered.Load() }

func newFakeSession() *fakeSession { return &fakeSession{done: make(chan struct{})} }

func (f *fakeSession) Wait() error { <-f.done; return f.err }

func (f *fakeSession) Close() error {
	f.closes.Add(1)
	if !f.stuck {
		f.end(nil)
	}
	return nil
}

func (f *fakeSession) end(err error) { f.once.Do(func() { f.err = err; close(f.done) }) }

func (f *fakeSession) ended() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// fakeConnector records every Connect call and asks script (if set) for
// the outcome of call n (1-based): a nil error means a new fakeSession.
type fakeConnector struct {
	mu       sync.Mutex
	script   func(ctx context.Context, n int) error
	stuck    bool // sessions ignore Close
	calls    []time.Time
	sessions []*fakeSession
}

func (c *fakeConnector) Connect(ctx context.Context) (Session, error) {
	c.mu.Lock()
	c.calls = append(c.calls, time.Now())
	n, script := len(c.calls), c.script
	c.mu.Unlock()
	if script != nil {
		if err := script(ctx, n); err != nil {
			return nil, err
		}
	}
	s := newFakeSession()
	s.seq = n
	c.mu.Lock()
	s.stuck = c.stuck
	c.sessions = append(c.sessions, s)
	c.mu.Unlock()
	return s, nil
}

func (c *fakeConnector) setScript(f func(ctx context.Context, n int) error) {
	c.mu.Lock()
	c.script = f
	c.mu.Unlock()
}

func (c *fakeConnector) nCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

func (c *fakeConnector) callTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.calls...)
}

func (c *fakeConnector) last() *fakeSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sessions) == 0 {
		return nil
	}
	return c.sessions[len(c.sessions)-1]
}

func (c *fakeConnector) all() []*fakeSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fakeSession(nil), c.sessions...)
}

// blockUntilCancel is a script step that hangs until its context ends.
func blockUntilCancel(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// recorder collects callback invocations.
type recorder struct {
	mu          sync.Mutex
	disconnects []error
	restarts    int
	failures    []error
}

func (r *recorder) policy(p Policy) Policy {
	p.OnDisconnect = func(err error) { r.mu.Lock(); r.disconnects = append(r.disconnects, err); r.mu.Unlock() }
	p.OnRestart = func() { r.mu.Lock(); r.restarts++; r.mu.Unlock() }
	p.OnFailed = func(err error) { r.mu.Lock(); r.failures = append(r.failures, err); r.mu.Unlock() }
	p.Logger = quiet
	return p
}

func (r *recorder) counts() (disconnects, restarts, failures int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.disconnects), r.restarts, len(r.failures)
}

func (r *recorder) failure(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[i]
}

func (r *recorder) disconnect(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.disconnects[i]
}

var quiet = slog.New(slog.DiscardHandler)

// newSup returns a Supervisor named "srv" that is stopped when the test
// ends, so a failing test reports its failure instead of tripping the
// bubble's deadlock detector.
func newSup(t *testing.T, conn Connector, p Policy) *Supervisor {
	s := New("srv", conn, p)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

func wantState(t *testing.T, s *Supervisor, want State) StateInfo {
	t.Helper()
	info := s.State()
	if info.State != want {
		t.Fatalf("state = %s (last error %v), want %s", info.State, info.LastError, want)
	}
	return info
}

func stop(t *testing.T, s *Supervisor) {
	t.Helper()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	wantState(t, s, StateStopped)
}

// failAfter returns a script whose first call succeeds, the next n fail
// with err, and later calls succeed.
func failAfter(n int, err error) func(context.Context, int) error {
	return func(_ context.Context, call int) error {
		if call >= 2 && call <= n+1 {
			return err
		}
		return nil
	}
}

func TestStartReadyStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{}))
		if s.Name() != "srv" {
			t.Fatalf("Name = %q", s.Name())
		}
		wantState(t, s, StateStopped)
		if s.IsReady() {
			t.Fatal("IsReady before Start")
		}
		must(t, s.Start(context.Background()))
		wantState(t, s, StateReady)
		if !s.IsReady() {
			t.Fatal("not IsReady after Start")
		}
		// Start while running is a no-op.
		must(t, s.Start(context.Background()))
		if n := conn.nCalls(); n != 1 {
			t.Fatalf("Connect calls = %d, want 1", n)
		}
		sess := conn.last()
		stop(t, s)
		if !sess.ended() || sess.closes.Load() == 0 {
			t.Fatal("session not closed by Stop")
		}
		d, r, f := rec.counts()
		if d != 1 || r != 0 || f != 0 || rec.disconnect(0) != nil {
			t.Fatalf("callbacks: disconnects=%d restarts=%d failures=%d", d, r, f)
		}
		// Stop again is a no-op.
		stop(t, s)
	})
}

func TestStartTransientFailureStaysStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(_ context.Context, n int) error {
			if n == 1 {
				return io.EOF
			}
			return nil
		}}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{}))
		err := s.Start(context.Background())
		if !errors.Is(err, ErrTransport) || !errors.Is(err, io.EOF) {
			t.Fatalf("Start = %v, want ErrTransport wrapping io.EOF", err)
		}
		info := wantState(t, s, StateStopped)
		if !errors.Is(info.LastError, io.EOF) {
			t.Fatalf("LastError = %v", info.LastError)
		}
		advance(time.Hour)
		if n := conn.nCalls(); n != 1 {
			t.Fatalf("Start retried: %d Connect calls", n)
		}
		if _, _, f := rec.counts(); f != 0 {
			t.Fatal("OnFailed called for a transient start failure")
		}
		// The caller retries.
		must(t, s.Start(context.Background()))
		wantState(t, s, StateReady)
		stop(t, s)
	})
}

func TestStartPermanentFailureParksInFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(_ context.Context, n int) error {
			if n == 1 {
				return fmt.Errorf("oauth: %w", ErrAuthRequired)
			}
			return nil
		}}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{}))
		if err := s.Start(context.Background()); !errors.Is(err, ErrAuthRequired) {
			t.Fatalf("Start = %v, want ErrAuthRequired", err)
		}
		info := wantState(t, s, StateFailed)
		if !errors.Is(info.LastError, ErrAuthRequired) {
			t.Fatalf("LastError = %v", info.LastError)
		}
		if _, _, f := rec.counts(); f != 1 || !errors.Is(rec.failure(0), ErrAuthRequired) {
			t.Fatalf("OnFailed calls = %d", f)
		}
		if err := s.RestartAndWait(context.Background(), 0); !errors.Is(err, ErrNotStarted) {
			t.Fatalf("RestartAndWait in Failed = %v, want ErrNotStarted", err)
		}
		// After the user authenticates, Start leaves Failed. The failed
		// start is still counted: only a session that answers, a healthy
		// period or Stop resets the count.
		must(t, s.Start(context.Background()))
		if info := wantState(t, s, StateReady); info.LastError != nil || info.Failures != 1 || info.Restarts != 0 {
			t.Fatalf("after restart from Failed: %+v", info)
		}
		stop(t, s)
	})
}

func TestStopAcknowledgesFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(context.Context, int) error { return ErrCapabilityMissing }}
		s := newSup(t, conn, Policy{Logger: quiet})
		if err := s.Start(context.Background()); !errors.Is(err, ErrCapabilityMissing) {
			t.Fatalf("Start = %v", err)
		}
		wantState(t, s, StateFailed)
		stop(t, s)
		if s.State().LastError != nil {
			t.Fatal("Stop kept the failure error")
		}
	})
}

func TestStartNilSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSup(t, connectorFunc(func(context.Context) (Session, error) { return nil, nil }), Policy{Logger: quiet})
		if err := s.Start(context.Background()); err == nil {
			t.Fatal("Start succeeded with a nil Session")
		}
		wantState(t, s, StateStopped)
	})
}

func TestConnectErrorWithSessionClosesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sess := newFakeSession()
		s := newSup(t, connectorFunc(func(context.Context) (Session, error) {
			return sess, errors.New("half-open")
		}), Policy{Logger: quiet})
		if err := s.Start(context.Background()); err == nil {
			t.Fatal("Start succeeded")
		}
		if sess.closes.Load() != 1 {
			t.Fatal("session returned with an error was not closed")
		}
	})
}

type connectorFunc func(context.Context) (Session, error)

func (f connectorFunc) Connect(ctx context.Context) (Session, error) { return f(ctx) }

func TestInitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(ctx context.Context, _ int) error {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) != 3*time.Second {
				return fmt.Errorf("deadline %v %v, want now+3s", dl, ok)
			}
			return blockUntilCancel(ctx)
		}}
		s := newSup(t, conn, Policy{InitTimeout: 3 * time.Second, Logger: quiet})
		t0 := time.Now()
		err := s.Start(context.Background())
		if !errors.Is(err, ErrInitTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start = %v, want ErrInitTimeout wrapping DeadlineExceeded", err)
		}
		if el := time.Since(t0); el != 3*time.Second {
			t.Fatalf("gave up after %v, want 3s", el)
		}
		wantState(t, s, StateStopped)
	})
}

func TestInitTimeoutAlreadyClassified(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mine := fmt.Errorf("handshake: %w", ErrInitTimeout)
		conn := &fakeConnector{script: func(ctx context.Context, _ int) error {
			<-ctx.Done()
			return mine
		}}
		s := newSup(t, conn, Policy{InitTimeout: time.Second, Logger: quiet})
		if err := s.Start(context.Background()); err != mine {
			t.Fatalf("Start = %v, want the connector's own ErrInitTimeout error unchanged", err)
		}
	})
}

func TestNoInitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(ctx context.Context, _ int) error {
			if _, ok := ctx.Deadline(); ok {
				return errors.New("unexpected deadline")
			}
			return nil
		}}
		s := newSup(t, conn, Policy{InitTimeout: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		stop(t, s)
	})
}

// TestStartContextValues checks that values of Start's ctx reach later
// Connect calls, while its cancellation does not end the run.
func TestStartContextValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		var seen []any
		var mu sync.Mutex
		conn := &fakeConnector{script: func(ctx context.Context, _ int) error {
			mu.Lock()
			seen = append(seen, ctx.Value(key{}))
			mu.Unlock()
			return nil
		}}
		s := newSup(t, conn, Policy{Logger: quiet})
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		must(t, s.Start(ctx))
		cancel()
		ch := s.Restarted()
		conn.last().end(errors.New("crash"))
		<-ch
		wantState(t, s, StateReady)
		mu.Lock()
		if len(seen) != 2 || seen[0] != "v" || seen[1] != "v" {
			t.Fatalf("values seen by Connect: %v", seen)
		}
		mu.Unlock()
		stop(t, s)
	})
}

// TestBackoffSequence checks the exact schedule of reconnect attempts
// after a crash: 1s, 2s, 4s … capped at 32s.
func TestBackoffSequence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(7, fmt.Errorf("dial: %w", ErrServerUnavailable))}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{MaxAttempts: -1}))
		must(t, s.Start(context.Background()))

		ch := s.Restarted()
		crash := time.Now()
		conn.last().end(errors.New("segfault"))
		synctest.Wait()
		// The first attempt is made at once, and fails: two failures in a
		// row, a crash loop, whose next attempt waits.
		info := wantState(t, s, StateRestarting)
		if !errors.Is(info.LastError, ErrServerUnavailable) || info.Failures != 2 || info.Restarts != 2 {
			t.Fatalf("while restarting: %+v", info)
		}
		if !errors.Is(s.CrashLoop(), ErrCrashLoop) {
			t.Fatalf("CrashLoop while restarting = %v", s.CrashLoop())
		}
		if d, _, _ := rec.counts(); d != 1 || rec.disconnect(0).Error() != "segfault" {
			t.Fatalf("OnDisconnect: %d, %v", d, rec.disconnect(0))
		}
		<-ch

		want := []time.Duration{0, 1, 2, 4, 8, 16, 32, 32}
		calls := conn.callTimes()
		if len(calls) != 1+len(want) {
			t.Fatalf("Connect calls = %d, want %d", len(calls), 1+len(want))
		}
		prev := crash
		for i, w := range want {
			if gap := calls[i+1].Sub(prev); gap != w*time.Second {
				t.Errorf("attempt %d after %v, want %v", i+1, gap, w*time.Second)
			}
			prev = calls[i+1]
		}
		// The count stands until the new session answers.
		info = wantState(t, s, StateReady)
		if info.Failures != len(want) || info.Restarts != len(want) || info.LastError != nil {
			t.Fatalf("after reconnect: %+v", info)
		}
		if d, r, f := rec.counts(); d != 1 || r != 1 || f != 0 {
			t.Fatalf("callbacks: disconnects=%d restarts=%d failures=%d", d, r, f)
		}
		stop(t, s)
	})
}

func TestBackoffSequenceJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const jitter = 0.5
		conn := &fakeConnector{script: failAfter(7, ErrServerUnavailable)}
		s := newSup(t, conn, Policy{MaxAttempts: -1, Backoff: Backoff{Jitter: jitter}, Logger: quiet})
		must(t, s.Start(context.Background()))
		ch := s.Restarted()
		crash := time.Now()
		conn.last().end(errors.New("crash"))
		<-ch

		calls := conn.callTimes()
		prev, shortened := crash, 0
		for i, w := range []time.Duration{0, 1, 2, 4, 8, 16, 32, 32} {
			full := w * time.Second
			gap := calls[i+1].Sub(prev)
			if gap < time.Duration(float64(full)*(1-jitter)) || gap > full {
				t.Errorf("attempt %d after %v, want within [%v, %v]", i+1, gap, time.Duration(float64(full)*(1-jitter)), full)
			}
			if gap < full {
				shortened++
			}
			prev = calls[i+1]
		}
		if shortened == 0 {
			t.Error("jitter never shortened a delay")
		}
		stop(t, s)
	})
}

func TestMaxAttemptsThenFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		crashErr := fmt.Errorf("exit 1: %w", ErrServerCrashed)
		conn := &fakeConnector{script: failAfter(1000, crashErr)}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{MaxAttempts: 3}))
		must(t, s.Start(context.Background()))
		crash := time.Now()
		conn.last().end(io.ErrUnexpectedEOF)
		advance(time.Minute)

		info := wantState(t, s, StateFailed)
		if el := info.Since.Sub(crash); el != 3*time.Second { // 0 + 1s + 2s
			t.Fatalf("failed %v after the crash, want 3s", el)
		}
		if !errors.Is(info.LastError, ErrRestartLimit) || !errors.Is(info.LastError, crashErr) {
			t.Fatalf("LastError = %v, want ErrRestartLimit wrapping the last attempt's error", info.LastError)
		}
		if n := conn.nCalls(); n != 1+3 {
			t.Fatalf("Connect calls = %d, want 4", n)
		}
		_, _, f := rec.counts()
		if f != 1 || rec.failure(0) != info.LastError {
			t.Fatalf("OnFailed calls = %d", f)
		}
		if !errors.Is(rec.disconnect(0), ErrTransport) {
			t.Fatalf("OnDisconnect got %v, want the classified EOF", rec.disconnect(0))
		}
		advance(time.Hour)
		if n := conn.nCalls(); n != 4 {
			t.Fatalf("Connect called in Failed: %d", n)
		}
		if _, _, f := rec.counts(); f != 1 {
			t.Fatalf("OnFailed called %d times", f)
		}
		stop(t, s)
	})
}

// TestRestartLimitCountsCrashLoops: successful reconnects do not reset the
// counter; only a healthy period does.
func TestRestartLimitCountsCrashLoops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{MaxAttempts: 2, HealthyPeriod: 10 * time.Minute}))
		must(t, s.Start(context.Background()))
		for i := 1; i <= 2; i++ {
			ch := s.Restarted()
			advance(time.Minute)
			conn.last().end(errors.New("crash"))
			<-ch
			if got := s.State().Failures; got != i {
				t.Fatalf("Failures = %d, want %d", got, i)
			}
		}
		advance(time.Minute)
		conn.last().end(errors.New("crash"))
		synctest.Wait()
		info := wantState(t, s, StateFailed)
		if !errors.Is(info.LastError, ErrRestartLimit) || info.LastError.Error() == "" {
			t.Fatalf("LastError = %v", info.LastError)
		}
		if _, _, f := rec.counts(); f != 1 {
			t.Fatalf("OnFailed calls = %d", f)
		}
	})
}

func TestHealthyPeriodResetsCounter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{MaxAttempts: 2, HealthyPeriod: time.Minute, Logger: quiet})
		must(t, s.Start(context.Background()))
		for range 2 {
			ch := s.Restarted()
			conn.last().end(errors.New("crash"))
			<-ch
		}
		if got := s.State().Failures; got != 2 {
			t.Fatalf("Failures = %d, want 2", got)
		}
		advance(time.Minute - time.Nanosecond)
		if got := s.State().Failures; got != 2 {
			t.Fatalf("reset early: Failures = %d", got)
		}
		advance(time.Nanosecond)
		if got := s.State().Failures; got != 0 {
			t.Fatalf("after the healthy period Failures = %d, want 0", got)
		}
		// The next crash starts the schedule over: a first failure, retried
		// at once.
		ch := s.Restarted()
		crash := time.Now()
		conn.last().end(errors.New("crash"))
		<-ch
		calls := conn.callTimes()
		if gap := calls[len(calls)-1].Sub(crash); gap != 0 {
			t.Fatalf("first attempt after reset waited %v, want none", gap)
		}
		if info := wantState(t, s, StateReady); info.Failures != 1 {
			t.Fatalf("Failures = %d, want 1", info.Failures)
		}
		stop(t, s)
	})
}

func TestNegativeHealthyPeriodNeverResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{MaxAttempts: 1, HealthyPeriod: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		ch := s.Restarted()
		conn.last().end(errors.New("crash"))
		<-ch
		advance(24 * time.Hour)
		if got := s.State().Failures; got != 1 {
			t.Fatalf("Failures = %d, want 1", got)
		}
		conn.last().end(errors.New("crash"))
		synctest.Wait()
		wantState(t, s, StateFailed)
	})
}

func TestRestartPolicies(t *testing.T) {
	crash := errors.New("crash")
	tests := []struct {
		name      string
		restart   Restart
		end       error
		want      State // state after the session ends and things settle
		reconnect bool
		failed    bool
	}{
		{"on-failure/error", RestartOnFailure, crash, StateReady, true, false},
		{"on-failure/clean", RestartOnFailure, nil, StateStopped, false, false},
		{"never/error", RestartNever, crash, StateFailed, false, true},
		{"never/clean", RestartNever, nil, StateStopped, false, false},
		{"always/error", RestartAlways, crash, StateReady, true, false},
		{"always/clean", RestartAlways, nil, StateReady, true, false},
		{"always/permanent", RestartAlways, fmt.Errorf("tools: %w", ErrCapabilityMissing), StateFailed, false, true},
		{"on-failure/permanent", RestartOnFailure, errors.New("401 Unauthorized"), StateFailed, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				conn := &fakeConnector{}
				var rec recorder
				s := newSup(t, conn, rec.policy(Policy{Restart: tt.restart}))
				must(t, s.Start(context.Background()))
				conn.last().end(tt.end)
				advance(time.Minute)

				info := wantState(t, s, tt.want)
				calls := conn.nCalls()
				if tt.reconnect != (calls == 2) {
					t.Fatalf("Connect calls = %d, reconnect expected: %v", calls, tt.reconnect)
				}
				d, r, f := rec.counts()
				if d != 1 {
					t.Fatalf("OnDisconnect calls = %d", d)
				}
				if (r == 1) != tt.reconnect {
					t.Fatalf("OnRestart calls = %d", r)
				}
				if (f == 1) != tt.failed || f > 1 {
					t.Fatalf("OnFailed calls = %d", f)
				}
				if tt.failed && !errors.Is(info.LastError, tt.end) {
					t.Fatalf("LastError = %v, want %v", info.LastError, tt.end)
				}
				if tt.want == StateStopped && info.LastError != nil {
					t.Fatalf("clean end recorded error %v", info.LastError)
				}
				stop(t, s)
			})
		})
	}
}

func TestPermanentErrorDuringReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(1000, ErrAuthRequired)}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{MaxAttempts: -1}))
		must(t, s.Start(context.Background()))
		conn.last().end(errors.New("crash"))
		advance(time.Hour)
		info := wantState(t, s, StateFailed)
		if !errors.Is(info.LastError, ErrAuthRequired) {
			t.Fatalf("LastError = %v", info.LastError)
		}
		if n := conn.nCalls(); n != 2 {
			t.Fatalf("Connect calls = %d, want 2 (no retry after a permanent error)", n)
		}
		if _, _, f := rec.counts(); f != 1 {
			t.Fatalf("OnFailed calls = %d", f)
		}
	})
}

func TestRestartAndWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		var rec recorder
		// Even RestartNever honours an explicit restart.
		s := newSup(t, conn, rec.policy(Policy{Restart: RestartNever}))
		must(t, s.Start(context.Background()))
		first := conn.last()
		t0 := time.Now()
		must(t, s.RestartAndWait(context.Background(), 10*time.Second))
		if el := time.Since(t0); el != 0 {
			t.Fatalf("explicit restart waited %v of backoff", el)
		}
		if !first.ended() {
			t.Fatal("old session not closed")
		}
		if n := conn.nCalls(); n != 2 {
			t.Fatalf("Connect calls = %d", n)
		}
		info := wantState(t, s, StateReady)
		if info.Restarts != 0 {
			t.Fatalf("explicit restart counted: Restarts = %d", info.Restarts)
		}
		if d, r, _ := rec.counts(); d != 1 || r != 1 || rec.disconnect(0) != nil {
			t.Fatalf("callbacks: disconnects=%d restarts=%d", d, r)
		}
		stop(t, s)
	})
}

func TestRestartAndWaitFromDegraded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		must(t, s.MarkDegraded(errors.New("slow")))
		must(t, s.RestartAndWait(context.Background(), 0))
		wantState(t, s, StateReady)
		stop(t, s)
	})
}

func TestRestartAndWaitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(1000, ErrTransport)}
		s := newSup(t, conn, Policy{MaxAttempts: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		t0 := time.Now()
		err := s.RestartAndWait(context.Background(), 5*time.Second)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("RestartAndWait = %v, want DeadlineExceeded", err)
		}
		if el := time.Since(t0); el != 5*time.Second {
			t.Fatalf("returned after %v, want 5s", el)
		}
		wantState(t, s, StateRestarting)
		stop(t, s)
	})
}

func TestRestartAndWaitContextCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(1000, ErrTransport)}
		s := newSup(t, conn, Policy{MaxAttempts: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		if err := s.RestartAndWait(ctx, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("RestartAndWait = %v, want Canceled", err)
		}
		stop(t, s)
	})
}

func TestRestartAndWaitNotRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSup(t, &fakeConnector{}, Policy{Logger: quiet})
		if err := s.RestartAndWait(context.Background(), time.Second); !errors.Is(err, ErrNotStarted) {
			t.Fatalf("before Start: %v, want ErrNotStarted", err)
		}
		must(t, s.Start(context.Background()))
		stop(t, s)
		if err := s.RestartAndWait(context.Background(), time.Second); !errors.Is(err, ErrNotStarted) {
			t.Fatalf("after Stop: %v, want ErrNotStarted", err)
		}
	})
}

func TestRestartAndWaitGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(1000, fmt.Errorf("tools: %w", ErrCapabilityMissing))}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		err := s.RestartAndWait(context.Background(), time.Minute)
		if !errors.Is(err, ErrCapabilityMissing) {
			t.Fatalf("RestartAndWait = %v, want the permanent failure", err)
		}
		wantState(t, s, StateFailed)
	})
}

func TestRestartAndWaitStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(ctx context.Context, n int) error {
			if n > 1 {
				return blockUntilCancel(ctx)
			}
			return nil
		}}
		s := newSup(t, conn, Policy{InitTimeout: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		errc := make(chan error, 1)
		go func() { errc <- s.RestartAndWait(context.Background(), 0) }()
		synctest.Wait()
		wantState(t, s, StateRestarting)
		stop(t, s)
		if err := <-errc; !errors.Is(err, ErrStopped) {
			t.Fatalf("RestartAndWait = %v, want ErrStopped", err)
		}
	})
}

func TestRestartAndWaitCutsBackoffShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(2, ErrTransport)}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		conn.last().end(errors.New("crash"))
		advance(time.Second) // attempt 1 fails at once, attempt 2 at +1s; attempt 3 due at +3s
		if n := conn.nCalls(); n != 3 {
			t.Fatalf("Connect calls = %d, want 3", n)
		}
		t0 := time.Now()
		must(t, s.RestartAndWait(context.Background(), 0))
		if el := time.Since(t0); el != 0 {
			t.Fatalf("RestartAndWait waited %v, want no wait", el)
		}
		stop(t, s)
	})
}

func TestRestartedChannel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		ch1 := s.Restarted()
		select {
		case <-ch1:
			t.Fatal("Restarted closed by Start")
		default:
		}
		conn.last().end(errors.New("crash"))
		<-ch1
		ch2 := s.Restarted()
		if ch2 == ch1 {
			t.Fatal("Restarted channel not replaced")
		}
		select {
		case <-ch2:
			t.Fatal("new Restarted channel already closed")
		default:
		}
		stop(t, s)
	})
}

func TestStopDuringConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(ctx context.Context, _ int) error { return blockUntilCancel(ctx) }}
		s := newSup(t, conn, Policy{Logger: quiet})
		errc := make(chan error, 1)
		go func() { errc <- s.Start(context.Background()) }()
		synctest.Wait()
		wantState(t, s, StateStarting)
		t0 := time.Now()
		stop(t, s)
		if el := time.Since(t0); el != 0 {
			t.Fatalf("Stop took %v", el)
		}
		if err := <-errc; !errors.Is(err, ErrStopped) {
			t.Fatalf("Start = %v, want ErrStopped", err)
		}
	})
}

func TestStopDuringConnectThatSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A Connector that ignores cancellation and returns a session
		// anyway: the session must be closed, not leaked.
		release := make(chan struct{})
		conn := &fakeConnector{script: func(context.Context, int) error { <-release; return nil }}
		s := newSup(t, conn, Policy{Logger: quiet})
		errc := make(chan error, 1)
		go func() { errc <- s.Start(context.Background()) }()
		synctest.Wait()
		stopc := make(chan error, 1)
		go func() { stopc <- s.Stop(context.Background()) }()
		synctest.Wait()
		close(release)
		must(t, <-stopc)
		if err := <-errc; !errors.Is(err, ErrStopped) {
			t.Fatalf("Start = %v, want ErrStopped", err)
		}
		wantState(t, s, StateStopped)
		if sess := conn.last(); sess == nil || !sess.ended() {
			t.Fatal("late session not closed")
		}
	})
}

func TestStopDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(1000, ErrServerUnavailable)}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{MaxAttempts: -1}))
		must(t, s.Start(context.Background()))
		conn.last().end(errors.New("crash"))
		advance(3*time.Second + time.Second/2) // two attempts failed, in the 4s wait
		wantState(t, s, StateRestarting)
		calls := conn.nCalls()
		t0 := time.Now()
		stop(t, s)
		if el := time.Since(t0); el != 0 {
			t.Fatalf("Stop during backoff took %v", el)
		}
		advance(time.Hour)
		if n := conn.nCalls(); n != calls {
			t.Fatalf("Connect called after Stop: %d → %d", calls, n)
		}
		if _, _, f := rec.counts(); f != 0 {
			t.Fatal("OnFailed called on Stop")
		}
	})
}

func TestStopDuringReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(ctx context.Context, n int) error {
			if n > 1 {
				return blockUntilCancel(ctx)
			}
			return nil
		}}
		s := newSup(t, conn, Policy{InitTimeout: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		conn.last().end(errors.New("crash"))
		advance(time.Second)
		if n := conn.nCalls(); n != 2 {
			t.Fatalf("Connect calls = %d", n)
		}
		t0 := time.Now()
		stop(t, s)
		if el := time.Since(t0); el != 0 {
			t.Fatalf("Stop took %v", el)
		}
	})
}

// TestStopTimesOutOnStuckSession: a Session whose Wait ignores Close makes
// Stop return ctx's error; the shutdown finishes once the session ends, and
// a Start meanwhile waits for it.
func TestStopTimesOutOnStuckSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{stuck: true}
		s := newSup(t, conn, Policy{Logger: quiet})
		must(t, s.Start(context.Background()))
		sess := conn.last()

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want DeadlineExceeded", err)
		}
		if sess.closes.Load() == 0 {
			t.Fatal("Stop did not call Close")
		}

		// Start waits for the old run, honouring its own context.
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		defer scancel()
		if err := s.Start(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start during a stuck stop = %v", err)
		}
		errc := make(chan error, 1)
		go func() { errc <- s.Start(context.Background()) }()
		synctest.Wait()
		if n := conn.nCalls(); n != 1 {
			t.Fatalf("Start did not wait for the old run: %d calls", n)
		}
		sess.end(nil)
		must(t, <-errc)
		wantState(t, s, StateReady)
		if n := conn.nCalls(); n != 2 {
			t.Fatalf("Connect calls = %d", n)
		}
		conn.last().end(nil) // stuck sessions end only this way
		synctest.Wait()
		wantState(t, s, StateStopped) // clean end under on-failure
		stop(t, s)
	})
}

func TestStartContextCanceledDuringConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(ctx context.Context, n int) error {
			if n == 1 {
				return blockUntilCancel(ctx)
			}
			return nil
		}}
		s := newSup(t, conn, Policy{InitTimeout: -1, Logger: quiet})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start = %v, want DeadlineExceeded", err)
		}
		synctest.Wait()
		wantState(t, s, StateStopped)

		done, dcancel := context.WithCancel(context.Background())
		dcancel()
		if err := s.Start(done); !errors.Is(err, context.Canceled) {
			t.Fatalf("Start with a done ctx = %v", err)
		}
		if n := conn.nCalls(); n != 1 {
			t.Fatalf("Connect calls = %d, want 1", n)
		}
		must(t, s.Start(context.Background()))
		stop(t, s)
	})
}

func TestConcurrentStartsSerialize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		conn := &fakeConnector{script: func(context.Context, int) error { <-release; return nil }}
		s := newSup(t, conn, Policy{Logger: quiet})
		errc := make(chan error, 4)
		for range 4 {
			go func() { errc <- s.Start(context.Background()) }()
		}
		synctest.Wait()
		if n := conn.nCalls(); n != 1 {
			t.Fatalf("concurrent Starts connected %d times", n)
		}
		// A waiting Start honours its context.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("queued Start = %v", err)
		}
		close(release)
		for range 4 {
			must(t, <-errc)
		}
		if n := conn.nCalls(); n != 1 {
			t.Fatalf("Connect calls = %d, want 1", n)
		}
		stop(t, s)
	})
}

func TestMarkDegradedAndHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{Logger: quiet})
		if err := s.MarkDegraded(errors.New("x")); !errors.Is(err, ErrInvalidTransition) {
			t.Fatalf("MarkDegraded while stopped = %v", err)
		}
		if err := s.MarkHealthy(); !errors.Is(err, ErrInvalidTransition) {
			t.Fatalf("MarkHealthy while stopped = %v", err)
		}
		must(t, s.Start(context.Background()))
		slow := errors.New("health check: slow")
		must(t, s.MarkDegraded(slow))
		info := wantState(t, s, StateDegraded)
		if info.LastError != slow || !s.IsReady() {
			t.Fatalf("degraded: %+v ready=%v", info, s.IsReady())
		}
		must(t, s.MarkHealthy())
		if info := wantState(t, s, StateReady); info.LastError != nil {
			t.Fatalf("healthy kept error %v", info.LastError)
		}
		must(t, s.MarkHealthy()) // no-op in Ready

		// A session ending while Degraded restarts as usual.
		must(t, s.MarkDegraded(slow))
		ch := s.Restarted()
		conn.last().end(errors.New("crash"))
		<-ch
		wantState(t, s, StateReady)
		stop(t, s)
	})
}

// TestConcurrentUse hammers Start, Stop, RestartAndWait, State and
// MarkDegraded from many goroutines while sessions crash, then checks that
// a final Stop leaves nothing running and every session closed. Run with
// -race.
func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: func(_ context.Context, n int) error {
			if n%5 == 0 {
				return ErrTransport
			}
			return nil
		}}
		s := newSup(t, conn, Policy{MaxAttempts: -1, Backoff: Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}, Logger: quiet})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for range 200 {
					switch rng.IntN(7) {
					case 0, 1:
						_ = s.Start(context.Background())
					case 2:
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						_ = s.Stop(ctx)
						cancel()
					case 3:
						_ = s.RestartAndWait(context.Background(), 50*time.Millisecond)
					case 4:
						if sess := conn.last(); sess != nil {
							sess.end(errors.New("crash"))
						}
					case 5:
						_ = s.MarkDegraded(errors.New("slow"))
						_ = s.MarkHealthy()
					case 6:
						_ = s.State()
						_ = s.IsReady()
						<-time.After(time.Duration(rng.IntN(5)) * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		stop(t, s)
		for i, sess := range conn.all() {
			if !sess.ended() {
				t.Fatalf("session %d still open after Stop", i)
			}
		}
		if conn.nCalls() < 2 {
			t.Fatalf("only %d Connect calls; the test exercised nothing", conn.nCalls())
		}
	})
}

// ctxSession is a fakeSession that implements ContextCloser and records
// the context its close got.
type ctxSession struct {
	*fakeSession
	mu  sync.Mutex
	got []context.Context
}

func (c *ctxSession) CloseContext(ctx context.Context) error {
	c.mu.Lock()
	c.got = append(c.got, ctx)
	c.mu.Unlock()
	return c.fakeSession.Close()
}

// The context given to Stop reaches the session's close, so that a
// shutdown deadline bounds the teardown of what the Supervisor runs.
func TestStopContextReachesTheSessionClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := &ctxSession{fakeSession: newFakeSession()}
		s := newSup(t, connectorFunc(func(context.Context) (Session, error) { return cs, nil }), Policy{})
		must(t, s.Start(context.Background()))
		type key struct{}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "stop"), time.Minute)
		defer cancel()
		must(t, s.Stop(ctx))
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if len(cs.got) == 0 {
			t.Fatal("CloseContext was not called")
		}
		if v, _ := cs.got[0].Value(key{}).(string); v != "stop" {
			t.Fatalf("first close got a context without Stop's value")
		}
		if _, ok := cs.got[0].Deadline(); !ok {
			t.Fatalf("first close got a context without Stop's deadline")
		}
	})
}

// While Restarting, State says when the next attempt is due, OnRestarting
// reports each attempt, and Changed wakes a waiter at each change without
// polling.
func TestRestartingReportsTheNextAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{script: failAfter(2, fmt.Errorf("dial: %w", ErrServerUnavailable))}
		var mu sync.Mutex
		var attempts []int
		var delays []time.Duration
		s := newSup(t, conn, Policy{MaxAttempts: -1, Logger: quiet, OnRestarting: func(n int, d time.Duration, cause error) {
			mu.Lock()
			attempts, delays = append(attempts, n), append(delays, d)
			mu.Unlock()
			if cause == nil {
				t.Errorf("attempt %d without a cause", n)
			}
		}})
		must(t, s.Start(context.Background()))
		changed := s.Changed()
		crash := time.Now()
		conn.last().end(errors.New("segfault"))
		<-changed // woken by the move to Restarting
		synctest.Wait()
		info := wantState(t, s, StateRestarting)
		if want := crash.Add(time.Second); !info.NextAttempt.Equal(want) {
			t.Fatalf("NextAttempt = %v, want %v", info.NextAttempt, want)
		}
		changed = s.Changed()
		time.Sleep(time.Second) // the first attempt fails
		<-changed
		synctest.Wait()
		if info := s.State(); !info.NextAttempt.Equal(crash.Add(3 * time.Second)) {
			t.Fatalf("after one failed attempt, NextAttempt = %v, want %v", info.NextAttempt, crash.Add(3*time.Second))
		}
		<-s.Restarted()
		if info := wantState(t, s, StateReady); !info.NextAttempt.IsZero() {
			t.Fatalf("NextAttempt = %v once Ready, want zero", info.NextAttempt)
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(attempts) != "[1 2 3]" || fmt.Sprint(delays) != "[0s 1s 2s]" {
			t.Fatalf("OnRestarting attempts %v delays %v, want [1 2 3] [0s 1s 2s]", attempts, delays)
		}
	})
}

// SetPolicy governs the decisions taken after it: a supervisor started
// with RestartNever restarts a crashed session once the policy says
// RestartAlways, with the new policy's backoff and callbacks, and a later
// RestartNever makes the next crash terminal. Called from another
// goroutine while the supervisor runs (the race detector checks it).
func TestSetPolicyAppliesToLaterDecisions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		var old, cur recorder
		s := newSup(t, conn, old.policy(Policy{Restart: RestartNever}))
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.SetPolicy(cur.policy(Policy{Restart: RestartAlways, Backoff: Backoff{Initial: 3 * time.Second, Max: 3 * time.Second}}))
		}()
		<-done
		// A first failure is retried at once; the new policy's backoff
		// spaces the attempts of a crash loop (the second failure on).
		conn.setScript(failAfter(1, ErrTransport))
		t0 := time.Now()
		conn.last().end(errors.New("crash"))
		synctest.Wait()
		wantState(t, s, StateRestarting)
		advance(3 * time.Second)
		wantState(t, s, StateReady)
		if n := conn.nCalls(); n != 3 {
			t.Fatalf("connects = %d, want 3 (restarted under the new policy)", n)
		}
		if d := conn.callTimes()[1].Sub(t0); d != 0 {
			t.Fatalf("first attempt after %v, want at once", d)
		}
		if d := conn.callTimes()[2].Sub(t0); d != 3*time.Second {
			t.Fatalf("second attempt after %v, want the new policy's backoff of 3s", d)
		}
		if _, restarts, _ := cur.counts(); restarts != 1 {
			t.Fatalf("new policy's OnRestart ran %d times, want 1", restarts)
		}
		if d, r, f := old.counts(); d+r+f != 0 {
			t.Fatalf("old policy's callbacks ran (%d disconnects, %d restarts, %d failures)", d, r, f)
		}
		s.SetPolicy(cur.policy(Policy{Restart: RestartNever}))
		conn.last().end(errors.New("crash again"))
		synctest.Wait()
		wantState(t, s, StateFailed)
		if n := conn.nCalls(); n != 3 {
			t.Fatalf("connects = %d after a crash under RestartNever, want still 3", n)
		}
	})
}

// SetPolicy is safe to call concurrently with everything else: replaced
// from other goroutines over and over while the session crashes and the
// supervisor restarts it, reading its policy at each decision (run under
// -race, a policy read or written without the supervisor's own guard is
// reported). Every crash is restarted: each policy set says always.
func TestSetPolicyConcurrentWithRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		var rec recorder
		always := func(initial time.Duration) Policy {
			return rec.policy(Policy{Restart: RestartAlways, MaxAttempts: -1, Backoff: Backoff{Initial: initial, Max: initial}})
		}
		s := newSup(t, conn, always(time.Second))
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					default:
					}
					s.SetPolicy(always(time.Duration(1+(i+j)%3) * time.Second))
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
		const crashes = 10
		for range crashes {
			conn.last().end(errors.New("crash"))
			advance(4 * time.Second) // beyond any backoff set
			wantState(t, s, StateReady)
		}
		close(stop)
		wg.Wait()
		if n := conn.nCalls(); n != crashes+1 {
			t.Fatalf("connects = %d, want %d (the start and one per crash)", n, crashes+1)
		}
	})
}

// markCtx is a context a test can watch being collected.
type markCtx struct{ context.Context }

// A stopped Supervisor keeps nothing of the run it ended — neither the
// run's contexts nor the Stop's — however long it stays stopped.
func TestStoppedSupervisorKeepsNoRun(t *testing.T) {
	s := newSup(t, &fakeConnector{}, Policy{})
	must(t, s.Start(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	stopCtx := &markCtx{ctx}
	kept := weak.Make(stopCtx)
	must(t, s.Stop(stopCtx))
	cancel()
	stopCtx = nil
	runtime.GC()
	runtime.GC()
	if kept.Value() != nil {
		t.Fatal("a stopped Supervisor still holds the context of the Stop that ended its run")
	}
	must(t, s.Start(context.Background())) // and starts again
	wantState(t, s, StateReady)
}

// A session that answered was a success, however short: killed over and
// over, it is restarted at once each time, the count of failures never
// grows, and the restart limit is never reached.
func TestAnsweredSessionRestartsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		var rec recorder
		s := newSup(t, conn, rec.policy(Policy{MaxAttempts: 2}))
		must(t, s.Start(context.Background()))
		for i := range 50 {
			sess := conn.last()
			sess.answered.Store(true)
			ch := s.Restarted()
			killed := time.Now()
			sess.end(errors.New("killed"))
			<-ch
			if el := time.Since(killed); el != 0 {
				t.Fatalf("kill %d: restarted after %v, want at once", i, el)
			}
			if info := wantState(t, s, StateReady); info.Failures != 0 {
				t.Fatalf("kill %d: Failures = %d, want 0", i, info.Failures)
			}
		}
		if _, r, f := rec.counts(); r != 50 || f != 0 {
			t.Fatalf("restarts %d, failures %d", r, f)
		}
		stop(t, s)
	})
}

// Runs that end before answering are a crash loop: the first is retried at
// once, the next ones after the backoff, and the limit ends it. A session
// that answers then resets the count: the next end is retried at once.
func TestUnansweredRunsBackOffAndAnAnswerResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{MaxAttempts: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		prev := time.Now()
		for i, want := range []time.Duration{0, 1, 2, 4} {
			ch := s.Restarted()
			conn.last().end(errors.New("exited before answering"))
			<-ch
			if gap := time.Since(prev); gap != want*time.Second {
				t.Fatalf("run %d: restarted after %v, want %v", i+1, gap, want*time.Second)
			}
			if info := s.State(); info.Failures != i+1 {
				t.Fatalf("run %d: Failures = %d", i+1, info.Failures)
			}
			prev = time.Now()
		}
		conn.last().answered.Store(true)
		ch := s.Restarted()
		t0 := time.Now()
		conn.last().end(errors.New("killed after answering"))
		<-ch
		if el := time.Since(t0); el != 0 {
			t.Fatalf("after a run that answered: restarted after %v, want at once", el)
		}
		if info := s.State(); info.Failures != 0 {
			t.Fatalf("after a run that answered: Failures = %d, want 0", info.Failures)
		}
		stop(t, s)
	})
}

// The count of failures spans Starts: a connection that fails at every
// start is tried at once twice, then Start refuses at once with a
// *CrashLoopError until the backoff's next attempt is due — no Connect in
// between — and Stop ends the loop.
func TestStartRefusesInACrashLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := fmt.Errorf("exec: %w", ErrServerCrashed)
		conn := &fakeConnector{script: func(context.Context, int) error { return boom }}
		s := newSup(t, conn, Policy{Logger: quiet})
		for i := range 2 {
			if err := s.Start(context.Background()); !errors.Is(err, boom) || errors.Is(err, ErrCrashLoop) {
				t.Fatalf("start %d = %v, want the connect's failure", i+1, err)
			}
		}
		if n := conn.nCalls(); n != 2 {
			t.Fatalf("Connect calls = %d, want 2", n)
		}
		t0 := time.Now()
		for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			before := conn.nCalls()
			err := s.Start(context.Background())
			var cl *CrashLoopError
			if !errors.As(err, &cl) || !errors.Is(err, ErrCrashLoop) || !errors.Is(err, boom) {
				t.Fatalf("start in a crash loop = %v, want a *CrashLoopError wrapping the last failure", err)
			}
			if !cl.Next.Equal(t0.Add(wait)) || cl.Failures != before {
				t.Fatalf("crash loop: %+v, want next at +%v after %d failures", cl, wait, before)
			}
			if !errors.Is(s.CrashLoop(), ErrCrashLoop) || conn.nCalls() != before {
				t.Fatalf("CrashLoop = %v, Connect calls %d → %d", s.CrashLoop(), before, conn.nCalls())
			}
			advance(wait - time.Nanosecond)
			if err := s.Start(context.Background()); !errors.Is(err, ErrCrashLoop) {
				t.Fatalf("a nanosecond early: %v", err)
			}
			advance(time.Nanosecond)
			if err := s.Start(context.Background()); errors.Is(err, ErrCrashLoop) || conn.nCalls() != before+1 {
				t.Fatalf("when due: %v (Connect calls %d → %d)", err, before, conn.nCalls())
			}
			t0 = time.Now()
		}
		stop(t, s)
		conn.setScript(nil)
		must(t, s.Start(context.Background()))
		if info := wantState(t, s, StateReady); info.Failures != 0 {
			t.Fatalf("after Stop and Start: %+v", info)
		}
		stop(t, s)
	})
}

// CrashLoop is nil while an attempt is being made or may be made at once,
// and set only while a backoff wait runs.
func TestCrashLoopOnlyDuringTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		conn := &fakeConnector{}
		s := newSup(t, conn, Policy{MaxAttempts: -1, Logger: quiet})
		must(t, s.Start(context.Background()))
		conn.setScript(func(ctx context.Context, n int) error {
			if n == 3 {
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
			return ErrTransport
		})
		if s.CrashLoop() != nil {
			t.Fatal("CrashLoop while Ready")
		}
		conn.last().end(errors.New("crash"))
		synctest.Wait() // attempt 1 at once, failed; attempt 2 due at +1s
		if err := s.CrashLoop(); !errors.Is(err, ErrCrashLoop) {
			t.Fatalf("during the backoff: %v", err)
		}
		advance(time.Second) // attempt 2 (call 3) hangs at the gate
		if err := s.CrashLoop(); err != nil {
			t.Fatalf("during an attempt: %v", err)
		}
		close(gate)
		synctest.Wait()
		if err := s.CrashLoop(); !errors.Is(err, ErrCrashLoop) {
			t.Fatalf("after the attempt failed: %v", err)
		}
		stop(t, s)
		if err := s.CrashLoop(); err != nil {
			t.Fatalf("after Stop: %v", err)
		}
	})
}

// Supervisors that share a Streak share the crash loop: a new one of
// something that keeps failing starts in it, and its Start refuses at
// once; Stop does not forget a shared record, an answer does.
func TestSharedStreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := fmt.Errorf("exec: %w", ErrServerCrashed)
		failing := func(context.Context, int) error { return boom }
		var k Streak
		a := newSup(t, &fakeConnector{script: failing}, Policy{Streak: &k, Logger: quiet})
		for range 2 {
			if err := a.Start(context.Background()); !errors.Is(err, boom) {
				t.Fatalf("a's start: %v", err)
			}
		}
		stop(t, a)
		connB := &fakeConnector{}
		b := newSup(t, connB, Policy{Streak: &k, Logger: quiet})
		var cl *CrashLoopError
		if err := b.Start(context.Background()); !errors.As(err, &cl) || cl.Failures != 2 || !errors.Is(err, boom) || connB.nCalls() != 0 {
			t.Fatalf("a new supervisor of the same crash loop: %v (%d connects)", err, connB.nCalls())
		}
		if info := b.State(); info.Failures != 2 || !info.NextAttempt.Equal(cl.Next) {
			t.Fatalf("its state: %+v", info)
		}
		advance(time.Second)
		must(t, b.Start(context.Background()))
		connB.last().answered.Store(true)
		ch := b.Restarted()
		connB.last().end(errors.New("killed"))
		<-ch
		if k.Failures() != 0 {
			t.Fatalf("after a run that answered: %d failures", k.Failures())
		}
		stop(t, b)
	})
}
