package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Connector makes sessions for a Supervisor. Each transport (a stdio child
// process, a remote HTTP server) implements it; see "Implementing a
// Connector" in the package documentation.
type Connector interface {
	// Connect establishes a new session, including any handshake, and
	// returns it once it is ready to serve. The Supervisor owns the
	// returned Session, hands it out through Supervisor.Session while it
	// serves, and closes it.
	//
	// ctx bounds the connect phase only: it carries Policy.InitTimeout and
	// is cancelled when Stop is called and as soon as Connect returns.
	// Connect must return promptly once ctx is done, and must not tie the
	// session's lifetime to ctx. On error it returns a nil Session; the
	// error should carry a failure class (see Classify), and the
	// Supervisor classifies it again in case it does not.
	Connect(ctx context.Context) (Session, error)
}

// Session is one live connection made by a Connector.
type Session interface {
	// Wait blocks until the session ends and reports why: nil for a clean
	// end (including one caused by Close), an error otherwise, ideally
	// carrying a failure class. The Supervisor calls Wait exactly once, on
	// its own goroutine.
	Wait() error
	// Close ends the session and releases its resources, making Wait
	// return. It must be idempotent, safe to call concurrently with Wait,
	// and must not block for long; the Supervisor calls it on Stop, on
	// RestartAndWait, and again after Wait returns.
	Close() error
}

// Answerer is implemented by a Session that can tell whether it did useful
// work: answered at least one request after its handshake. A Supervisor
// asks when the session ends (DESIGN: backoff is for crash loops, not for
// demand):
//
//   - a session that answered was a success, however short: the count of
//     failures in a row is reset, and a restart the Policy makes is made
//     at once;
//   - a session that ended before it answered anything is a failed run,
//     like a Connect that failed: it adds one to the count, which spaces
//     the attempts that follow (Policy.RetryDelay) and which
//     Policy.MaxAttempts bounds.
//
// A Session that does not implement Answerer counts as having answered
// only once it stayed up for Policy.HealthyPeriod. Answered must be safe
// to call concurrently with Wait and after it returned.
type Answerer interface {
	Answered() bool
}

// answered reports whether sess answered a request (Answerer).
func answered(sess Session) bool {
	a, ok := sess.(Answerer)
	return ok && a.Answered()
}

// ContextCloser is implemented by a Session whose Close can be bounded.
// The Supervisor calls CloseContext instead of Close with the context given
// to Stop, so that a shutdown deadline reaches the session's teardown (a
// process stop compresses its escalation to fit it); closes not caused by
// Stop get context.Background().
type ContextCloser interface {
	CloseContext(ctx context.Context) error
}

// Supervisor drives one Connector: it connects on Start, watches the
// session, reconnects with backoff according to its Policy, gives up into
// StateFailed, and tears everything down on Stop. All waits honour a
// context or Stop; no goroutine of a Supervisor outlives a successful Stop
// or a rest in a terminal state.
//
// A Supervisor is safe for concurrent use. Create it with New.
type Supervisor struct {
	name string
	conn Connector
	pol  Policy                 // New's, defaults applied
	set  atomic.Pointer[Policy] // SetPolicy's, when it was called: it wins
	tr   Tracker
	cur  atomic.Pointer[serving] // what Session returns; written only by the run goroutine
	own  Streak                  // the crash-loop record, unless the policy shares one

	// startSem serializes Start while letting a waiting Start honour its
	// context (a mutex could not).
	startSem chan struct{}

	mu        sync.Mutex
	run       *run          // the current or most recent run; nil before the first Start
	restarted chan struct{} // closed and replaced after each successful reconnect
}

// serving holds the session Session hands out: Session is an interface,
// and an atomic pointer to it is one load on the path of every request.
type serving struct{ sess Session }

// run is one Start-to-rest cycle of the supervisor goroutine. Everything in
// it is created by Start; only the goroutine of the run touches its
// sessions.
type run struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	started chan error    // buffered 1: outcome of the first connect
	restart chan struct{} // buffered 1: a pending RestartAndWait request
	done    chan struct{} // closed when the run goroutine returns

	stopMu  sync.Mutex
	stopCtx context.Context // the context of the first Stop, for the session's close
}

// closeContext is the context a close of the run's session gets: that of
// the Stop that ended the run, else context.Background().
func (r *run) closeContext() context.Context {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if r.stopCtx != nil {
		return r.stopCtx
	}
	return context.Background()
}

// New returns a stopped Supervisor that will drive connector with policy
// (zero fields take the defaults documented on Policy and Backoff). name
// identifies the connection in logs and errors. New starts nothing.
func New(name string, connector Connector, policy Policy) *Supervisor {
	return &Supervisor{
		name:      name,
		conn:      connector,
		pol:       policy.withDefaults(),
		startSem:  make(chan struct{}, 1),
		restarted: make(chan struct{}),
	}
}

// SetPolicy replaces the policy (zero fields take their defaults, as in
// New), callbacks and logger included. It governs every decision taken
// after it returns — whether and when the next restart happens, the next
// connect's timeout — without touching the running session; a wait
// already begun (a backoff delay, a healthy-period timer) keeps the value
// it began with. Safe to call concurrently with everything else.
func (s *Supervisor) SetPolicy(policy Policy) {
	pol := policy.withDefaults()
	s.set.Store(&pol)
}

// policy is the policy in force. (New's is kept inline: a supervisor
// whose policy never changes costs no allocation for it.)
func (s *Supervisor) policy() *Policy {
	if p := s.set.Load(); p != nil {
		return p
	}
	return &s.pol
}

// logger tags records with the supervisor's name. It is built per record,
// not kept: records are rare, and a fleet of a thousand idle supervisors
// should not hold a thousand loggers.
func (s *Supervisor) logger() *slog.Logger { return s.policy().Logger.With("server", s.name) }

// Name returns the name given to New.
func (s *Supervisor) Name() string { return s.name }

// State returns a snapshot of the state, when it was entered, the last
// error, the restart counter and the crash-loop record (its Streak's
// failures, and its next attempt when that is later than the one the
// Supervisor scheduled).
func (s *Supervisor) State() StateInfo {
	info := s.tr.Snapshot()
	failures, next, _ := s.streak().snapshot()
	info.Failures = failures
	if next.After(info.NextAttempt) && next.After(time.Now()) && info.State != StateStarting && info.State != StateReady && info.State != StateDegraded {
		info.NextAttempt = next
	}
	return info
}

// streak is the crash-loop record in force: the policy's shared one, or
// the Supervisor's own.
func (s *Supervisor) streak() *Streak {
	if k := s.policy().Streak; k != nil {
		return k
	}
	return &s.own
}

// IsReady reports whether the Supervisor is serving: StateReady or
// StateDegraded.
func (s *Supervisor) IsReady() bool {
	st := s.tr.State()
	return st == StateReady || st == StateDegraded
}

// Changed returns a channel that is closed at the next change of State()
// (state, last error, or the time of the next attempt); see
// Tracker.Changed.
func (s *Supervisor) Changed() <-chan struct{} { return s.tr.Changed() }

// Restarted returns a channel that is closed at the next successful
// reconnect (after OnRestart has run). Each reconnect closes the current
// channel and installs a new one, so read Restarted again for each wait, and
// read it before the event you mean to wait for.
func (s *Supervisor) Restarted() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarted
}

// Session returns the session the Supervisor's run is serving with, or nil
// when there is none: the Session Connect returned, from just before the
// Supervisor moves to StateReady — so a caller that sees Ready in State,
// after Changed or after Start returned nil, finds it unless it has ended
// since — until the run sees it end. It stays the same through MarkDegraded and MarkHealthy; after a
// reconnect it is the new session, from before OnRestart is called and
// Restarted's channel is closed. Session is nil:
//
//   - before the first Start, and while Start or a reconnect is connecting;
//   - from the moment the run sees the session end, when its Wait returns
//     — also for an end that Stop or RestartAndWait asks for: while the
//     session's close is under way it is still handed out (its process
//     still holds memory, and what it sends still comes from it; a caller
//     that must not use a closing session knows it asked for the close) —,
//     and before OnDisconnect is called, so that OnDisconnect and
//     everything after it never get the ended session;
//   - during a Restarting wait, and in Stopped and Failed — so after Stop
//     has returned nil, which it does only once the run has closed its
//     session.
//
// A session made by a Connect that Stop or Start's context interrupted is
// closed at once and never handed out.
//
// Session is safe for concurrent use and takes no lock (one atomic load), so
// it suits a per-request path. What it returns is a snapshot: the session may
// end right after, so a caller still handles its errors, and must not Close
// it — the Supervisor owns it (RestartAndWait asks for another). For a
// moment after the run saw the session end, State may still say Ready or
// Degraded while Session is nil: a nil Session means nothing to serve with,
// whatever the state.
func (s *Supervisor) Session() Session {
	if c := s.cur.Load(); c != nil {
		return c.sess
	}
	return nil
}

// serve hands sess out through Session. The run calls it just before it
// moves to StateReady, so that the store happens before the state change
// any caller can observe.
func (s *Supervisor) serve(sess Session) { s.cur.Store(&serving{sess: sess}) }

// unserve stops handing out the run's session (Session returns nil), as
// soon as the run sees it end.
func (s *Supervisor) unserve() { s.cur.Store(nil) }

// Start makes the first connection of a run and, when it succeeds, leaves
// the Supervisor Ready with a goroutine watching the session. It returns
// when the connection is made or has failed.
//
//   - Already running (Ready, Degraded or Restarting): Start does nothing
//     and returns nil.
//   - From Stopped or Failed in a crash loop (CrashLoop): Start returns
//     the *CrashLoopError at once, connecting nothing, until the loop's
//     next attempt is due.
//   - Otherwise, from Stopped or Failed: the state becomes Starting and
//     Connect is called once — Start does not retry. A transient failure
//     leaves the Supervisor Stopped with the error recorded; a permanent
//     one (IsPermanent) leaves it Failed and calls OnFailed. Either way
//     Start returns the classified error, and the failure counts towards
//     a crash loop: the count of failures in a row is kept across Starts,
//     and reset only by a session that answered (Answerer), a healthy
//     period, or Stop.
//   - Concurrent calls serialize: a second Start waits for the first and
//     then sees its outcome (nil if it succeeded, another attempt if not).
//
// ctx bounds only the start: if it ends before the connection is made,
// Start returns ctx.Err() at once and the attempt is abandoned (its Connect
// is cancelled, and the Supervisor returns to Stopped when Connect returns;
// a session made regardless is closed). Values in ctx are passed on to every Connect of the run. If
// Stop interrupts the start, Start returns an error wrapping ErrStopped.
func (s *Supervisor) Start(ctx context.Context) error {
	select {
	case s.startSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.startSem }()

	s.mu.Lock()
	prev := s.run
	s.mu.Unlock()
	if prev != nil {
		select {
		case <-prev.done:
		default:
			if prev.ctx.Err() == nil && !s.tr.State().IsTerminal() {
				return nil // running
			}
			// Stopping, or parked in Failed or Stopped with its goroutine
			// on the way out: let it finish before starting over.
			select {
			case <-prev.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.CrashLoop(); err != nil {
		return err
	}

	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r := &run{
		ctx:     runCtx,
		cancel:  cancel,
		started: make(chan error, 1),
		restart: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	s.mu.Lock()
	if err := s.tr.Set(StateStarting); err != nil {
		s.mu.Unlock()
		cancel(err)
		return err
	}
	s.tr.ResetRestarts()
	s.run = r
	s.mu.Unlock()

	go s.loop(r)

	select {
	case err := <-r.started:
		return err
	case <-ctx.Done():
		r.cancel(context.Cause(ctx))
		return ctx.Err()
	}
}

// Stop ends the current run: it cancels a connect in progress or a backoff
// wait, closes the session, and waits until the Supervisor's goroutine has
// returned (after the final OnDisconnect), leaving the Supervisor Stopped
// with no error recorded. Stop on a Failed Supervisor moves it to Stopped;
// on a Stopped one it does nothing. Either way it forgets past failures: a
// crash loop ends with a Stop, and the next Start connects at once. Stop
// returns nil once everything is down.
//
// If ctx ends first, Stop returns ctx.Err() and the shutdown continues in
// the background; that happens only when a Connector or Session does not
// honour its contract (Connect ignoring its ctx, Wait not returning after
// Close).
func (s *Supervisor) Stop(ctx context.Context) error {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	if r != nil {
		r.stopMu.Lock()
		if r.stopCtx == nil {
			r.stopCtx = ctx
		}
		r.stopMu.Unlock()
		r.cancel(ErrStopped)
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		// The run is over: nothing of it (its contexts, this Stop's) is
		// kept while the Supervisor stays stopped, as a dormant server's
		// does for hours.
		s.mu.Lock()
		if s.run == r {
			s.run = nil
		}
		s.mu.Unlock()
	}
	// Acknowledge a failure. Refused (harmlessly) if a concurrent Start
	// has already moved on.
	_ = s.tr.transition([]State{StateFailed}, StateStopped, nil)
	if st := s.tr.State(); st.IsTerminal() {
		if s.policy().Streak == nil {
			s.own.Reset() // a shared record is its owner's
		}
		s.tr.SetNextAttempt(time.Time{})
	}
	return nil
}

// RestartAndWait closes the current session so that the Supervisor
// reconnects, and waits for the reconnect to succeed. The reconnect happens
// whatever Policy.Restart says; the first attempt is made at once and
// is not counted against MaxAttempts, later ones follow the backoff. During
// a backoff wait, RestartAndWait cuts the wait short instead.
//
// It returns nil after a successful reconnect (and OnRestart), or:
//   - an error wrapping ErrNotStarted, at once, if the Supervisor is not
//     running (Stopped, Starting or Failed) — RestartAndWait does not start
//     a stopped Supervisor; call Start for that;
//   - the recorded failure if the Supervisor gives up and enters Failed;
//   - an error wrapping ErrStopped if Stop ends the run;
//   - ctx.Err() if ctx ends, or context.DeadlineExceeded after timeout
//     (timeout <= 0 means no timeout beyond ctx). The reconnect carries on.
//
// Concurrent calls share one restart.
func (s *Supervisor) RestartAndWait(ctx context.Context, timeout time.Duration) error {
	s.mu.Lock()
	r := s.run
	st := s.tr.State()
	if r == nil || r.ctx.Err() != nil ||
		(st != StateReady && st != StateDegraded && st != StateRestarting) {
		s.mu.Unlock()
		return fmt.Errorf("lifecycle: %s: restart while %s: %w", s.name, st, ErrNotStarted)
	}
	next := s.restarted
	select {
	case r.restart <- struct{}{}:
	default: // a request is already pending
	}
	s.mu.Unlock()

	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	select {
	case <-next:
		return nil
	case <-r.done:
		info := s.tr.Snapshot()
		if info.State == StateFailed && info.LastError != nil {
			return fmt.Errorf("lifecycle: %s: restart failed: %w", s.name, info.LastError)
		}
		return fmt.Errorf("lifecycle: %s: restart abandoned: %w", s.name, ErrStopped)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MarkDegraded records that a Ready Supervisor is serving but unwell (for
// example a failed health check), moving it to StateDegraded with err as
// the last error. It is allowed only in Ready or Degraded; otherwise it
// changes nothing and returns an error wrapping ErrInvalidTransition.
func (s *Supervisor) MarkDegraded(err error) error {
	return s.tr.transition([]State{StateReady, StateDegraded}, StateDegraded, err)
}

// MarkHealthy moves a Degraded Supervisor back to StateReady and clears the
// last error. In Ready it does nothing; in any other state it returns an
// error wrapping ErrInvalidTransition.
func (s *Supervisor) MarkHealthy() error {
	return s.tr.transition([]State{StateReady, StateDegraded}, StateReady, nil)
}

// loop is the goroutine of one run: first connect, then watch and
// reconnect until Stop, a permanent failure or the restart limit. It alone
// makes the run's state transitions after Starting.
func (s *Supervisor) loop(r *run) {
	defer close(r.done)

	sess, err := s.connect(r.ctx)
	if r.ctx.Err() != nil {
		discard(sess)
		s.setState(StateStopped, nil)
		r.started <- fmt.Errorf("lifecycle: %s: start interrupted: %w", s.name, context.Cause(r.ctx))
		return
	}
	if err != nil {
		s.failedRun(err)
		if IsPermanent(err) {
			s.fail(err)
		} else {
			s.logger().Warn("start failed", "err", err)
			s.setState(StateStopped, err)
		}
		r.started <- err
		return
	}
	s.serve(sess)
	s.setState(StateReady, nil)
	s.logger().Info("ready")
	r.started <- nil

	for sess != nil {
		end, forced := s.watch(r, sess)
		if r.ctx.Err() != nil {
			s.setState(StateStopped, nil)
			s.logger().Info("stopped")
			return
		}
		if !forced {
			if answered(sess) {
				s.streak().Reset()
			} else {
				s.failedRun(end)
			}
		}
		sess = s.reconnect(r, end, forced)
	}
}

// failedRun counts a run that failed before answering anything — a
// Connect that failed, a session that ended unanswered — and records when
// the next attempt is due (Policy.RetryDelay).
func (s *Supervisor) failedRun(err error) {
	_, next := s.streak().Fail(err, s.policy().RetryDelay)
	s.tr.SetNextAttempt(next) // (a change Changed reports)
}

// CrashLoop reports whether the Supervisor is in a crash loop: two or more
// runs in a row failed before answering anything (Answerer), and the next
// attempt is not due yet — a Restarting Supervisor waits out its backoff,
// or a Stopped or Failed one would refuse Start. It returns a
// *CrashLoopError saying how many runs failed, the last failure and when
// the next attempt is due, or nil. A caller with a request for the
// connection answers it with that error at once rather than wait: a
// request never waits out a backoff.
func (s *Supervisor) CrashLoop() error {
	switch s.tr.State() {
	case StateStopped, StateFailed, StateRestarting:
	default:
		return nil
	}
	return s.streak().CrashLoop(s.name)
}

// watch waits for sess to end, closing it on Stop or on a restart request,
// and resets the restart counter once the session has been up for the
// healthy period. Session stops handing sess out before it is closed and
// before OnDisconnect. It reports Wait's classified result and whether the
// end was requested by RestartAndWait.
func (s *Supervisor) watch(r *run, sess Session) (end error, forced bool) {
	waitc := make(chan error, 1)
	go func() { waitc <- sess.Wait() }()

	var healthy <-chan time.Time
	if hp := s.policy().HealthyPeriod; hp > 0 {
		t := time.NewTimer(hp)
		defer t.Stop()
		healthy = t.C
	}
	stopping := r.ctx.Done()
	for waiting := true; waiting; {
		select {
		case end = <-waitc:
			waiting = false
		case <-healthy:
			healthy = nil
			if n := s.streak().Failures(); n > 0 {
				s.logger().Info("healthy; failure count reset", "failures", n)
			}
			s.streak().Reset()
		case <-r.restart:
			forced = true
			s.closeSession(r, sess)
		case <-stopping:
			stopping = nil
			s.closeSession(r, sess)
		}
	}
	// Ended: neither OnDisconnect nor anything after it gets the session.
	s.unserve()
	s.closeSession(r, sess) // release resources after an unrequested end too
	end = Classify(end)
	if end != nil {
		s.logger().Warn("session ended", "err", end)
	} else {
		s.logger().Info("session ended")
	}
	if f := s.policy().OnDisconnect; f != nil {
		f(end)
	}
	return end, forced
}

// reconnect decides, after a session ended with end, whether to reconnect,
// and does so, each attempt after the delay the count of failures in a
// row asks for (Policy.RetryDelay: none after a run that answered, or
// after one failure). It returns the new session, or nil after moving to a
// terminal state.
func (s *Supervisor) reconnect(r *run, end error, forced bool) Session {
	switch {
	case IsPermanent(end):
		s.fail(end)
		return nil
	case forced, s.policy().Restart == RestartAlways:
	case end == nil:
		s.logger().Info("session ended cleanly; not restarting", "restart", s.policy().Restart)
		s.setState(StateStopped, nil)
		return nil
	case s.policy().Restart == RestartNever:
		s.fail(end)
		return nil
	}

	s.setState(StateRestarting, end)
	last := end
	immediate := forced
	for attempt := 1; ; attempt++ {
		if !immediate {
			s.tr.IncRestarts()
			n, next, _ := s.streak().snapshot()
			pol := s.policy()
			if pol.MaxAttempts >= 0 && n > pol.MaxAttempts {
				err := fmt.Errorf("lifecycle: %s: %w after %d failed attempts in a row", s.name, ErrRestartLimit, pol.MaxAttempts)
				if last != nil {
					err = fmt.Errorf("%w: %w", err, last)
				}
				s.fail(err)
				return nil
			}
			d := time.Duration(0)
			if !next.IsZero() {
				d = max(time.Until(next), 0)
			}
			s.logger().Info("restarting", "attempt", attempt, "failures", n, "delay", d)
			if f := pol.OnRestarting; f != nil {
				f(attempt, d, last)
			}
			if d > 0 && !s.pause(r, d) {
				s.setState(StateStopped, nil)
				return nil
			}
			s.tr.SetNextAttempt(time.Time{})
		}
		immediate = false

		sess, err := s.connect(r.ctx)
		if r.ctx.Err() != nil {
			discard(sess)
			s.setState(StateStopped, nil)
			return nil
		}
		if err == nil {
			s.serve(sess)
			s.setState(StateReady, nil)
			s.logger().Info("ready after restart")
			if f := s.policy().OnRestart; f != nil {
				f()
			}
			s.mu.Lock()
			select {
			case <-r.restart: // satisfied by this reconnect
			default:
			}
			close(s.restarted)
			s.restarted = make(chan struct{})
			s.mu.Unlock()
			return sess
		}
		last = err
		s.failedRun(err)
		if IsPermanent(err) {
			s.fail(err)
			return nil
		}
		s.logger().Warn("restart attempt failed", "err", err)
		s.setState(StateRestarting, err)
	}
}

// pause waits d, or less if RestartAndWait asks for a restart. It reports
// false if the run was stopped.
func (s *Supervisor) pause(r *run, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.restart:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// connect calls the Connector once under InitTimeout and classifies the
// outcome.
func (s *Supervisor) connect(parent context.Context) (Session, error) {
	if err := parent.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := parent, context.CancelFunc(func() {})
	if it := s.policy().InitTimeout; it > 0 {
		ctx, cancel = context.WithTimeoutCause(parent, it, ErrInitTimeout)
	}
	defer cancel()

	sess, err := s.conn.Connect(ctx)
	if err != nil {
		discard(sess)
		if parent.Err() == nil && errors.Is(context.Cause(ctx), ErrInitTimeout) && !errors.Is(err, ErrInitTimeout) {
			err = withClass(ErrInitTimeout, err)
		}
		return nil, Classify(err)
	}
	if sess == nil {
		return nil, fmt.Errorf("lifecycle: %s: Connect returned neither a Session nor an error", s.name)
	}
	return sess, nil
}

// fail parks the run in StateFailed with err and calls OnFailed. The run
// goroutine returns right after, so it happens at most once per run.
func (s *Supervisor) fail(err error) {
	s.setState(StateFailed, err)
	s.logger().Error("failed", "err", err)
	if f := s.policy().OnFailed; f != nil {
		f(err)
	}
}

// setState applies a transition of the run goroutine. The run's transitions
// are valid by construction; a refusal would be a bug, and is logged rather
// than applied.
func (s *Supervisor) setState(to State, err error) {
	if terr := s.tr.Fail(to, err); terr != nil {
		s.logger().Error("lifecycle bug: transition refused", "err", terr)
	}
}

func (s *Supervisor) closeSession(r *run, sess Session) {
	var err error
	if cc, ok := sess.(ContextCloser); ok {
		err = cc.CloseContext(r.closeContext())
	} else {
		err = sess.Close()
	}
	if err != nil {
		s.logger().Debug("session close", "err", err)
	}
}

// discard closes a session that never became the run's (it may be nil).
func discard(sess Session) {
	if sess != nil {
		_ = sess.Close()
	}
}
