package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

func TestIdleDecision(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const idle, grace = 10 * time.Second, 60 * time.Second
	cases := []struct {
		name      string
		a         activity
		idle      time.Duration
		wantSleep bool
		wantNext  time.Time
	}{
		{"disabled", activity{now: t0.Add(time.Hour), lastActivity: t0, startedAt: t0, ready: true}, 0, false, time.Time{}},
		{"not ready", activity{now: t0.Add(time.Hour), lastActivity: t0, startedAt: t0}, idle, false, time.Time{}},
		{"inside grace", activity{now: t0.Add(30 * time.Second), lastActivity: t0, startedAt: t0, ready: true}, idle, false, t0.Add(grace)},
		{"grace over, idle long enough", activity{now: t0.Add(grace), lastActivity: t0, startedAt: t0, ready: true}, idle, true, time.Time{}},
		{"recent activity", activity{now: t0.Add(100 * time.Second), lastActivity: t0.Add(95 * time.Second), startedAt: t0, ready: true}, idle, false, t0.Add(105 * time.Second)},
		{"in flight, long idle", activity{now: t0.Add(time.Hour), lastActivity: t0, startedAt: t0, inflight: 1, ready: true}, idle, false, time.Time{}},
		{"in flight, tiny timeout", activity{now: t0.Add(time.Hour), lastActivity: t0, startedAt: t0, inflight: 3, ready: true}, time.Nanosecond, false, time.Time{}},
		{"exactly at the deadline", activity{now: t0.Add(grace + idle), lastActivity: t0.Add(grace), startedAt: t0, ready: true}, idle, true, time.Time{}},
	}
	for _, c := range cases {
		sleep, next := idleDecision(c.a, c.idle, grace)
		if sleep != c.wantSleep || !next.Equal(c.wantNext) {
			t.Errorf("%s: got (%v, %v), want (%v, %v)", c.name, sleep, next, c.wantSleep, c.wantNext)
		}
	}
}

// fakeLive is an in-memory session: alive until closed.
type fakeLive struct {
	done     chan struct{}
	once     sync.Once
	err      error              // what Wait reports: set by crash
	exit     *backend.ExitError // if set, what crash ends it with
	answered atomic.Bool        // it answered a request (lifecycle.Answerer)

	// A modern one takes its resource subscriptions as one set.
	modern bool
	subMu  sync.Mutex
	subs   []string
}

func (f *fakeLive) Modern() bool   { return f.modern }
func (f *fakeLive) Answered() bool { return f.answered.Load() }
func (f *fakeLive) MarkAnswered()  { f.answered.Store(true) }
func (f *fakeLive) SetResourceSubscriptions(uris []string) {
	f.subMu.Lock()
	f.subs = uris
	f.subMu.Unlock()
}
func (f *fakeLive) subscriptions() []string {
	f.subMu.Lock()
	defer f.subMu.Unlock()
	return f.subs
}

// crash ends the session as a server that exits on its own does.
func (f *fakeLive) crash() {
	f.once.Do(func() {
		f.err = fmt.Errorf("%w: exit code 3", lifecycle.ErrServerCrashed)
		if f.exit != nil {
			f.err = f.exit
		}
		close(f.done)
	})
}

// fakeStopTime is how long a fakeLive's Close takes (fake time).
var fakeStopTime time.Duration

func (f *fakeLive) Wait() error { <-f.done; return f.err }
func (f *fakeLive) Close() error {
	time.Sleep(fakeStopTime)
	f.once.Do(func() { close(f.done) })
	return nil
}
func (f *fakeLive) Alive() bool {
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}
func (f *fakeLive) Done() <-chan struct{} { return f.done }

// fakeConnector counts connects; it takes startDelay and fails while fail
// is set.
type fakeConnector struct {
	onConnect  func(context.Context, Live)
	connects   *atomic.Int32
	startDelay time.Duration
	fail       *atomic.Bool
	modern     *atomic.Bool // its servers are modern ones
}

func (c *fakeConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	c.connects.Add(1)
	select {
	case <-time.After(c.startDelay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.fail.Load() {
		return nil, fmt.Errorf("%w: cannot start", lifecycle.ErrServerUnavailable)
	}
	l := &fakeLive{done: make(chan struct{}), modern: c.modern != nil && c.modern.Load()}
	c.onConnect(ctx, l)
	return l, nil
}

type fakeFleet struct {
	f        *Fleet
	connects atomic.Int32
	fail     atomic.Bool
	modern   atomic.Bool // servers started from now on are modern
	mu       sync.Mutex
	events   []Event
}

func (ff *fakeFleet) count(typ string) int {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	n := 0
	for _, e := range ff.events {
		if string(e.Type) == typ {
			n++
		}
	}
	return n
}

func newFakeFleet(t *testing.T, settings string) *fakeFleet {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake"`+settings+`}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	ff := &fakeFleet{}
	ff.f, err = New(cfg, Options{
		Logger:   discardLogger(),
		Interest: interest.New(discardLogger()),
		Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
			return &fakeConnector{onConnect: onConnect, connects: &ff.connects, startDelay: 500 * time.Millisecond, fail: &ff.fail, modern: &ff.modern}
		},
		OnEvent: func(e Event) {
			recordEvent(e)
			ff.mu.Lock()
			ff.events = append(ff.events, e)
			ff.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ff
}

func (ff *fakeFleet) close(t *testing.T) {
	if err := ff.f.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func state(s *Server) string { return s.Status().State }

// use releases a lease at once: what the start left running is what the
// test looks at.
func use(l *Lease, err error) (*Lease, error) {
	if err == nil {
		l.Release()
	}
	return l, err
}

// live is the connection a lease was given (its instance's current one),
// the lease released; nil if Acquire failed.
func live(l *Lease, err error) Live {
	if err != nil {
		return nil
	}
	defer l.Release()
	return l.in.current()
}

func TestIdleRespectsGraceAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"60s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		if _, _, err := s.sharedIn().acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("slept inside the grace period (after %v): %s", time.Since(started), state(s))
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if state(s) != "dormant" {
			t.Fatalf("not dormant right after the grace period: %s", state(s))
		}
		if ff.count("dormant") != 1 {
			t.Fatalf("dormant events: %d", ff.count("dormant"))
		}
	})
}

func TestInFlightBlocksIdleHoweverSmallTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"1ms","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("a request in flight for an hour was reaped: %s", state(s))
		}
		l.Release()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if state(s) != "dormant" {
			t.Fatalf("not dormant 1ms after the request ended: %s", state(s))
		}
	})
}

// TestSnapshotRace: a request that ends just before the idle check, after
// a long time in flight, still counts as activity at its end: the check
// sees (last activity = now, in flight = 0) together and does not reap.
func TestSnapshotRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		// The timer is due at connect+10s; the request ends a hair
		// before, after 10s in flight.
		time.Sleep(10*time.Second - time.Nanosecond)
		l.Release()
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("reaped right after a long request ended: %s", state(s))
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if state(s) != "dormant" {
			t.Fatalf("not dormant 10s after the request: %s", state(s))
		}
	})
}

func TestActivityRearmsTheTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			time.Sleep(9 * time.Second)
			if _, err := use(s.Acquire(t.Context(), "")); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("slept despite activity every 9s: %s", state(s))
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if state(s) != "dormant" {
			t.Fatalf("not dormant 10s after the last activity: %s", state(s))
		}
	})
}

func TestDormantRespawnCycles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"5s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		for cycle := 1; cycle <= 3; cycle++ {
			if _, err := use(s.Acquire(t.Context(), "")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Second)
			synctest.Wait()
			if state(s) != "dormant" {
				t.Fatalf("cycle %d: %s", cycle, state(s))
			}
		}
		if n := ff.connects.Load(); n != 3 {
			t.Fatalf("%d connects for 3 cycles", n)
		}
		if ff.count("respawned") != 2 || ff.count("dormant") != 3 || ff.count("started") != 1 {
			t.Fatalf("events: %d started, %d respawned, %d dormant", ff.count("started"), ff.count("respawned"), ff.count("dormant"))
		}
	})
}

func TestConcurrentCallsShareOneRespawn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"5s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		var wg sync.WaitGroup
		var failed atomic.Int32
		for range 50 {
			wg.Go(func() {
				l, err := s.Acquire(context.Background(), "")
				if err != nil {
					failed.Add(1)
					return
				}
				l.Release()
			})
		}
		wg.Wait()
		if failed.Load() != 0 || ff.connects.Load() != 1 {
			t.Fatalf("50 first calls: %d failed, %d connects (want 0 and 1)", failed.Load(), ff.connects.Load())
		}
	})
}

// A server that cannot start is tried at once twice (one failure may be
// chance), then — a crash loop — refused at once, with no connect, until
// the backoff's next attempt is due (1 s, then 2 s, …).
func TestFailedRespawnIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"5s","startGrace":"0s"`)
		defer ff.close(t)
		ff.fail.Store(true)
		s := ff.f.Get("s")
		for i := range 2 {
			if _, err := use(s.Acquire(t.Context(), "")); !errors.Is(err, lifecycle.ErrServerUnavailable) || errors.Is(err, lifecycle.ErrCrashLoop) {
				t.Fatalf("attempt %d: %v", i, err)
			}
		}
		failed := time.Now()
		for _, wait := range []time.Duration{time.Second, 2 * time.Second} {
			before := ff.connects.Load()
			t0 := time.Now()
			_, err := use(s.Acquire(t.Context(), ""))
			var cl *lifecycle.CrashLoopError
			if !errors.As(err, &cl) || ff.connects.Load() != before || time.Since(t0) != 0 {
				t.Fatalf("in the crash loop: %v after %v (connects %d → %d)", err, time.Since(t0), before, ff.connects.Load())
			}
			if !within(cl.Next.Sub(failed), wait) || !errors.Is(err, lifecycle.ErrServerUnavailable) {
				t.Fatalf("crash loop error %+v, want the next attempt at +%v (jitter 20%%) and the last failure", cl, wait)
			}
			time.Sleep(time.Until(cl.Next) - time.Nanosecond)
			if _, err := use(s.Acquire(t.Context(), "")); !errors.Is(err, lifecycle.ErrCrashLoop) || ff.connects.Load() != before {
				t.Fatalf("a nanosecond early: %v", err)
			}
			time.Sleep(time.Nanosecond)
			if _, err := use(s.Acquire(t.Context(), "")); errors.Is(err, lifecycle.ErrCrashLoop) || ff.connects.Load() != before+1 {
				t.Fatalf("when due: %v (connects %d → %d)", err, before, ff.connects.Load())
			}
			failed = time.Now()
		}
		ff.fail.Store(false)
		time.Sleep(4 * time.Second)
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatalf("after the backoff: %v", err)
		}
	})
}

// within reports whether d is the backoff delay full less the default
// jitter (config.DefaultBackoffJitter, 20 %) at most.
func within(d, full time.Duration) bool {
	return d <= full && d >= time.Duration(float64(full)*(1-config.DefaultBackoffJitter))
}

// A server that answered and then died is started again at once: a
// request that arrives while it restarts waits only for the start (500 ms
// here), however often it dies.
func TestAnsweredServerRestartsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l := live(s.Acquire(t.Context(), ""))
		for i := range 20 {
			fl := l.(*fakeLive)
			lease, err := s.Acquire(t.Context(), "")
			if err != nil {
				t.Fatal(err)
			}
			lease.Answered() // a client's request was answered
			lease.Release()
			fl.crash()
			t0 := time.Now()
			l = live(s.Acquire(t.Context(), ""))
			if l == nil || l == Live(fl) {
				t.Fatalf("kill %d: no new connection", i)
			}
			if el := time.Since(t0); el != 500*time.Millisecond {
				t.Fatalf("kill %d: the request waited %v, want the start's 500ms", i, el)
			}
		}
		if n := ff.connects.Load(); n != 21 {
			t.Fatalf("connects = %d, want 21", n)
		}
	})
}

// A server that dies before answering twice in a row is in a crash loop: a
// request during the backoff gets the crash-loop error at once, naming the
// next attempt; the first such death is restarted at once.
func TestUnansweredDeathsAnswerACrashLoopAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l := live(s.Acquire(t.Context(), ""))
		l.(*fakeLive).crash()
		t0 := time.Now()
		l = live(s.Acquire(t.Context(), ""))
		if el := time.Since(t0); l == nil || el != 500*time.Millisecond {
			t.Fatalf("after one death: %v after %v, want a new connection after the start's 500ms", l, el)
		}
		l.(*fakeLive).crash()
		synctest.Wait()
		t0 = time.Now()
		_, err := use(s.Acquire(t.Context(), ""))
		var cl *lifecycle.CrashLoopError
		if !errors.As(err, &cl) || time.Since(t0) != 0 || !within(cl.Next.Sub(t0), time.Second) {
			t.Fatalf("after two deaths in a row: %v after %v, want the crash loop at once, next attempt in 1s", err, time.Since(t0))
		}
		if st := s.Status(); st.State != "restarting" || st.Failures != 2 || !st.NextAttempt.Equal(cl.Next) {
			t.Fatalf("status %+v", st)
		}
		time.Sleep(time.Second + 500*time.Millisecond)
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatalf("after the backoff: %v", err)
		}
	})
}

func TestPerSessionInstances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		a, b, a2 := live(s.Acquire(t.Context(), "A")), live(s.Acquire(t.Context(), "B")), live(s.Acquire(t.Context(), "A"))
		if a == b || a != a2 || ff.connects.Load() != 2 {
			t.Fatalf("sessions A and B must have their own instance: connects %d", ff.connects.Load())
		}
		ff.f.endSession(t.Context(), "A")
		if a.(*fakeLive).Alive() {
			t.Fatal("A's instance survived the end of its session")
		}
		if !b.(*fakeLive).Alive() {
			t.Fatal("B's instance died with A's session")
		}
	})
}

// A running instance stopped by mcpvisor reports one stopped event however
// many stops race; a dormant one, whose stop was reported as dormant,
// reports none.
func TestStoppedIsReportedOnce(t *testing.T) {
	defer func() { fakeStopTime = 0 }()
	fakeStopTime = 10 * time.Millisecond // the stops overlap
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"5s","startGrace":"0s"`)
		s := ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if err := s.stopShared(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		ff.close(t)
		if n := ff.count("stopped"); n != 1 {
			t.Fatalf("%d stopped events for one running instance", n)
		}

		ff = newFakeFleet(t, `,"idleTimeout":"5s","startGrace":"0s"`)
		s = ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5*time.Second + time.Second) // idle, then the dormant stop
		synctest.Wait()
		ff.close(t)
		if ff.count("dormant") != 1 || ff.count("stopped") != 0 {
			t.Fatalf("a dormant instance closed: %d dormant, %d stopped events", ff.count("dormant"), ff.count("stopped"))
		}

		ff = newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0"`)
		s = ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "A")); err != nil {
			t.Fatal(err)
		}
		ff.f.endSession(t.Context(), "A")
		ff.close(t)
		ff.mu.Lock()
		defer ff.mu.Unlock()
		var stops []string
		for _, e := range ff.events {
			if e.Type == "stopped" {
				stops = append(stops, e.Session)
			}
		}
		if len(stops) != 1 || stops[0] != "A" {
			t.Fatalf("stopped events of the sessions: %q, want [A]", stops)
		}
	})
}

// Rest, which puts a server started only to learn its lists back to
// sleep, leaves a server a subscription pins awake running, as the idle
// timer does.
func TestRestLeavesAPinnedServerAwake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		s.subscribe("A", "file:///x")
		if s.rest(t.Context(), s.requests()) {
			t.Fatal("Rest put a server with a subscriber to sleep")
		}
		synctest.Wait()
		if st := state(s); st != "running" {
			t.Fatalf("a server with a subscriber went %s", st)
		}
		s.unsubscribe("A", "file:///x")
		if !s.rest(t.Context(), s.requests()) {
			t.Fatal("Rest refused a server nothing pins")
		}
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("state %s after Rest", st)
		}
	})
}

// A dormant instance keeps no idle timer, and a wake arms a new one: the
// woken server goes back to sleep after its idle timeout again.
func TestADormantInstanceKeepsNoTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"1s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		in := s.sharedIn()
		timer := func() bool {
			in.mu.Lock()
			defer in.mu.Unlock()
			return in.st.timer != nil
		}
		for round := 1; round <= 2; round++ {
			if _, _, err := in.acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if !timer() {
				t.Fatalf("round %d: a running instance has no idle timer", round)
			}
			time.Sleep(10*time.Second + time.Millisecond)
			synctest.Wait()
			if state(s) != "dormant" {
				t.Fatalf("round %d: %s after the idle timeout, want dormant", round, state(s))
			}
			if timer() {
				t.Fatalf("round %d: a dormant instance keeps its idle timer", round)
			}
		}
	})
}

// A request that waits for a restart attempt that then fails into a crash
// loop is answered at once when the attempt fails, with the crash loop —
// not after the backoff that follows.
func TestARequestWaitingOnAFailingRestartIsToldAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l := live(s.Acquire(t.Context(), ""))
		ff.fail.Store(true)
		l.(*fakeLive).crash() // unanswered: restarted at once; the attempt takes 500 ms, and fails
		synctest.Wait()
		t0 := time.Now()
		_, err := use(s.Acquire(t.Context(), ""))
		if !errors.Is(err, lifecycle.ErrCrashLoop) || time.Since(t0) != 500*time.Millisecond {
			t.Fatalf("%v after %v, want the crash loop when the attempt failed (500ms)", err, time.Since(t0))
		}
	})
}

// A per-session server's instances share its crash loop: a new client
// session's instance of a server that keeps failing to start is refused
// at once, with no connect, until the backoff's next attempt is due.
func TestPerSessionInstancesShareTheCrashLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0"`)
		defer ff.close(t)
		ff.fail.Store(true)
		s := ff.f.Get("s")
		for _, session := range []string{"A", "B"} {
			if _, err := use(s.Acquire(t.Context(), session)); !errors.Is(err, lifecycle.ErrServerUnavailable) || errors.Is(err, lifecycle.ErrCrashLoop) {
				t.Fatalf("session %s: %v", session, err)
			}
		}
		before := ff.connects.Load()
		for _, session := range []string{"C", "D", "E", "A"} {
			if _, err := use(s.Acquire(t.Context(), session)); !errors.Is(err, lifecycle.ErrCrashLoop) {
				t.Fatalf("session %s in the crash loop: %v", session, err)
			}
		}
		if n := ff.connects.Load(); n != before {
			t.Fatalf("%d connects in the crash loop", n-before)
		}
		ff.fail.Store(false)
		time.Sleep(time.Second)
		if _, err := use(s.Acquire(t.Context(), "F")); err != nil {
			t.Fatalf("when due: %v", err)
		}
	})
}

// A crash loop of processes that served and died before a client's
// answer says so: not "during its handshake".
func TestLoopOfServingDeathsSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l := live(s.Acquire(t.Context(), ""))
		l.(*fakeLive).exit = &backend.ExitError{Server: "s", Status: proc.ExitStatus{Code: 7}, Stderr: "bye"}
		l.(*fakeLive).crash()
		synctest.Wait()
		l = live(s.Acquire(t.Context(), ""))
		l.(*fakeLive).exit = &backend.ExitError{Server: "s", Status: proc.ExitStatus{Code: 7}, Stderr: "bye"}
		l.(*fakeLive).crash()
		synctest.Wait()
		_, err := use(s.Acquire(t.Context(), ""))
		if !errors.Is(err, lifecycle.ErrCrashLoop) || !strings.Contains(err.Error(), "; the last exited while it served (exit code 7); stderr: bye") || strings.Contains(err.Error(), "handshake") {
			t.Fatalf("%v", err)
		}
	})
}
