package fleet

import (
	"context"
	"errors"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// instance is one process slot of a server: the shared one, or one per
// client session.
//
// Its state (st) has one mutator, update: every change is a function of
// the state, after which update re-derives what follows from it — the
// transition is checked against the table (phase.go), the drain waiters
// are let go, the idle timer is armed or stopped — and returns the
// effects (events, a list refresh, a dormant stop, a catch-up replay) that
// run once the lock is released (apply). No function is handed the lock.
// The run's supervisor is the one truth about the connection: the
// instance keeps no copy of it (live).
type instance struct {
	srv *Server
	key string // client session for per-session servers, identityPrefix + identity key for per-identity ones, else ""
	// id tells this instance's stderr lines from those of the server's
	// other instances (logbuf.Entry.Origin): a restart's new shared
	// instance has the key of the old one that drains beside it.
	id uint64
	// cfg is the configuration the instance was made under: each run's
	// connector is built from it.
	cfg *config.Server

	tools catalog.LiveTools // a pinned server's: what its process lists, for CheckTool

	mu sync.Mutex // guards st, which only update changes
	st instState
}

// instState is an instance's mutable state: read under instance.mu,
// changed only by the change functions update runs.
type instState struct {
	phase phase
	// waking: the start in progress began from dormant.
	waking bool
	// The client sessions that used the current connection: the first,
	// and whether another has since. Reset with each new connection.
	manyUsers bool
	// legacy: a connection of the instance answered as a legacy server
	// (initialize): a later run's connector is told so (eraHint), as the
	// connector of one run remembers it from connect to connect.
	legacy    bool
	inflight  int32
	firstUser string
	// sup drives the instance's run, its connector with it: made by a
	// start (run), dropped once a sleep stopped it — a server put to sleep
	// keeps neither —; nil before the first start too. A start that
	// failed keeps its run, which the next start uses; so does a sleep
	// whose stop was cut short.
	sup *lifecycle.Supervisor
	// tree is the run's latest process as it connected (nil for a remote
	// server): what its exit event (pid) and count say once the
	// supervisor has let go of the connection.
	tree         endedTree
	startedAt    time.Time
	lastActivity time.Time
	own          int32         // of inflight, mcpvisor's own leases (Peek): a list refresh, a relayed notification
	holding      int32         // leases given on a connection and not released: the calls a drain waits for
	drained      chan struct{} // set by a waiter (retire, Sleep) while leases are held; closed when the last is released
	sleepDone    chan struct{} // closed when a dormant stop completes
	dormantAt    int64         // Unix ns when it last went dormant; 0: never
	timer        *time.Timer
	starting     chan struct{} // closed when the start in progress ends
	restartAt    int64         // Unix ns when the supervisor's restart under way spawns (after its delay); 0: none
	startErr     error
	lastErr      error
	// attempt is 1 + where the server's kept stderr stood when the
	// supervisor's restart attempt under way began (0: none), so that a
	// failed attempt is kept in the history with its own lines.
	attempt  uint64
	requests int64  // leases taken, ever
	closes   uint32 // close calls, ever (wrapping): a start that a close raced is not kept
	restarts int32  // the restarts of the run a dormancy ended (status)
	spawns   int32  // processes started, ever
	// refreshAfter counts the requests still in flight that were begun
	// before the start that owes a list refresh succeeded — those numbered
	// up to refreshUpTo (begin), the requests that waited for it — and
	// the refresh is asked for when the last of them ends (end), answered
	// or left: each ends, bounded by its own context. 0: none owed.
	refreshAfter int32
	refreshUpTo  int64
	replayed     uint64 // the server's interest generation last replayed
}

// pid is the process id of the run's latest process (tree), or 0.
func (st *instState) pid() int {
	if st.tree == nil {
		return 0
	}
	return st.tree.Pid()
}

// effects is what a change of an instance's state leaves to do once the
// lock is released, in this order: a dormant stop is begun, events are
// emitted, the catch-up replay and the lists' refresh are asked for.
type effects struct {
	rearm   bool // (set by a change) re-arm the idle timer if it applies
	sleep   *dormantStop
	events  []Event
	catchUp bool
	refresh bool
}

func (fx *effects) emit(e Event) { fx.events = append(fx.events, e) }

// update runs change on the instance's state under its lock, re-derives
// what follows from the new state, and returns the effects change asked
// for, to apply once the lock is released. change must not block, nor
// call into anything that takes the instance's lock. (change returns its
// effects by value: a pointer handed to a function value would move them
// to the heap at every call, two per lease.)
func (in *instance) update(change func(st *instState) effects) effects {
	in.mu.Lock()
	st := &in.st
	was, inflight, spawns := st.phase, st.inflight, st.spawns
	fx := change(st)
	if st.phase != was && !canMove(was, st.phase) {
		transitionRefused(in, was, st.phase)
	}
	if st.holding == 0 && st.drained != nil {
		close(st.drained) // a drain waits for no lease any more
		st.drained = nil
	}
	switch {
	case st.phase != phaseRunning:
		// Only a running instance sleeps when idle: a dormant one keeps no
		// timer (the next start arms a new one; a check that fires
		// meanwhile finds it not running).
		if st.timer != nil && was == phaseRunning {
			st.timer.Stop()
		}
		if st.phase == phaseDormant {
			st.timer = nil
		}
	case st.inflight == 0 && (inflight != 0 || was != phaseRunning || spawns != st.spawns || fx.rearm):
		// Idle from now: the last request ended, it began running, a new
		// process connected, or what kept it awake went away.
		in.armLocked(time.Now())
	}
	in.mu.Unlock()
	return fx
}

// do is update, then apply.
func (in *instance) do(change func(st *instState) effects) { in.apply(in.update(change)) }

// apply runs the effects of a change, without the instance's lock.
func (in *instance) apply(fx effects) {
	if fx.sleep != nil {
		go in.stopDormant(fx.sleep)
	}
	for _, e := range fx.events {
		in.srv.f.emit(e)
	}
	if fx.catchUp {
		in.srv.f.spawn(in.catchUp)
	}
	if fx.refresh {
		in.srv.requestRefresh(allKinds...)
	}
}

// view reads the instance's state under its lock.
func (in *instance) view(read func(st *instState)) {
	in.mu.Lock()
	read(&in.st)
	in.mu.Unlock()
}

// transitionRefused is called when a change moved an instance to a state
// the table does not allow (a bug): tests make it fail.
var transitionRefused = func(in *instance, from, to phase) {
	in.srv.f.log.Error("fleet bug: instance state transition not in the table", slog.String("server", in.srv.Name()), slog.String("from", from.String()), slog.String("to", to.String()))
}

// liveLocked is the run's connection while it serves — the supervisor's
// session, ready —, else nil; mu is held.
func (in *instance) liveLocked() Live {
	if in.st.sup == nil {
		return nil
	}
	l, _ := in.st.sup.Session().(Live)
	return l
}

// servingLocked is the connection a lease may be given on: the instance
// runs, and its run's connection is alive and ready; else nil. mu is held.
func (in *instance) servingLocked() Live {
	if in.st.phase != phaseRunning {
		return nil
	}
	if l := in.liveLocked(); l != nil && l.Alive() && in.st.sup.IsReady() {
		return l
	}
	return nil
}

// used records that session took a lease on connection l.
func (in *instance) used(l Live, session string) {
	if session == "" {
		return // mcpvisor's own use (learning lists): no client's
	}
	in.do(func(st *instState) (_ effects) { in.usedLocked(st, l, session); return })
}

// usedLocked is used, within a change.
func (in *instance) usedLocked(st *instState, l Live, session string) {
	if session == "" || in.liveLocked() != l {
		return
	}
	switch st.firstUser {
	case "":
		st.firstUser = session
	case session:
	default:
		st.manyUsers = true
	}
}

// sole is the only client session that used connection l, or "".
func (in *instance) sole(l Live) (who string) {
	in.view(func(st *instState) {
		if in.liveLocked() == l && !st.manyUsers {
			who = st.firstUser
		}
	})
	return who
}

// instHooks hands what the instance's server sends on its own to the
// fleet's Hooks, counted as the instance's activity and tagged with its
// source.
type instHooks struct{ in *instance }

func (h instHooks) Notification(c *backend.Conn, m *rpc.Message) {
	h.in.touch()
	if m.Method == "notifications/tools/list_changed" {
		h.in.toolsChanged()
	}
	if h.in.key == "" {
		h.in.srv.listChanged(m.Method) // the cache follows the shared instance
	}
	if hk := h.in.srv.f.opts.Hooks; hk != nil {
		hk.Notification(h.in.source(c), m)
	}
}

func (h instHooks) Request(c *backend.Conn, m *rpc.Message) {
	h.in.touch()
	if hk := h.in.srv.f.opts.Hooks; hk != nil {
		hk.Request(h.in.source(c), m)
		return
	}
	go func() {
		_ = c.ReplyError(m.ID, rpc.MethodNotFound, "mcpvisor has no client to forward "+m.Method+" to")
	}()
}

// source is the Source of what the instance's connection c sends.
func (in *instance) source(c *backend.Conn) Source {
	src := Source{Server: in.srv, Session: in.key, Conn: c, Sole: in.sole(c)}
	if k, ok := identityOfKey(in.key); ok {
		src.Identity = k
	}
	return src
}

func (s *Server) newInstance(key string) *instance {
	cfg := s.Config()
	if s.f.opts.Logs != nil && cfg.Kind == config.KindStdio {
		// Its stderr lines are kept from the start (the connector of
		// each run writes to the buffer): one can follow them before it
		// ever runs.
		s.f.opts.Logs.Get(cfg.Name)
	}
	return &instance{srv: s, key: key, id: s.f.instances.Add(1), cfg: cfg}
}

// runLocked returns the supervisor of the instance's run, made with its
// connector if there is none (the first start, or a start from dormant);
// called within a change.
func (in *instance) runLocked(st *instState) *lifecycle.Supervisor {
	if st.sup != nil {
		return st.sup
	}
	s := in.srv
	conn := s.f.opts.Connector(in.cfg, instHooks{in}, in.connected)
	// The era the server had when it last ran: a known legacy server is
	// not probed.
	if c, ok := conn.(interface{ SetEraHint(func() string) }); ok {
		c.SetEraHint(in.eraHint)
	}
	st.sup = lifecycle.New(s.Name(), conn, in.policyLocked(st, s.Config()))
	return st.sup
}

// eraHint is the protocol version the server spoke when it last ran: a
// legacy one if a connection of this instance answered so, else the one
// kept with its lists under its launch hash ("" if none).
func (in *instance) eraHint() string {
	var legacy bool
	in.view(func(st *instState) { legacy = st.legacy })
	if legacy {
		return backend.ProtocolVersion
	}
	return in.srv.cachedVersion()
}

// runStateLocked is the state of the instance's run (Stopped, with the
// restarts of the run a dormancy ended, when it has none); mu is held.
func (in *instance) runStateLocked() lifecycle.StateInfo {
	if in.st.sup == nil {
		return lifecycle.StateInfo{Restarts: int(in.st.restarts), Failures: in.srv.failures()}
	}
	return in.st.sup.State()
}

// policy is the lifecycle policy of the instance under cfg, its callbacks
// included (Supervisor.SetPolicy takes it whole when a reload changes the
// server's settings).
func (in *instance) policy(cfg *config.Server) lifecycle.Policy {
	pol := cfg.Policy()
	pol.Logger = in.srv.f.log // lifecycle tags its records with the server name itself
	// The server's crash loop, whichever of its instances fails: a
	// per-session server's new instances start in it.
	pol.Streak = in.srv.streakOf()
	// Method values: one small closure each, per dormant server too.
	pol.OnDisconnect = in.disconnected
	pol.OnRestarting = in.restarting
	pol.OnRestart = in.restarted
	pol.OnFailed = in.failed
	return pol
}

// policyLocked is policy, with no restart for a retired instance: nothing
// would use it. Called within a change.
func (in *instance) policyLocked(st *instState, cfg *config.Server) lifecycle.Policy {
	pol := in.policy(cfg)
	if st.phase == phaseRetired {
		pol.Restart = lifecycle.RestartNever
	}
	return pol
}

// setPolicyLocked makes the run's supervisor follow cfg's restart policy
// and connect timeout; called within a change, so that a retired
// instance — whenever the settings come — is never restarted by its
// policy.
func (in *instance) setPolicyLocked(st *instState, cfg *config.Server) {
	if st.sup != nil {
		st.sup.SetPolicy(in.policyLocked(st, cfg))
	}
}

// applySettings makes the instance follow cfg's settings: the restart
// policy and connect timeout of its supervisor, and its idle timer.
func (in *instance) applySettings(cfg *config.Server) {
	in.do(func(st *instState) (fx effects) {
		in.setPolicyLocked(st, cfg)
		fx.rearm = true
		return
	})
}

// restarting is the supervisor's OnRestarting: the attempt under way, if
// any, failed with cause; the next begins.
func (in *instance) restarting(attempt int, delay time.Duration, cause error) {
	s := in.srv
	in.attemptFailed(cause)
	mark := 1 + s.stderrMark()
	d := event.RestartingDetails{Attempt: attempt, DelayMs: delay.Milliseconds()}
	if cause != nil {
		d.Error = s.Config().RedactText(cause.Error())
	}
	in.do(func(st *instState) (fx effects) {
		st.attempt = mark
		st.restartAt = time.Now().Add(delay).UnixNano()
		fx.emit(NewEvent(s.Name(), in.key, d))
		return
	})
}

// restarted is the supervisor's OnRestart.
func (in *instance) restarted() {
	s := in.srv
	var at int64
	fx := in.update(func(st *instState) (fx effects) {
		st.attempt = 0
		at, st.restartAt = st.restartAt, 0
		fx.catchUp = true
		fx.emit(NewEvent(s.Name(), in.key, event.RestartedDetails{PID: st.pid()}))
		fx.refresh = in.key == ""
		return
	})
	if at != 0 {
		s.Telemetry().ObserveSpawn(time.Since(time.Unix(0, at))) // counted before the event says so
	}
	in.apply(fx)
}

// failed is the supervisor's OnFailed.
func (in *instance) failed(err error) {
	s := in.srv
	in.attemptFailed(err)
	in.do(func(st *instState) (fx effects) {
		st.lastErr = err
		fx.emit(NewEvent(s.Name(), in.key, event.FailedDetails{Error: s.Config().RedactText(err.Error())}))
		return
	})
}

// attemptFailed keeps in the history the restart attempt under way, if
// one is, as failed with err: the supervisor reports an attempt's failure
// only as the cause of the next attempt, or in its final failure.
func (in *instance) attemptFailed(err error) {
	var at uint64
	in.do(func(st *instState) (_ effects) { at, st.attempt = st.attempt, 0; return })
	if at != 0 && err != nil {
		se := in.startFailure(err, at-1) // records the exit: outside the lock
		in.do(func(st *instState) (_ effects) { st.lastErr = se; return })
	}
}

// loopErrorLocked tells the supervisor's crash loop error err (a
// *lifecycle.CrashLoopError) with the last failure as the fleet recorded
// it; mu is held.
func (in *instance) loopErrorLocked(err error) error {
	var cl *lifecycle.CrashLoopError
	if !errors.As(err, &cl) {
		return err
	}
	var se *StartError
	var ee *backend.ExitError
	cfg := in.srv.Config()
	last := in.st.lastErr
	switch {
	case errors.As(last, &se):
	case errors.As(last, &ee):
		// A process that served, and ended before it answered a client
		// (disconnected recorded how).
		se = &StartError{Server: cfg.Name, Stage: StageServing, Err: last, reason: exitReason(ee.Status, "while it served")}
		if ee.Stderr != "" {
			for _, l := range strings.Split(ee.Stderr, "\n") {
				se.Stderr = append(se.Stderr, cfg.RedactText(l))
			}
		}
	default:
		// Not recorded yet (the supervisor records a failed attempt as
		// the cause of the next): told from the supervisor's error.
		se = &StartError{Server: cfg.Name, Stage: StageHandshake, Err: cl.Last, reason: cfg.RedactText(startReason(cfg.Name, cl.Last, cfg.InitTimeout))}
	}
	return &LoopError{CrashLoopError: cl, Last: se, in: time.Until(cl.Next)}
}

// LoopError is the error a request gets while its server is in a crash
// loop: lifecycle's *CrashLoopError (failed starts in a row, when the next
// attempt is due), told with the last failure as a *StartError, in one
// sentence that names the server once: "server NAME is in a crash loop: 3
// starts in a row failed; next attempt at 15:04:05 (in 1.5s); the last
// exited during its handshake (exit code 3); stderr: …".
type LoopError struct {
	*lifecycle.CrashLoopError
	Last *StartError
	in   time.Duration // until the next attempt, when the error was made
}

func (e *LoopError) Error() string {
	return fmt.Sprintf("server %s is in a crash loop: %d starts in a row failed; next attempt at %s (in %v); the last %s",
		e.Last.Server, e.Failures, e.Next.Format("15:04:05.000"), e.in.Round(time.Millisecond), e.Last.cause())
}

func (e *LoopError) Unwrap() []error { return []error{e.CrashLoopError, e.Last} }

// connected runs for every new connection, first start and restarts
// alike, before the connection serves: it replays what the instance's
// sessions asked of the server (subscriptions, log level).
func (in *instance) connected(ctx context.Context, l Live) {
	legacy := false
	if c, ok := l.(Conn); ok {
		in.replayTo(ctx, c)
		if init := c.Init(); init != nil && init.ProtocolVersion != backend.ModernVersion {
			legacy = true
		}
	}
	tree := treeOf(l)
	in.do(func(st *instState) (_ effects) {
		st.legacy = st.legacy || legacy
		st.tree = tree
		st.firstUser, st.manyUsers = "", false
		now := time.Now()
		st.startedAt, st.lastActivity = now, now
		st.spawns++ // (update arms the idle timer of a running instance)
		return
	})
}

// disconnected is the supervisor's OnDisconnect: the run's connection
// ended (the supervisor no longer hands it out).
func (in *instance) disconnected(err error) {
	var pid int
	var tree endedTree
	var stopping bool
	in.do(func(st *instState) (_ effects) {
		pid, tree = st.pid(), st.tree
		st.tree = nil
		st.attempt = 0 // the restart that follows is caused by this end
		if err != nil {
			st.lastErr = err
		}
		stopping = st.phase.stopping()
		return
	})
	if tree != nil {
		in.srv.countTree(tree)
	}
	if err == nil || stopping {
		return
	}
	e := in.servingExit(err, pid)
	d := event.ExitedDetails{Error: e.Error, Stage: e.Stage, PID: pid, Code: e.Code, Signal: e.Signal,
		ExitKind: e.Kind, OOMKills: e.OOMKills, PIDsLimitHits: e.PIDsLimitHits, Stderr: e.Stderr}
	if l := in.srv.Config().Limits; e.OOMKills > 0 && l != nil {
		d.MemoryLimitBytes = l.Memory
	}
	var ee *backend.ExitError
	if errors.As(err, &ee) {
		d.StopStep = ee.Status.Stage
	}
	in.srv.f.emit(NewEvent(in.srv.Name(), in.key, d))
}

// root is the process tree of the instance's live connection, if it has
// a local one.
func (in *instance) root() (r proc.Root, ok bool) {
	in.view(func(*instState) { r, ok = rootOf(in.liveLocked()) })
	return r, ok
}

func pidOf(l Live) int {
	if c, ok := l.(*backend.Conn); ok && c != nil && c.Process() != nil {
		return c.Process().Pid()
	}
	return 0
}

// treeOf is the process tree of a connection, to count its end, or nil.
func treeOf(l Live) endedTree {
	if c, ok := l.(*backend.Conn); ok && c != nil && c.Process() != nil {
		return c.Process()
	}
	return nil
}

// begin counts a request Acquire serves as in flight, and returns its
// number among the instance's requests (for end).
func (in *instance) begin() (seq int64) {
	in.do(func(st *instState) (_ effects) {
		st.requests++
		seq = st.requests
		st.inflight++
		st.lastActivity = time.Now()
		return
	})
	return seq
}

// end ends a request begin counted that got no lease: seq is the
// request's number (begin).
func (in *instance) end(seq int64) {
	in.do(func(st *instState) (fx effects) { endLocked(st, &fx, seq); return })
}

// endLocked ends a request or a lease, within a change: seq is the
// request's number (begin), 0 for one that cannot have waited for a start
// (a lease on the running connection, mcpvisor's own). The last request
// that waited for a start owing a list refresh asks for it.
func endLocked(st *instState, fx *effects, seq int64) {
	st.inflight--
	st.lastActivity = time.Now()
	if st.refreshAfter > 0 && seq > 0 && seq <= st.refreshUpTo {
		st.refreshAfter--
		fx.refresh = st.refreshAfter == 0
	}
}

func (in *instance) touch() {
	in.do(func(st *instState) (_ effects) { st.lastActivity = time.Now(); return })
}

// leaseRunning counts a lease on the running connection — a request when
// request is set — and returns it, all in one change; when the instance is
// not running it counts nothing and returns nil.
func (in *instance) leaseRunning(session string, request bool) (l Live) {
	in.do(func(st *instState) (_ effects) {
		if l = in.servingLocked(); l == nil {
			return
		}
		st.inflight++
		st.holding++
		if request {
			st.requests++
		} else {
			st.own++
		}
		st.lastActivity = time.Now()
		in.usedLocked(st, l, session)
		return
	})
	return l
}

// release ends a lease leaseRunning or acquire gave: the call it held is
// over (a drain waiting for the last one is told), and the request no
// longer counts as in flight.
func (in *instance) release(own bool, seq int64) {
	in.do(func(st *instState) (fx effects) {
		if own {
			st.own--
		}
		st.holding--
		endLocked(st, &fx, seq)
		return
	})
}

func (in *instance) isRetired() (retired bool) {
	in.view(func(st *instState) { retired = st.phase == phaseRetired })
	return retired
}

// retire takes the instance out of service for good, at once: no lease is
// given on it any more (acquire returns errRetired, and its caller asks the
// server for the instance now in service), a start in progress is not kept
// (as for a close), and its idle timer stops; the calls it holds go on.
// The channel returned is closed once they are all released. Its process,
// should it exit meanwhile, is not started again by the restart policy:
// nothing would use it.
func (in *instance) retire() (drained <-chan struct{}) {
	in.do(func(st *instState) (_ effects) {
		st.phase = phaseRetired
		in.setPolicyLocked(st, in.srv.Config())
		st.closes++ // a start in progress is stopped, not kept
		drained = drainedLocked(st)
		return
	})
	return drained
}

// drainedLocked returns a channel closed once every lease given on the
// instance is released: at once when none is held, else the one channel
// all such waiters share (update closes it). Called within a change.
func drainedLocked(st *instState) <-chan struct{} {
	if st.holding == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if st.drained == nil {
		st.drained = make(chan struct{})
	}
	return st.drained
}

// live is the run's connection while the supervisor hands it out
// (liveLocked), whatever the instance's state: a draining instance's too.
func (in *instance) live() (l Live) {
	in.view(func(*instState) { l = in.liveLocked() })
	return l
}

// current is the connection a lease may be given on, or nil.
func (in *instance) current() (l Live) {
	in.view(func(*instState) { l = in.servingLocked() })
	return l
}

// armLocked (re)arms the idle timer for the next moment the instance could
// be due to sleep: idle for its idle timeout, or, with maxIdleMemory, its
// next memory check (memoryCheckEvery). mu is held (update).
func (in *instance) armLocked(now time.Time) {
	cfg := in.srv.Config()
	maxIdle := maxIdleMemory(cfg)
	if cfg.IdleTimeout <= 0 && maxIdle == 0 {
		return
	}
	var next time.Time
	if cfg.IdleTimeout > 0 {
		_, next = idleDecision(activity{now: now, lastActivity: in.st.lastActivity, startedAt: in.st.startedAt, ready: true}, cfg.IdleTimeout, cfg.StartGrace)
		if next.IsZero() {
			next = now // due now: the check decides
		}
	}
	if check := nextMemoryCheck(in.st.lastActivity, now); maxIdle > 0 && (next.IsZero() || check.Before(next)) {
		next = check
	}
	in.armAfterLocked(next.Sub(now))
}

// nextMemoryCheck is when the memory of an instance last active at
// lastActivity (a request's begin or end, a connect) is next looked at,
// after now: every memoryCheckEvery from that activity, so that a server
// in use is not checked between close requests, and a re-arm with no
// activity (a session's end, a reload) never puts the check off; from now
// when no activity is recorded.
func nextMemoryCheck(lastActivity, now time.Time) time.Time {
	if lastActivity.IsZero() || now.Before(lastActivity) {
		return now.Add(memoryCheckEvery)
	}
	n := now.Sub(lastActivity)/memoryCheckEvery + 1
	return lastActivity.Add(n * memoryCheckEvery)
}

// armAfterLocked arms the idle timer to fire after d, making it if there
// is none (dropped at a dormancy, or never armed); mu is held.
func (in *instance) armAfterLocked(d time.Duration) {
	if in.st.timer == nil {
		in.st.timer = time.AfterFunc(d, in.idleCheck)
	} else {
		in.st.timer.Reset(d)
	}
}

// idle is what the idle timer's first look decides.
type idle uint8

const (
	idleNothing idle = iota // not running, or busy: the end of a request re-arms
	idleSleep               // put to sleep (begun)
	idleMeasure             // idle, maxIdleMemory set: measure the tree, then look again
	idleLater               // re-armed
)

// idleCheck runs when the idle timer fires: it puts the instance to sleep
// if it is due — idle for its idle timeout, or, with maxIdleMemory, idle
// (nothing in flight, past its spawn grace period) with its tree above
// that memory — and re-arms the timer otherwise.
func (in *instance) idleCheck() {
	cfg := in.srv.Config()
	maxIdle := maxIdleMemory(cfg)
	if cfg.IdleTimeout <= 0 && maxIdle == 0 {
		return // a reload turned sleeping off: nothing to look at again
	}
	if in.srv.pinned(in.key) {
		// A subscriber waits for updates only a running server can send;
		// the unsubscribe (a request) re-arms the timer.
		return
	}
	now := time.Now()
	var next time.Time
	var conn Live
	var requests int64
	decided := idleNothing
	in.do(func(st *instState) (fx effects) {
		if st.phase != phaseRunning || st.starting != nil {
			// Not running, or starting again after its run gave up: the
			// start's outcome re-arms the timer (startedLocked).
			return
		}
		live := in.liveLocked()
		a := activity{now: now, lastActivity: st.lastActivity, startedAt: st.startedAt, inflight: int(st.inflight),
			ready: live != nil && live.Alive() && in.runStateLocked().State == lifecycle.StateReady}
		var sleep bool
		if cfg.IdleTimeout > 0 {
			sleep, next = idleDecision(a, cfg.IdleTimeout, cfg.StartGrace)
		}
		switch {
		case sleep:
			in.sleepLocked(st, &fx, now, "", nil)
			decided = idleSleep
		case maxIdle > 0 && a.ready && a.inflight == 0 && !now.Before(a.startedAt.Add(cfg.StartGrace)):
			conn, requests, decided = live, st.requests, idleMeasure
		case st.inflight == 0:
			in.armAfterLocked(in.idleWait(cfg, maxIdle, now, next))
			decided = idleLater
		}
		return
	})
	if decided != idleMeasure {
		return
	}
	// Measured without the lock (it reads /proc or cgroup files); slept
	// only if nothing began meanwhile.
	mem, measured := in.treeMemory(conn)
	pinned := in.srv.pinned(in.key) // takes the interest's lock: not under in.mu
	in.do(func(st *instState) (fx effects) {
		if st.phase != phaseRunning || st.starting != nil {
			return
		}
		if measured && mem > maxIdle && !pinned && in.liveLocked() == conn && st.inflight == 0 && st.requests == requests {
			in.sleepLocked(st, &fx, now, "", &event.DormantDetails{Reason: "maxIdleMemory", MemoryBytes: mem, MaxIdleMemoryBytes: maxIdle})
			return
		}
		if st.inflight == 0 {
			in.armAfterLocked(in.idleWait(cfg, maxIdle, now, next))
		} // else the end of the last request re-arms the timer
		return
	})
}

// idleWait is how long the idle timer waits before it looks again, when
// it found the instance not due: until next, the idle decision's moment
// (zero: starting or restarting, or idle timeout off — the idle timeout),
// and at most memoryCheckEvery with maxIdleMemory.
func (in *instance) idleWait(cfg *config.Server, maxIdle uint64, now, next time.Time) time.Duration {
	wait := cfg.IdleTimeout
	if !next.IsZero() {
		wait = next.Sub(now)
	}
	if maxIdle > 0 && (wait <= 0 || memoryCheckEvery < wait) {
		wait = memoryCheckEvery
	}
	return wait
}

// dormantStop is a dormant stop sleepLocked began: stopDormant runs it.
type dormantStop struct {
	cfg     *config.Server
	sup     *lifecycle.Supervisor
	done    chan struct{}
	details event.DormantDetails
}

// sleepLocked begins a dormant stop, within a change: the instance is
// Sleeping from now, and the stop runs once the lock is released
// (fx.sleep). It returns the channel closed when the stop is done. by, if
// set, names who asked for the sleep in the dormant event ("operator");
// idleness asks for none. why, if set, adds to the event's details why it
// sleeps early (maxIdleMemory).
func (in *instance) sleepLocked(st *instState, fx *effects, now time.Time, by string, why *event.DormantDetails) <-chan struct{} {
	st.phase = phaseSleeping
	done := make(chan struct{})
	st.sleepDone = done
	var d event.DormantDetails
	if why != nil {
		d = *why
	}
	d.PID, d.IdleSeconds, d.LastActivity, d.By = pidOf(in.liveLocked()), now.Sub(st.lastActivity).Seconds(), st.lastActivity, by
	fx.sleep = &dormantStop{cfg: in.srv.Config(), sup: st.sup, done: done, details: d}
	return done
}

// stopDormant runs a dormant stop sleepLocked began: it stops the run,
// then makes the instance Dormant — unless something else (a close, a
// retire) decided its state meanwhile —, drops the run, and reports it.
func (in *instance) stopDormant(job *dormantStop) {
	var err error
	restarts := 0
	sup := job.sup
	if sup != nil { // (a running instance has its run; nothing to stop otherwise)
		restarts = sup.State().Restarts // (Stop forgets them)
		ctx, cancel := context.WithTimeout(context.Background(), stopBound(job.cfg.StdinWait, job.cfg.TermWait))
		err = sup.Stop(ctx)
		cancel()
	}
	dormant := false
	in.do(func(st *instState) (_ effects) {
		if st.phase == phaseSleeping {
			dormant = true
			st.phase = phaseDormant
			// Nor its run: the next start makes one, with a connector.
			// (A stop cut short by ctx keeps it: Stop finishes in the
			// background, and a start waits for it. So does a start under
			// way, which holds it: it ends as stopped.)
			if err == nil && st.sup == sup && sup != nil && st.starting == nil {
				st.restarts = int32(restarts)
				st.sup = nil
			}
		}
		st.dormantAt = time.Now().UnixNano()
		st.sleepDone = nil
		return
	})
	if dormant && in.key == "" && in.isDormant() {
		in.srv.spill() // (a wake right after only makes its lists read from disk until the wake's relearn)
	}
	if dormant {
		in.srv.releaseIdentity(in) // an identity's instance idle that long ends
	}
	close(job.done)
	if err != nil {
		job.details.Error = err.Error()
	}
	in.srv.f.emit(NewEvent(in.srv.Name(), in.key, job.details))
}

// isDormant reports whether the instance is dormant now.
func (in *instance) isDormant() (dormant bool) {
	in.view(func(st *instState) { dormant = st.phase == phaseDormant })
	return dormant
}

// rest puts the instance to sleep now if it runs, no client request is in
// flight, no request began since the count requests was read and no
// subscription pins it awake (as for the idle timer, the unsubscribe
// re-arms that); it waits, within ctx, for mcpvisor's own leases to be
// released first, and looks again.
func (in *instance) rest(ctx context.Context, requests int64) bool {
	for {
		if in.srv.pinned(in.key) {
			return false
		}
		var quiet <-chan struct{}
		slept := false
		in.do(func(st *instState) (fx effects) {
			if st.phase != phaseRunning || st.inflight > st.own || st.requests != requests || in.liveLocked() == nil || st.starting != nil {
				return
			}
			if st.own > 0 {
				quiet = drainedLocked(st)
				return
			}
			in.sleepLocked(st, &fx, time.Now(), "", nil)
			slept = true
			return
		})
		if quiet == nil {
			return slept
		}
		select {
		case <-quiet:
		case <-ctx.Done():
			return false
		}
	}
}

// stopBound is how long a dormant stop may take before it gives up waiting
// (the process layer has killed the tree by then).
func stopBound(stdin, term time.Duration) time.Duration {
	return stdin + term + 10*time.Second
}

// acquire returns a live connection, starting the instance if needed;
// woke reports that the caller waited for a start from dormant.
func (in *instance) acquire(ctx context.Context) (l Live, woke bool, err error) {
	l, woke, err = in.acquire1(ctx)
	return l, woke && err == nil, err
}

// wait is what acquire's look at the instance decides.
type wait struct {
	lease   Live            // leased: done
	err     error           // refused: done
	ch      <-chan struct{} // wait for it, then look again
	what    string          // what ch is: "starting" or "going dormant"
	gone    Live            // a dead connection: wait until the supervisor let it go
	changed <-chan struct{} // the supervisor's next change (restarting)
	info    lifecycle.StateInfo
	start   chan struct{} // this caller began a start: wait for its outcome
}

func (in *instance) acquire1(ctx context.Context) (Live, bool, error) {
	name := in.srv.Name()
	woke := false
	for {
		var w wait
		in.do(func(st *instState) (_ effects) { w = in.lookLocked(ctx, st, &woke); return })
		switch {
		case w.lease != nil:
			return w.lease, woke, nil
		case w.err != nil:
			return nil, woke, w.err
		case w.gone != nil:
			// The process just went away: wait for the supervisor to see
			// it (the tree is being reaped) and to restart it.
			if err := waitFor(ctx, w.gone.Done(), name, "restarting"); err != nil {
				return nil, woke, err
			}
			if err := in.waitGone(ctx, w.gone); err != nil {
				return nil, woke, err
			}
		case w.changed != nil:
			select {
			case <-w.changed:
			case <-ctx.Done():
				return nil, woke, restartingError(name, w.info, ctx.Err())
			}
		case w.start != nil:
			if h := in.srv.f.seams.afterStartBegun; h != nil {
				h(w.start)
			}
			// Its own start's outcome, even if it has ended already (and
			// st.starting with it): never a second start for one request.
			if err := in.awaitStart(ctx, w.start); err != nil {
				return nil, woke, err
			}
		case w.what == "starting":
			if err := in.awaitStart(ctx, w.ch); err != nil {
				return nil, woke, err
			}
		default:
			if err := waitFor(ctx, w.ch, name, w.what); err != nil {
				return nil, woke, err
			}
		}
	}
}

// lookLocked is one look of acquire at the instance, within a change: it
// leases the serving connection, refuses, says what to wait for, or
// begins a start.
func (in *instance) lookLocked(ctx context.Context, st *instState, woke *bool) wait {
	name := in.srv.Name()
	switch st.phase {
	case phaseClosed:
		return wait{err: fmt.Errorf("server %s: the client session has ended", name)}
	case phaseRetired:
		return wait{err: errRetired}
	case phaseSleeping:
		return wait{ch: st.sleepDone, what: "going dormant"}
	}
	if l := in.servingLocked(); l != nil {
		st.holding++ // released by release
		return wait{lease: l}
	}
	live := in.liveLocked()
	if st.phase == phaseRunning && live != nil && !live.Alive() {
		return wait{gone: live}
	}
	var changed <-chan struct{}
	if st.starting == nil {
		// A crash loop answers at once: a request never waits out a
		// backoff (the supervisor's unattended restart, or the earliest a
		// start may try again) — nor does one that would begin an instance
		// of a server in a crash loop (a per-session server's, say: its
		// instances share the server's record).
		var err error
		if st.sup != nil {
			// Taken before what it says is read: a failure recorded after
			// wakes the wait below, which then finds the loop.
			changed = st.sup.Changed()
			err = st.sup.CrashLoop()
		} else {
			err = in.srv.crashLoop()
		}
		if err != nil {
			return wait{err: in.loopErrorLocked(err)}
		}
	}
	if st.phase == phaseRunning && st.starting == nil && st.sup != nil {
		// Restarting by its policy — at once after a run that answered, or
		// after a single failure: wait for the next change of the
		// supervisor's state. (Given up — Failed or Stopped — a request
		// starts it again below.)
		info := st.sup.State()
		// Between the end of a session and the supervisor's move to
		// Restarting the supervisor hands out no session while its state
		// still says Ready: that is the start of a restart too.
		gone := live == nil && (info.State == lifecycle.StateReady || info.State == lifecycle.StateDegraded)
		if info.State == lifecycle.StateRestarting || gone {
			return wait{changed: changed, info: info}
		}
	}
	if ch := st.starting; ch != nil {
		*woke = *woke || st.waking
		return wait{ch: ch, what: "starting"}
	}
	if err := ctx.Err(); err != nil {
		return wait{err: fmt.Errorf("server %s: %w", name, err)} // nobody left to start it for
	}
	if in.srv.f.closed.Load() {
		return wait{err: fmt.Errorf("server %s: %w", name, ErrFleetClosed)}
	}
	// The start runs on its own; this caller waits for it like every
	// other, within its own context.
	ch := make(chan struct{})
	st.starting = ch
	st.waking = st.phase == phaseDormant
	*woke = *woke || st.waking
	go in.start(ch, st.phase, st.closes, time.Duration(time.Now().UnixNano()-st.dormantAt))
	return wait{start: ch}
}

// awaitStart waits for the start that closes ch to end, within ctx, and
// returns its error (errRetired if the instance was retired meanwhile).
func (in *instance) awaitStart(ctx context.Context, ch <-chan struct{}) error {
	if err := waitFor(ctx, ch, in.srv.Name(), "starting"); err != nil {
		return err
	}
	var err error
	in.view(func(st *instState) {
		if st.phase == phaseRetired {
			err = errRetired
		} else {
			err = st.startErr
		}
	})
	return err
}

// seams are points where a test holds or changes a start, one set per
// fleet (Fleet.seams): a test's seam reaches no other test's fleet. nil:
// none.
type seams struct {
	// afterStartBegun is called by acquire once it began a start, with
	// the channel the start closes when it ends.
	afterStartBegun func(chan struct{})
	// afterStartSignalled is called by a start once it let its waiters go.
	afterStartSignalled func()
	// beforeSupervisorStart is called by a start of one of s's instances
	// right before it asks the supervisor, after acquire's check of the
	// crash loop.
	beforeSupervisorStart func(s *Server)
}

// start starts the instance's supervisor for the requests waiting on ch,
// and closes ch when the outcome is recorded. was is the state it starts
// from; gen the count of closes when it was decided: a close since wins.
func (in *instance) start(ch chan struct{}, was phase, gen uint32, dormantFor time.Duration) {
	name := in.srv.Name()
	mark := in.srv.stderrMark()
	var sup *lifecycle.Supervisor
	in.do(func(st *instState) (_ effects) {
		st.attempt = 0 // this start's failure is kept below, not as an attempt
		sup = in.runLocked(st)
		return
	})
	if h := in.srv.f.seams.beforeSupervisorStart; h != nil {
		h(in.srv)
	}
	t0 := time.Now()
	err := sup.Start(context.Background())
	took := time.Since(t0)
	// What is cached may be older than this process: a shared instance
	// that woke, or started with lists cached, looks again (a relaunched
	// server's lists are learned again by relearn, whose lease alone lets
	// it sleep after). Decided here, outside the lock.
	look := err == nil && in.key == "" && (was == phaseDormant || in.srv.cat.Cached(catalog.Tools)) && !in.srv.cat.RelaunchPending()
	var se *StartError
	record := func() {}
	if err != nil && !errors.Is(err, lifecycle.ErrCrashLoop) {
		// Told outside the lock; recorded below unless a close raced the
		// start (a start a close interrupted is no failure).
		se, record = in.startError(err, mark)
	}

	raced, refused := false, false
	pid := 0
	fx := in.update(func(st *instState) (fx effects) {
		st.starting, st.waking = nil, false
		if st.closes != gen {
			// A close (a Stop, the end of the session, the fleet's Close)
			// raced the start, and wins whatever the start's outcome: what
			// started is stopped, not kept running for nobody, and a start
			// the close interrupted is no failure — it counts nothing
			// towards the respawn limit and reports no failed event.
			raced = true
			st.startErr = fmt.Errorf("server %s was stopped while it started", name)
			pid = st.pid()
			return
		}
		st.refreshAfter = 0
		switch {
		case errors.Is(err, lifecycle.ErrCrashLoop):
			// Refused at once, nothing started: no failure of its own, and
			// no spawn, wake or start either (the loop began after acquire
			// looked: another instance's failures, on the server's record).
			refused = true
			err = in.loopErrorLocked(err)
		case se != nil:
			err = se
			st.lastErr = err
			fx.emit(NewEvent(name, in.key, event.FailedDetails{Error: se.Error(), Stage: &se.Stage, Stderr: se.Stderr}))
		default:
			in.startedLocked(st, &fx, was, look, took, dormantFor)
		}
		st.startErr = err
		return
	})
	if raced {
		if err != nil {
			close(ch) // nothing runs: only the waiters are told
			return
		}
		in.stopStarted(ch, sup, pid)
		return
	}
	if se != nil {
		record() // before the waiters go on: a request the start failed finds it in the history
	}
	if se == nil && !refused {
		// Counted before the waiters go on: a request this start served,
		// or that woke the server, finds them counted.
		in.srv.Telemetry().ObserveSpawn(took)
		if was == phaseDormant {
			in.srv.Telemetry().ObserveWake(took)
		}
	}
	close(ch)
	if h := in.srv.f.seams.afterStartSignalled; h != nil {
		h()
	}
	in.apply(fx)
}

// startedLocked records a start that succeeded, within its change: the
// instance runs; look says its lists are to be looked at again, after the
// requests that waited for the start.
func (in *instance) startedLocked(st *instState, fx *effects, was phase, look bool, took, dormantFor time.Duration) {
	st.phase = phaseRunning
	fx.rearm = true // (from Running, after its run gave up: no move re-arms it)
	if look {
		// The requests that waited for this start go first: the refresh
		// would compete with them for the new process, which reads one
		// message at a time and runs on cold code.
		if n := st.inflight - st.own; n > 0 {
			// Those are the requests begun so far (numbered up to
			// st.requests): no lease on the running connection could be
			// taken before now.
			st.refreshAfter, st.refreshUpTo = n, st.requests
		} else {
			fx.refresh = true
		}
	}
	pid := pidOf(in.liveLocked())
	var d event.Details = event.StartedDetails{PID: pid, StartMs: took.Milliseconds()}
	if was == phaseDormant {
		d = event.RespawnedDetails{PID: pid, DormantSeconds: dormantFor.Seconds(), RespawnMs: float64(took.Microseconds()) / 1000}
	}
	fx.emit(NewEvent(in.srv.Name(), in.key, d))
	fx.catchUp = true
}

// stopStarted stops what a start that a close raced made with sup, tells
// the requests waiting on ch that it was stopped while it started, and
// reports it as stopped; pid is its process, as it connected.
func (in *instance) stopStarted(ch chan struct{}, sup *lifecycle.Supervisor, pid int) {
	cfg := in.srv.Config()
	sctx, cancel := context.WithTimeout(context.Background(), stopBound(cfg.StdinWait, cfg.TermWait))
	serr := sup.Stop(sctx)
	cancel()
	close(ch)
	d := event.StoppedDetails{PID: &pid, Reason: "stopped while it started"}
	if serr != nil {
		d.Error = serr.Error()
	}
	in.srv.f.emit(NewEvent(in.srv.Name(), in.key, d))
}

// waitGone waits until the supervisor has let go of a dead connection.
func (in *instance) waitGone(ctx context.Context, c Live) error {
	for {
		var changed <-chan struct{}
		same := false
		in.view(func(st *instState) {
			if st.sup == nil {
				return // the run is over
			}
			changed = st.sup.Changed()
			same = in.liveLocked() == c && st.sup.IsReady()
		})
		if !same {
			return nil
		}
		select {
		case <-ctx.Done():
			return &WaitError{Server: in.srv.Name(), For: "restarting", Err: ctx.Err()}
		case <-changed:
		}
	}
}

// WaitError is the error of a request whose context ended while it
// waited for its server: to start, to restart, or to go dormant (before it
// starts again).
type WaitError struct {
	Server string
	For    string // "starting", "restarting" or "going dormant"
	Why    string // for a restart, what ended the last run (no server name); "" if unknown
	Err    error  // the context's error
}

func (e *WaitError) Error() string {
	msg := "server " + e.Server + " is " + e.For
	if e.Why != "" {
		msg += " (" + e.Why + ")"
	}
	return msg + ": " + e.Err.Error()
}

func (e *WaitError) Unwrap() error { return e.Err }

// restartingError is what a request gets when its context ends while its
// server restarts: it names the restart and what caused it.
func restartingError(name string, info lifecycle.StateInfo, cause error) error {
	we := &WaitError{Server: name, For: "restarting", Err: cause}
	var ee *backend.ExitError
	switch {
	case errors.As(info.LastError, &ee):
		we.Why = "it " + exitReason(ee.Status, "while it served")
	case info.LastError != nil:
		we.Why = "after: " + bareText(name, info.LastError)
	}
	if info.Failures > 1 {
		we.Why += fmt.Sprintf("; %d failed starts in a row", info.Failures)
	}
	return we
}

func waitFor(ctx context.Context, ch <-chan struct{}, name, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return &WaitError{Server: name, For: what, Err: ctx.Err()}
	}
}

// close stops the instance for good (per-session) or until the next
// request (shared).
func (in *instance) close(ctx context.Context) error { return in.closeFor(ctx, "") }

// closeFor is close, with the reason its stopped event gives.
func (in *instance) closeFor(ctx context.Context, reason string) error {
	var running bool
	var pid int
	var sup *lifecycle.Supervisor
	in.do(func(st *instState) (_ effects) {
		// Only the close that ends a running state reports the stop: a
		// second close finds the instance stopped, and a close during a
		// dormant stop leaves the report to it.
		live := in.liveLocked()
		running, pid = (st.phase == phaseRunning || st.phase == phaseRetired) && live != nil, pidOf(live)
		st.closes++
		switch {
		case st.phase == phaseRetired:
		case in.key != "":
			st.phase = phaseClosed
		case st.phase != phaseNew || st.starting != nil:
			st.phase = phaseStopped
		}
		sup = st.sup
		return
	})
	t0 := time.Now()
	var err error
	if sup != nil {
		err = sup.Stop(ctx)
	}
	if running {
		stopMs := float64(time.Since(t0).Microseconds()) / 1000
		d := event.StoppedDetails{StopMs: &stopMs, Reason: reason}
		if pid != 0 {
			d.PID = &pid
		}
		if err != nil {
			d.Error = err.Error()
		}
		in.srv.f.emit(NewEvent(in.srv.Name(), in.key, d))
	}
	return err
}

// rearm re-arms the idle timer of a running instance with nothing in
// flight (after something that kept it awake went away).
func (in *instance) rearm() { in.do(func(_ *instState) (fx effects) { fx.rearm = true; return }) }
