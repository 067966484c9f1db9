package watchdog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// All loop tests run inside synctest bubbles: time is fake, starts at the
// same instant in every bubble, and only moves when every goroutine in the
// bubble is blocked, so "fired exactly at the deadline" is checkable.

const parentPID = 4242

var discard = slog.New(slog.DiscardHandler)

// probe stands in for the process: its parent pid, and the calls to
// OnTerminate.
type probe struct {
	ppid      atomic.Int64
	ppidCalls atomic.Int64

	mu    sync.Mutex
	fired []firing
}

type firing struct {
	reason Reason
	at     time.Time
}

func (p *probe) getppid() int {
	p.ppidCalls.Add(1)
	return int(p.ppid.Load())
}

func (p *probe) onTerminate(r Reason) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fired = append(p.fired, firing{r, time.Now()})
}

func (p *probe) firings() []firing {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]firing(nil), p.fired...)
}

// start starts a watchdog with the probe's seams filled in where cfg leaves
// them empty, lets it make its first check, and stops it when the test
// ends.
func start(t *testing.T, cfg Config) (*Watchdog, *probe) {
	t.Helper()
	if cfg.OriginalPPID == 0 {
		cfg.OriginalPPID = parentPID
	}
	p := &probe{}
	p.ppid.Store(parentPID)
	if cfg.OriginalPPID > 0 {
		p.ppid.Store(int64(cfg.OriginalPPID)) // the parent is alive
	}
	if cfg.PPID == nil {
		cfg.PPID = p.getppid
	}
	if cfg.OnTerminate == nil {
		cfg.OnTerminate = p.onTerminate
	}
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	wd, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wd.Stop)
	synctest.Wait() // the first check has run
	return wd, p
}

// advance lets d of fake time pass and the watchdog react to it.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// wantFired checks the probe saw exactly one OnTerminate, with reason, at
// time at.
func wantFired(t *testing.T, p *probe, reason Reason, at time.Time) {
	t.Helper()
	f := p.firings()
	if len(f) != 1 || f[0].reason != reason || !f[0].at.Equal(at) {
		t.Fatalf("OnTerminate calls %v, want one %v at %v", f, reason, at)
	}
}

func wantNotFired(t *testing.T, p *probe) {
	t.Helper()
	if f := p.firings(); len(f) > 0 {
		t.Fatalf("OnTerminate called: %v", f)
	}
}

func TestIdleFiresAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		tr := NewTracker(nil)
		wd, p := start(t, Config{IdleTimeout: 10 * time.Second, State: tr.Snapshot})
		advance(10*time.Second - time.Nanosecond)
		wantNotFired(t, p)
		advance(time.Nanosecond)
		wantFired(t, p, Idle, t0.Add(10*time.Second))
		<-wd.Done()
		if wd.Reason() != Idle {
			t.Errorf("Reason() = %v, want idle", wd.Reason())
		}
	})
}

func TestIdleDeadlineMovesWithActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		tr := NewTracker(nil)
		_, p := start(t, Config{IdleTimeout: 10 * time.Second, State: tr.Snapshot})
		advance(6 * time.Second)
		tr.Touch() // deadline 16 s
		advance(9 * time.Second)
		tr.Begin() // 15 s: busy
		advance(time.Second)
		tr.End() // 16 s: deadline 26 s
		advance(10*time.Second - time.Nanosecond)
		wantNotFired(t, p)
		advance(time.Nanosecond)
		wantFired(t, p, Idle, t0.Add(26*time.Second))
	})
}

// TestInflightNeverIdle: a request in flight for an hour is never reaped,
// however small the timeout; the idle clock starts when it ends.
func TestInflightNeverIdle(t *testing.T) {
	for _, timeout := range []time.Duration{time.Nanosecond, time.Millisecond, time.Second, time.Minute} {
		t.Run(timeout.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := NewTracker(nil)
				tr.Begin()
				_, p := start(t, Config{IdleTimeout: timeout, State: tr.Snapshot})
				advance(time.Hour)
				wantNotFired(t, p)
				tr.End()
				end := time.Now()
				advance(2 * time.Minute)
				f := p.firings()
				if len(f) != 1 || f[0].reason != Idle {
					t.Fatalf("OnTerminate calls %v, want one idle", f)
				}
				// Exactly at the deadline; a timeout under the
				// in-flight re-check floor may be late by up to it.
				late := f[0].at.Sub(end.Add(timeout))
				if late < 0 || late > 0 && timeout >= minInflightRecheck || late > minInflightRecheck {
					t.Errorf("fired %v after the deadline", late)
				}
			})
		})
	}
}

func TestOrphanedByPPID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		newPPID  int
		inflight bool
	}{
		{"reparented to init", 1, false},
		{"reparented to a subreaper", 777, false},
		{"orphan beats work in flight", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				tr := NewTracker(nil)
				if tc.inflight {
					tr.Begin()
				}
				_, p := start(t, Config{
					IdleTimeout:  time.Hour,
					State:        tr.Snapshot,
					PollInterval: time.Second,
				})
				advance(3500 * time.Millisecond)
				p.ppid.Store(int64(tc.newPPID))
				advance(time.Second)
				// Noticed at the next poll, 4 s.
				wantFired(t, p, Orphaned, t0.Add(4*time.Second))
			})
		})
	}
}

func TestOrphanDefaultPollInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		_, p := start(t, Config{})
		p.ppid.Store(1)
		advance(time.Hour)
		wantFired(t, p, Orphaned, t0.Add(DefaultPollInterval))
	})
}

func TestOrphanUnknownOriginalParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		_, p := start(t, Config{OriginalPPID: -1})
		p.ppid.Store(777) // a change, but from an unknown parent
		advance(10 * time.Second)
		wantNotFired(t, p)
		p.ppid.Store(1)
		advance(time.Second)
		wantFired(t, p, Orphaned, t0.Add(11*time.Second))
	})
}

// TestStartedByInit: with PID 1 as the original parent there is nothing to
// follow, so the watchdog does not poll at all, and orphan detection is off
// whatever the parent pid reads (a process told to ignore its parent).
func TestStartedByInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wd, p := start(t, Config{OriginalPPID: 1})
		p.ppid.Store(parentPID) // a parent other than init: still off
		advance(24 * time.Hour)
		wantNotFired(t, p)
		if wd.detector != "off" {
			t.Errorf("detector %q, want off", wd.detector)
		}
		if n := p.ppidCalls.Load(); n != 1 {
			t.Errorf("parent pid read %d times in a day, want once", n)
		}
	})
}

func TestOnTerminateCalledOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(nil)
		wd, p := start(t, Config{IdleTimeout: time.Second, State: tr.Snapshot})
		advance(time.Second)
		p.ppid.Store(1) // another reason arrives after the first
		advance(time.Hour)
		<-wd.Done()
		wd.Stop()
		wd.Stop()
		if f := p.firings(); len(f) != 1 || f[0].reason != Idle {
			t.Fatalf("OnTerminate calls %v, want one idle", f)
		}
	})
}

func TestStopBeforeFire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(nil)
		wd, p := start(t, Config{IdleTimeout: 10 * time.Second, State: tr.Snapshot})
		advance(5 * time.Second)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(wd.Stop) // concurrent and repeated Stops
		}
		wg.Wait()
		select {
		case <-wd.Done():
		default:
			t.Fatal("Done not closed after Stop")
		}
		p.ppid.Store(1)
		advance(time.Hour)
		wantNotFired(t, p)
		if wd.Reason() != None {
			t.Errorf("Reason() = %v after Stop, want none", wd.Reason())
		}
	})
}

func TestContextCancelStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		p := &probe{}
		p.ppid.Store(parentPID)
		wd, err := Start(ctx, Config{
			OriginalPPID: parentPID,
			PPID:         p.getppid,
			OnTerminate:  p.onTerminate,
			Logger:       discard,
		})
		if err != nil {
			t.Fatal(err)
		}
		advance(time.Second)
		cancel()
		<-wd.Done()
		p.ppid.Store(1)
		advance(time.Hour)
		wantNotFired(t, p)
	})
}

// TestStopDuringDecision: a Stop that lands while the watchdog is reading
// the state wins over the decision that state leads to.
func TestStopDuringDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		p := &probe{}
		p.ppid.Store(parentPID)
		var calls atomic.Int64
		wd, err := Start(ctx, Config{
			IdleTimeout: time.Second,
			State: func() (time.Time, int) {
				if calls.Add(1) > 1 {
					cancel() // Stop arrives mid-check
				}
				return time.Time{}, 0
			},
			OriginalPPID: parentPID,
			PPID:         p.getppid,
			OnTerminate:  p.onTerminate,
			Logger:       discard,
		})
		if err != nil {
			t.Fatal(err)
		}
		advance(time.Hour)
		<-wd.Done()
		wantNotFired(t, p)
	})
}

// TestStopWaitsForOnTerminate: Stop returns only after a running
// OnTerminate has returned, so nothing the watchdog started outlives it.
func TestStopWaitsForOnTerminate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan struct{})
		p := &probe{}
		p.ppid.Store(1)
		wd, err := Start(t.Context(), Config{
			OriginalPPID: parentPID,
			PPID:         p.getppid,
			Logger:       discard,
			OnTerminate: func(Reason) {
				close(entered)
				<-release
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		<-entered
		var stopped atomic.Bool
		go func() {
			wd.Stop()
			stopped.Store(true)
		}()
		synctest.Wait()
		if stopped.Load() {
			t.Fatal("Stop returned while OnTerminate was running")
		}
		close(release)
		synctest.Wait()
		if !stopped.Load() {
			t.Fatal("Stop did not return after OnTerminate")
		}
		if wd.Reason() != Orphaned {
			t.Errorf("Reason() = %v, want orphaned", wd.Reason())
		}
	})
}

// fakeWatch is an OS exit notification the test triggers.
type fakeWatch struct {
	exited chan struct{}
	closed atomic.Bool
}

func newFakeWatch() *fakeWatch { return &fakeWatch{exited: make(chan struct{})} }

func (f *fakeWatch) open(exact bool) func(int) (*parentWatch, error) {
	return func(pid int) (*parentWatch, error) {
		if pid != parentPID {
			return nil, errors.New("not the parent")
		}
		return &parentWatch{
			exited: f.exited,
			close:  func() { f.closed.Store(true) },
			how:    "fake",
			exact:  exact,
		}, nil
	}
}

// TestParentNotification: with an exact OS notification the parent pid is
// not polled, and its exit is acted on at once.
func TestParentNotification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		fw := newFakeWatch()
		wd, p := start(t, Config{watch: fw.open(true)})
		if wd.detector != "fake" {
			t.Errorf("detector %q, want fake", wd.detector)
		}
		advance(7 * time.Second)
		if n := p.ppidCalls.Load(); n != 1 {
			t.Errorf("parent pid read %d times, want once: no polling", n)
		}
		p.ppid.Store(1)
		close(fw.exited)
		synctest.Wait()
		wantFired(t, p, Orphaned, t0.Add(7*time.Second))
		<-wd.Done()
		if !fw.closed.Load() {
			t.Error("watch not closed")
		}
	})
}

// TestParentNotificationUnconfirmed: a notification that the parent pid
// does not confirm decides nothing, but polling takes over.
func TestParentNotificationUnconfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		fw := newFakeWatch()
		_, p := start(t, Config{watch: fw.open(true), PollInterval: time.Minute})
		advance(7 * time.Second)
		close(fw.exited)
		advance(13 * time.Second)
		wantNotFired(t, p)
		p.ppid.Store(1) // at 20 s; polls at 67 s
		advance(time.Hour)
		wantFired(t, p, Orphaned, t0.Add(67*time.Second))
	})
}

// TestParentNotificationInexact: a notification not known to be exact
// (macOS) is backed by polling from the start.
func TestParentNotificationInexact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		fw := newFakeWatch()
		wd, p := start(t, Config{watch: fw.open(false), PollInterval: time.Minute})
		p.ppid.Store(1)
		advance(time.Hour)
		wantFired(t, p, Orphaned, t0.Add(time.Minute))
		<-wd.Done()
		if !fw.closed.Load() {
			t.Error("watch not closed")
		}
	})
}

func TestParentNotificationUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		fw := newFakeWatch()
		// The watch refuses any pid but parentPID.
		wd, p := start(t, Config{watch: fw.open(true), OriginalPPID: 99})
		if wd.detector != "poll" {
			t.Errorf("detector %q, want poll", wd.detector)
		}
		advance(30 * time.Second)
		wantNotFired(t, p)
		p.ppid.Store(1)
		advance(time.Hour)
		wantFired(t, p, Orphaned, t0.Add(31*time.Second))
	})
}

func TestAlreadyExited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		// The parent exited between package init and Start: the watch
		// reports it at once, and the parent pid confirms it.
		_, p := start(t, Config{
			watch:        func(int) (*parentWatch, error) { return alreadyExited("fake"), nil },
			PPID:         func() int { return 1 },
			PollInterval: time.Hour,
		})
		wantFired(t, p, Orphaned, t0)
	})
}

func TestStartNeedsState(t *testing.T) {
	_, err := Start(t.Context(), Config{IdleTimeout: time.Second})
	if !errors.Is(err, ErrNoState) {
		t.Fatalf("Start without State: %v, want ErrNoState", err)
	}
}

// TestZeroLastActivity: a State that has seen no activity yet counts idle
// time from Start.
func TestZeroLastActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		_, p := start(t, Config{
			IdleTimeout: 5 * time.Second,
			State:       func() (time.Time, int) { return time.Time{}, 0 },
		})
		advance(time.Hour)
		wantFired(t, p, Idle, t0.Add(5*time.Second))
	})
}

// TestZeroTracker: a zero Tracker's idle clock starts at its first use,
// here the watchdog's first check.
func TestZeroTracker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tr Tracker
		advance(time.Hour) // unused Tracker: no idle time accrues
		t1 := time.Now()
		_, p := start(t, Config{IdleTimeout: 5 * time.Second, State: tr.Snapshot})
		advance(time.Hour)
		wantFired(t, p, Idle, t1.Add(5*time.Second))
	})
}

// TestAfterSeam: a program's own clock, through Now and After.
func TestAfterSeam(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var afters atomic.Int64
		tr := NewTracker(nil)
		_, p := start(t, Config{
			IdleTimeout: 3 * time.Second,
			State:       tr.Snapshot,
			Now:         time.Now,
			After: func(d time.Duration) <-chan time.Time {
				afters.Add(1)
				return time.After(d)
			},
		})
		advance(time.Hour)
		wantFired(t, p, Idle, t0.Add(3*time.Second))
		if afters.Load() == 0 {
			t.Error("After not used")
		}
	})
}

// TestLogsTermination: one Info record, naming the reason.
func TestLogsTermination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
		tr := NewTracker(nil)
		start(t, Config{IdleTimeout: time.Second, State: tr.Snapshot, Logger: log})
		advance(time.Second)
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=INFO") ||
			!strings.Contains(out, "reason=idle") || !strings.Contains(out, "idle_timeout=1s") {
			t.Errorf("log:\n%s", out)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
		_, p := start(t, Config{Logger: log})
		p.ppid.Store(1)
		advance(time.Second)
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if !strings.Contains(out, "reason=orphaned ppid=1 original_ppid=4242") {
			t.Errorf("log:\n%s", out)
		}
	})
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}
