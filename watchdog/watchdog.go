package watchdog

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// While requests are in flight the watchdog re-checks every quarter of the
// idle timeout, within these bounds: after the last request ends, idleness
// is then noticed at most a quarter timeout (and never more than a second)
// late, and a tiny timeout cannot turn a long request into a busy loop.
const (
	minInflightRecheck = 10 * time.Millisecond
	maxInflightRecheck = time.Second
)

// DefaultPollInterval is how often the parent pid is re-read when the OS
// gives no immediate notice of the parent's exit (Config.PollInterval).
const DefaultPollInterval = time.Second

// Config configures Start. The zero Config follows the parent only: it
// terminates the process with SIGTERM when the parent that started it
// exits, and never for idleness.
type Config struct {
	// IdleTimeout is how long the server may go without activity, with
	// nothing in flight, before it terminates. Zero or negative (the
	// default): never for idleness. A positive IdleTimeout needs State.
	IdleTimeout time.Duration

	// State returns the time of the last activity and the number of
	// requests in flight, read together as one consistent snapshot —
	// Tracker.Snapshot is one. Reading them separately is a race that can
	// reap a server as it finishes a request (see Tracker). Required when
	// IdleTimeout is positive, unused otherwise. It is called on the
	// watchdog's goroutine and must not block. A zero lastActivity counts
	// as the time Start was called.
	State func() (lastActivity time.Time, inflight int)

	// OnTerminate is called when ShouldTerminate says the process should
	// go, with the reason, at most once per Start, on the watchdog's
	// goroutine; the watchdog stops afterwards. The default sends SIGTERM
	// to this process, so the program's own signal handling shuts it down
	// gracefully, and a program that does not handle SIGTERM dies of it
	// (where a process cannot signal itself, the default is os.Exit(0)). A
	// program that ignores SIGTERM, or whose shutdown hangs, keeps running:
	// set OnTerminate to something stronger if that matters. OnTerminate
	// must not call Stop, which waits for it to return.
	OnTerminate func(Reason)

	// OriginalPPID is the parent to follow. Zero (the default) means the
	// parent pid when this package was initialised, before main ran.
	// Negative means unknown: only re-parenting to PID 1 counts as
	// orphaning. 1 turns orphan detection off: a process started by init
	// (for example directly by a container's PID 1) cannot outlive it.
	OriginalPPID int

	// PollInterval is how often the parent pid is re-read unless a Linux
	// pidfd reports the parent's exit: on macOS (as a backstop to kqueue),
	// on other platforms, when the OS notification cannot be set up, and
	// when PPID is set. Zero or negative: DefaultPollInterval. The idle
	// rule never polls; it sleeps until the idle deadline could next pass.
	PollInterval time.Duration

	// Logger receives one Info record when the watchdog terminates the
	// process and Debug records about how it watches. Nil: slog.Default().
	Logger *slog.Logger

	// Seams, for tests and for programs with their own clock. Now and
	// After must be the same clock, and State's timestamps must come from
	// it too (Tracker uses time.Now by default, as does the watchdog).

	// Now returns the current time. Nil: time.Now.
	Now func() time.Time
	// After returns a channel that receives once d has passed. Nil: a
	// reused time.Timer.
	After func(d time.Duration) <-chan time.Time
	// PPID returns the current parent pid. Nil: os.Getppid, with immediate
	// exit notification where the OS offers it. Setting PPID turns the
	// notification off: the watchdog then calls PPID every PollInterval.
	PPID func() int

	// watch opens the OS exit notification for the parent. Nil: the
	// platform's watchParent when PPID is nil, none otherwise.
	watch func(pid int) (*parentWatch, error)
}

// Watchdog is a running watchdog, returned by Start.
type Watchdog struct {
	cancel context.CancelFunc
	done   chan struct{}
	fired  atomic.Int32 // Reason, set before OnTerminate is called

	idleTimeout  time.Duration
	pollInterval time.Duration
	originalPPID int
	state        func() (time.Time, int)
	onTerminate  func(Reason)
	now          func() time.Time
	after        func(time.Duration) <-chan time.Time
	ppid         func() int
	log          *slog.Logger
	started      time.Time // replaces a zero last activity

	watch    *parentWatch // nil: none
	poll     bool         // poll the parent pid
	detector string       // "pidfd", "kqueue", "poll" or "off", for logs and tests
}

// Start checks cfg and starts a watchdog on its own goroutine. The watchdog
// evaluates ShouldTerminate with the current state, parent pid and idle
// time: at once; when the idle deadline could next pass (it sleeps until
// then); while requests are in flight, every quarter of IdleTimeout
// (between 10 ms and 1 s); every PollInterval when the parent is polled;
// and as soon as the OS reports the parent's exit. An idle server therefore
// goes exactly at its deadline — except that after a long request it may
// go up to that quarter timeout late. When ShouldTerminate says so it
// calls OnTerminate once and stops.
//
// Cancelling ctx stops the watchdog like Stop, without waiting. Start
// returns ErrNoState if IdleTimeout is positive and State is nil.
func Start(ctx context.Context, cfg Config) (*Watchdog, error) {
	if cfg.IdleTimeout > 0 && cfg.State == nil {
		return nil, ErrNoState
	}
	w := &Watchdog{
		done:         make(chan struct{}),
		idleTimeout:  max(cfg.IdleTimeout, 0),
		pollInterval: cfg.PollInterval,
		originalPPID: cfg.OriginalPPID,
		state:        cfg.State,
		onTerminate:  cfg.OnTerminate,
		now:          cfg.Now,
		after:        cfg.After,
		ppid:         cfg.PPID,
		log:          cfg.Logger,
	}
	if w.pollInterval <= 0 {
		w.pollInterval = DefaultPollInterval
	}
	if w.originalPPID == 0 {
		w.originalPPID = startPPID
	}
	if w.state == nil {
		w.state = func() (time.Time, int) { return time.Time{}, 0 }
	}
	if w.onTerminate == nil {
		w.onTerminate = terminate
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.started = w.now()
	watch := cfg.watch
	if w.ppid == nil {
		w.ppid = os.Getppid
		if watch == nil {
			watch = watchParent
		}
	}

	switch {
	case w.originalPPID == 1:
		w.detector = "off"
	case w.originalPPID > 0 && watch != nil:
		pw, err := watch(w.originalPPID)
		if err == nil {
			w.watch, w.detector, w.poll = pw, pw.how, !pw.exact
			break
		}
		w.log.Debug("watchdog: no parent exit notification, polling", "err", err)
		fallthrough
	default:
		w.detector, w.poll = "poll", true
	}
	w.log.Debug("watchdog: started",
		"idle_timeout", w.idleTimeout,
		"original_ppid", w.originalPPID,
		"detector", w.detector)

	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx)
	return w, nil
}

// Stop stops the watchdog and waits until its goroutines have exited. Once
// Stop has returned OnTerminate will not be called; if the watchdog had
// already decided to terminate, Stop waits for OnTerminate to return
// (Reason tells). Stop may be called any number of times, concurrently, and
// after ctx was cancelled.
func (w *Watchdog) Stop() {
	w.cancel()
	<-w.done
}

// Done returns a channel that is closed once the watchdog has stopped:
// after OnTerminate returned, or after Stop or the cancellation of Start's
// context.
func (w *Watchdog) Done() <-chan struct{} { return w.done }

// Reason returns why the watchdog terminated the process: None while it is
// running, and if it was stopped before deciding to.
func (w *Watchdog) Reason() Reason { return Reason(w.fired.Load()) }

// run is the watchdog's goroutine. It alone reads the seams and decides.
func (w *Watchdog) run(ctx context.Context) {
	defer close(w.done)
	var exited <-chan struct{}
	if w.watch != nil {
		defer w.watch.close()
		exited = w.watch.exited
	}
	poll := w.poll
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	for {
		last, inflight := w.state()
		if last.IsZero() {
			last = w.started
		}
		now := w.now()
		idle := now.Sub(last)
		ppid := w.ppid()
		if stop, reason := ShouldTerminate(idle, w.idleTimeout, ppid, w.originalPPID, inflight); stop {
			if ctx.Err() != nil {
				return // Stop came first
			}
			w.fire(reason, ppid, idle, inflight)
			return
		}

		var wake <-chan time.Time
		if d, ok := w.nextCheck(idle, inflight, poll); ok {
			if w.after != nil {
				wake = w.after(d)
			} else if timer == nil {
				timer = time.NewTimer(d)
				wake = timer.C
			} else {
				timer.Reset(d)
				wake = timer.C
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-exited:
			// Re-read the parent pid now, and from here on poll it: a
			// notification that the re-read does not confirm must not
			// leave orphaning undetected.
			exited, poll = nil, true
		}
	}
}

// nextCheck returns how long to sleep before the next evaluation, and false
// if nothing but the context or the parent's exit can change the decision.
func (w *Watchdog) nextCheck(idle time.Duration, inflight int, poll bool) (time.Duration, bool) {
	var d time.Duration
	ok := false
	if w.idleTimeout > 0 {
		ok = true
		if inflight > 0 {
			// The deadline passes IdleTimeout after the last request
			// ends; look often enough to notice it soon after.
			d = min(max(w.idleTimeout/4, minInflightRecheck), maxInflightRecheck)
		} else {
			// Positive: ShouldTerminate said idle < IdleTimeout.
			d = w.idleTimeout - idle
		}
	}
	if poll && (!ok || w.pollInterval < d) {
		d, ok = w.pollInterval, true
	}
	return d, ok
}

// fire records reason and calls OnTerminate.
func (w *Watchdog) fire(reason Reason, ppid int, idle time.Duration, inflight int) {
	w.fired.Store(int32(reason))
	attrs := []any{"reason", reason.String()}
	switch reason {
	case Orphaned:
		attrs = append(attrs, "ppid", ppid, "original_ppid", w.originalPPID, "inflight", inflight)
	case Idle:
		attrs = append(attrs, "idle", idle, "idle_timeout", w.idleTimeout)
	}
	w.log.Info("watchdog: terminating process", attrs...)
	w.onTerminate(reason)
}
