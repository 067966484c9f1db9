package fleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Releasing a lease after its session ended neither creates an instance
// nor reports anything: the lease closes over the instance it counted on.
func TestReleaseAfterSessionEndCreatesNoInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l, err := s.Acquire(t.Context(), "A")
		if err != nil {
			t.Fatal(err)
		}
		ff.f.endSession(t.Context(), "A")
		l.Release()
		l.Release() // a second release counts nothing
		if n := s.Status().Sessions; n != 0 {
			t.Fatalf("%d per-session instances after the session ended", n)
		}
		if ff.count("failed") != 0 {
			t.Fatalf("%d failed events", ff.count("failed"))
		}
		if _, err := s.Acquire(t.Context(), "A"); err == nil {
			t.Fatal("a lease for an ended session was granted")
		}
		if n := s.Status().Sessions; n != 0 {
			t.Fatalf("an acquire for an ended session created an instance (%d)", n)
		}
		if ff.connects.Load() != 1 {
			t.Fatalf("%d connects, want 1", ff.connects.Load())
		}
	})
}

// A session end that races the start of its instance wins: the started
// process is stopped, the request fails, nothing stays running.
func TestSessionEndDuringStartWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		errc := make(chan error, 1)
		go func() {
			l, err := s.Acquire(context.Background(), "A")
			if err == nil {
				l.Release()
			}
			errc <- err
		}()
		time.Sleep(100 * time.Millisecond) // the start takes 500ms
		ff.f.endSession(context.Background(), "A")
		if err := <-errc; err == nil {
			t.Fatal("the request whose session ended during the start got a lease")
		}
		synctest.Wait()
		if n := s.Status().Sessions; n != 0 {
			t.Fatalf("%d instances after the session ended", n)
		}
		if ins := s.Detail().Instances; len(ins) != 1 || !ins[0].Shared {
			t.Fatalf("instances after the session ended: %+v", ins)
		}
		if n := ff.count("failed"); n != 0 {
			t.Fatalf("%d failed events for a start its session's end interrupted", n)
		}
	})
}

// A stop of the shared instance that races its start wins too, and is no
// failure: stops during starts, however many, never count towards the
// respawn limit.
func TestStopDuringStartWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		for i := range 4 {
			errc := make(chan error, 1)
			go func() {
				_, err := use(s.Acquire(context.Background(), ""))
				errc <- err
			}()
			time.Sleep(100 * time.Millisecond) // the start takes 500ms
			if err := s.stopShared(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err == nil {
				t.Fatalf("stop %d: the start a stop raced was kept", i)
			}
			synctest.Wait()
			if st := s.Status(); st.State != "stopped" || st.LastError != "" {
				t.Fatalf("stop %d: state %s, last error %q after a stop that raced the start", i, st.State, st.LastError)
			}
		}
		if n := ff.count("failed"); n != 0 {
			t.Fatalf("%d failed events for starts that stops interrupted", n)
		}
		// The next request starts it again.
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		if st := state(s); st != "running" {
			t.Fatalf("state %s after a later request", st)
		}
	})
}

// Per-session instances are bounded: beyond MaxInstances a clear error,
// never a spawn.
func TestPerSessionInstanceLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","maxInstances":2,"idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		for _, sess := range []string{"A", "B"} {
			if _, err := use(s.Acquire(t.Context(), sess)); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.Acquire(t.Context(), "C")
		if !errors.Is(err, ErrInstanceLimit) || !strings.Contains(err.Error(), "maxInstances 2") {
			t.Fatalf("third session: %v, want ErrInstanceLimit naming the limit", err)
		}
		if ff.connects.Load() != 2 {
			t.Fatalf("%d connects, want 2", ff.connects.Load())
		}
		ff.f.endSession(t.Context(), "A")
		if _, err := use(s.Acquire(t.Context(), "C")); err != nil {
			t.Fatalf("after a session ended: %v", err)
		}
	})
}

// A server that crashes is restarted by its policy with no request coming,
// at once (one death is no crash loop); a request that arrives meanwhile
// waits for it within its own context, and otherwise gets an error naming
// the restart and its cause.
func TestRequestsDuringARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0","restart":{"backoff":{"initial":"2s"}}`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		live := l.in.current().(*fakeLive)
		live.crash()
		synctest.Wait()
		if st := state(s); st != "restarting" {
			t.Fatalf("state %s right after a crash", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = s.Acquire(ctx, "")
		if err == nil || !strings.Contains(err.Error(), "restarting") || !strings.Contains(err.Error(), "exit code 3") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a request with a short timeout during the restart: %v", err)
		}
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 5 {
			wg.Go(func() {
				if _, err := use(s.Acquire(context.Background(), "")); err != nil {
					t.Errorf("a request that can wait for the restart: %v", err)
				}
			})
		}
		wg.Wait()
		synctest.Wait() // the waiters are released before OnRestart reports
		// No backoff, the 500ms start: the restart came by itself, once,
		// and served every waiting request.
		if el := time.Since(t0); el != 400*time.Millisecond {
			t.Fatalf("the waiting requests were served %v after they came, want the rest of the 500ms start", el)
		}
		if ff.connects.Load() != 2 || ff.count("exited") != 1 || ff.count("restarted") != 1 || ff.count("restarting") != 1 {
			t.Fatalf("connects %d, exited %d, restarting %d, restarted %d", ff.connects.Load(), ff.count("exited"), ff.count("restarting"), ff.count("restarted"))
		}
		if st := s.Status(); st.Restarts != 1 || st.State != "running" {
			t.Fatalf("status after the restart: %+v", st)
		}
	})
}

// An active subscription keeps its instance awake; when it ends, the idle
// timeout applies again.
func TestSubscriptionKeepsTheServerAwake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		s.subscribe("A", "file:///x")
		l.Release()
		time.Sleep(time.Hour)
		synctest.Wait()
		if st := state(s); st != "running" {
			t.Fatalf("a server with a subscriber went %s", st)
		}
		l, err = s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		s.unsubscribe("A", "file:///x")
		l.Release()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("not dormant 10s after the last subscription ended: %s", st)
		}
	})
}

// The subscriptions and levels a session recorded are forgotten when it
// ends, and the shared instance may sleep again.
func TestSessionEndForgetsItsInterests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		s.subscribe("A", "file:///x")
		s.setLogLevel("A", "debug")
		s.setLogLevel("B", "error")
		if got := s.subscribers("file:///x"); len(got) != 1 || got[0] != "A" {
			t.Fatalf("subscribers %v", got)
		}
		if uris, level := s.replay(""); len(uris) != 1 || level != "debug" {
			t.Fatalf("replay %v %q, want the subscription and the most verbose level", uris, level)
		}
		ff.f.endSession(t.Context(), "A")
		if got := s.subscribers("file:///x"); len(got) != 0 {
			t.Fatalf("subscribers after the session ended: %v", got)
		}
		if _, level := s.replay(""); level != "error" {
			t.Fatalf("level after A ended: %q", level)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("not dormant once the subscriber's session ended: %s", st)
		}
	})
}

// Peek leases the session's own running instance and nothing else: it
// never starts a process nor creates an instance, and a session without
// its own instance of a per-session server gets none (a client
// notification must not reach another session's private process).
func TestPeekIsTheSessionsOwnInstanceOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		a, b := live(s.Acquire(t.Context(), "A")), live(s.Acquire(t.Context(), "B"))
		la, ok := s.Peek("A")
		if !ok || la.in.current() != a || la.in.current() == b {
			t.Fatal("Peek(A) is not A's instance")
		}
		la.Release()
		if _, ok := s.Peek("C"); ok {
			t.Fatal("Peek of a session without an instance leased one")
		}
		if n := s.Status().Sessions; n != 2 {
			t.Fatalf("Peek created an instance: %d", n)
		}
		if _, ok := s.Peek(""); ok {
			t.Fatal("Peek leased the shared instance that never started")
		}
		if n := ff.connects.Load(); n != 2 {
			t.Fatalf("%d connects: Peek started something", n)
		}
	})
}

// The request that begins a start waits for it within its own context like
// every other; the start goes on for the others. A request whose context
// has ended starts nothing, and nothing starts once the fleet is closing.
func TestStartIsBoundedByTheCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		s := ff.f.Get("s")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		if _, err := s.Acquire(ctx, ""); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with a 100ms context during a 500ms start: %v", err)
		}
		if d := time.Since(t0); d != 100*time.Millisecond {
			t.Fatalf("the first caller waited %v, want its 100ms", d)
		}
		if _, err := use(s.Acquire(context.Background(), "")); err != nil {
			t.Fatal(err)
		}
		if n := ff.connects.Load(); n != 1 {
			t.Fatalf("%d connects: the start was not shared", n)
		}

		ended, cancel2 := context.WithCancel(context.Background())
		cancel2()
		s2 := newFakeFleet(t, `,"idleTimeout":"0"`)
		if _, err := s2.f.Get("s").Acquire(ended, ""); err == nil || s2.connects.Load() != 0 {
			t.Fatalf("Acquire with an ended context: %v, %d connects", err, s2.connects.Load())
		}
		s2.close(t)
		if _, err := s2.f.Get("s").Acquire(context.Background(), ""); !errors.Is(err, ErrFleetClosed) || s2.connects.Load() != 0 {
			t.Fatalf("Acquire after Close: %v, %d connects", err, s2.connects.Load())
		}
		ff.close(t)
	})
}

// Release is safe to call concurrently: however many calls race, the lease
// is uncounted once, and the instance goes to sleep when its idle time is
// up.
func TestConcurrentReleaseCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"10s","startGrace":"0s"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		keep, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(l.Release)
		}
		wg.Wait()
		if n := s.Status().InFlight; n != 1 {
			t.Fatalf("in flight %d after 8 racing releases of one lease and one lease held, want 1", n)
		}
		keep.Release()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("not dormant once every lease was released: %s", st)
		}
	})
}

// TryAcquire leases a running instance at once and counts it as a request;
// it starts nothing, creates no instance and counts nothing otherwise.
func TestTryAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0"`)
		defer ff.close(t)
		s := ff.f.Get("s")
		if _, ok := s.TryAcquire("A"); ok || s.Status().Sessions != 0 || ff.connects.Load() != 0 {
			t.Fatal("TryAcquire of a session without an instance leased, created or started something")
		}
		if _, ok := s.TryAcquire(""); ok || s.requests() != 0 {
			t.Fatalf("TryAcquire of an instance that is not running leased or counted a request (%d)", s.requests())
		}
		if _, err := use(s.Acquire(t.Context(), "A")); err != nil {
			t.Fatal(err)
		}
		l, ok := s.TryAcquire("A")
		if !ok {
			t.Fatal("TryAcquire of a running instance failed")
		}
		l.in.mu.Lock()
		inflight, requests := l.in.st.inflight, l.in.st.requests
		l.in.mu.Unlock()
		if inflight != 1 || requests != 2 {
			t.Fatalf("A's instance: %d in flight, %d requests; want the lease counted as a request", inflight, requests)
		}
		l.Release()
		l.in.mu.Lock()
		inflight = l.in.st.inflight
		l.in.mu.Unlock()
		if inflight != 0 {
			t.Fatalf("%d in flight after the release", inflight)
		}
		if n := ff.connects.Load(); n != 1 {
			t.Fatalf("%d connects", n)
		}
	})
}

// DetachSession forgets the session at once, but its instance counts
// towards maxInstances until it is stopped — a process is a process until
// it is gone —: another session's instance beyond the limit waits for the
// stop (within its ctx), then takes the place; without one stopping, the
// limit refuses at once.
func TestDetachedInstanceCountsUntilStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"sharing":"per-session","idleTimeout":"0","maxInstances":1`)
		defer ff.close(t)
		s := ff.f.Get("s")
		a := live(s.Acquire(t.Context(), "A"))
		if a == nil {
			t.Fatal("no instance for session A")
		}
		if _, err := s.Acquire(t.Context(), "B"); !errors.Is(err, ErrInstanceLimit) {
			t.Fatalf("a second session's instance beyond maxInstances 1: %v", err)
		}
		stop := ff.f.DetachSession("A")
		if n := s.Status().Sessions; n != 0 {
			t.Fatalf("%d per-session instances listed after the detach", n)
		}
		if !a.Alive() {
			t.Fatal("the detached instance stopped before its stop was called")
		}
		// B waits for A's place, within its ctx.
		short, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := s.Acquire(short, "B"); !errors.Is(err, ErrInstanceLimit) {
			t.Fatalf("B's instance while A's still runs: %v", err)
		}
		got := make(chan Live, 1)
		go func() { got <- live(s.Acquire(t.Context(), "B")) }()
		synctest.Wait() // B waits
		select {
		case <-got:
			t.Fatal("B's instance was made while the detached A still ran")
		default:
		}
		stop(t.Context())
		b := <-got
		if a.Alive() || b == nil || !b.Alive() {
			t.Fatalf("after the stop: A alive %v, B %v; want A stopped, B running", a.Alive(), b)
		}
		if _, err := s.Acquire(t.Context(), "A"); err == nil {
			t.Fatal("a lease for the detached session was granted")
		}
		// A second stop counts nothing: B still holds the one place.
		stop(t.Context())
		if _, err := s.Acquire(t.Context(), "C"); !errors.Is(err, ErrInstanceLimit) {
			t.Fatalf("a third session's instance beside B's, after a second stop: %v", err)
		}
	})
}
