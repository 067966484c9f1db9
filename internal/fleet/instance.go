package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// phase is the instance's own view, on top of its supervisor's state.
type phase uint8

const (
	phaseNew      phase = iota // never started
	phaseRunning               // started; the supervisor keeps it up
	phaseSleeping              // going dormant: the stop is in progress
	phaseDormant               // stopped for idleness; respawns on demand
	phaseStopped               // stopped by request (admin, shutdown)
	phaseClosed                // per-session instance whose session ended
	phaseRetired               // replaced or taken out of service (retire): never runs again
)

// errRetired is what acquire returns on a retired instance: the caller
// asks its server for the instance now in service.
var errRetired = errors.New("instance retired")

// instance is one process slot of a server: the shared one, or one per
// client session.
type instance struct {
	srv *Server
	key string // client session for per-session servers, else ""
	// id tells this instance's stderr lines from those of the server's
	// other instances (logbuf.Entry.Origin): a restart's new shared
	// instance has the key of the old one that drains beside it.
	id uint64
	// cfg is the configuration the instance was made under: each run's
	// connector is built from it.
	cfg *config.Server

	mu sync.Mutex
	// sup drives the instance's run, its connector with it: made by a
	// start (runLocked), dropped once a sleep stopped it — a server put
	// to sleep keeps neither —; nil before the first start too. A start
	// that failed keeps its run, which the next start uses; so does a
	// sleep whose stop was cut short.
	sup          *lifecycle.Supervisor
	conn         Live
	startedAt    time.Time
	lastActivity time.Time
	inflight     int32
	own          int32         // of inflight, mcpvisor's own leases (Peek): a list refresh, a relayed notification
	holding      int           // leases given on a connection and not released: the calls a drain waits for
	live         *liveTools    // a pinned server's: what its process lists, for CheckTool
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
	requests int64 // leases taken, ever
	closes   int   // close calls, ever: a start that a close raced is not kept
	// The client sessions that used conn: the first, and whether another
	// has since. Reset with each new connection.
	firstUser string
	manyUsers bool
	phase     phase // beside manyUsers: the two share one word
	waking    bool  // the start in progress began from dormant (the same word)
	// legacy: a connection of the instance answered as a legacy server
	// (initialize): a later run's connector is told so (eraHint), as the
	// connector of one run remembers it from connect to connect.
	legacy   bool
	restarts int32 // the restarts of the run a dormancy ended (status)
	// refreshAfter counts the requests still in flight that were begun
	// before the start that owes a list refresh succeeded — those numbered
	// up to refreshUpTo (begin), the requests that waited for it — and
	// the refresh is asked for when the last of them ends (end), answered
	// or left: each ends, bounded by its own context. 0: none owed.
	refreshAfter int32
	spawns       int32 // processes started, ever (beside refreshAfter: one word)
	refreshUpTo  int64
	replayed     uint64 // the server's interest generation last replayed
}

// used records that session took a lease on connection l.
func (in *instance) used(l Live, session string) {
	if session == "" {
		return // mcpvisor's own use (learning lists): no client's
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.usedLocked(l, session)
}

// usedLocked is used with mu held.
func (in *instance) usedLocked(l Live, session string) {
	if session == "" || in.conn != l {
		return
	}
	switch in.firstUser {
	case "":
		in.firstUser = session
	case session:
	default:
		in.manyUsers = true
	}
}

// sole is the only client session that used connection l, or "".
func (in *instance) sole(l Live) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.conn != l || in.manyUsers {
		return ""
	}
	return in.firstUser
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
		hk.Notification(Source{Server: h.in.srv, Session: h.in.key, Conn: c, Sole: h.in.sole(c)}, m)
	}
}

func (h instHooks) Request(c *backend.Conn, m *rpc.Message) {
	h.in.touch()
	if hk := h.in.srv.f.opts.Hooks; hk != nil {
		hk.Request(Source{Server: h.in.srv, Session: h.in.key, Conn: c, Sole: h.in.sole(c)}, m)
		return
	}
	go func() {
		_ = c.ReplyError(m.ID, rpc.MethodNotFound, "mcpvisor has no client to forward "+m.Method+" to")
	}()
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
// mu is held.
func (in *instance) runLocked() *lifecycle.Supervisor {
	if in.sup != nil {
		return in.sup
	}
	s := in.srv
	conn := s.f.opts.Connector(in.cfg, instHooks{in}, in.connected)
	// The era the server had when it last ran: a known legacy server is
	// not probed.
	if c, ok := conn.(interface{ SetEraHint(func() string) }); ok {
		c.SetEraHint(in.eraHint)
	}
	in.sup = lifecycle.New(s.Name(), conn, in.policyLocked(s.Config()))
	return in.sup
}

// eraHint is the protocol version the server spoke when it last ran: a
// legacy one if a connection of this instance answered so, else the one
// kept with its lists under its launch hash ("" if none).
func (in *instance) eraHint() string {
	in.mu.Lock()
	legacy := in.legacy
	in.mu.Unlock()
	if legacy {
		return backend.ProtocolVersion
	}
	return in.srv.cachedVersion()
}

// supervisor is the supervisor of the instance's run, or nil when it has
// none (never started, or dormant).
func (in *instance) supervisor() *lifecycle.Supervisor {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sup
}

// runStateLocked is the state of the instance's run (Stopped, with the
// restarts of the run a dormancy ended, when it has none); mu is held.
func (in *instance) runStateLocked() lifecycle.StateInfo {
	if in.sup == nil {
		return lifecycle.StateInfo{Restarts: int(in.restarts), Failures: in.srv.failures()}
	}
	return in.sup.State()
}

// runState is runStateLocked, for callers without mu.
func (in *instance) runState() lifecycle.StateInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.runStateLocked()
}

// readyLocked reports whether the instance's run is serving (Ready or
// Degraded); mu is held.
func (in *instance) readyLocked() bool { return in.sup != nil && in.sup.IsReady() }

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

// restarting is the supervisor's OnRestarting: the attempt under way, if
// any, failed with cause; the next begins.
func (in *instance) restarting(attempt int, delay time.Duration, cause error) {
	s := in.srv
	in.attemptFailed(cause)
	in.mu.Lock()
	in.attempt = 1 + s.stderrMark()
	in.restartAt = time.Now().Add(delay).UnixNano()
	in.mu.Unlock()
	d := map[string]any{"attempt": attempt, "delayMs": delay.Milliseconds()}
	if cause != nil {
		d["error"] = s.Config().RedactText(cause.Error())
	}
	s.f.emit(Event{Server: s.Name(), Session: in.key, Type: "restarting", Details: d})
}

// restarted is the supervisor's OnRestart.
func (in *instance) restarted() {
	s := in.srv
	in.mu.Lock()
	in.attempt = 0
	at := in.restartAt
	in.restartAt = 0
	in.mu.Unlock()
	if at != 0 {
		s.Telemetry().ObserveSpawn(time.Since(time.Unix(0, at)))
	}
	s.f.spawn(in.catchUp)
	s.f.emit(Event{Server: s.Name(), Session: in.key, Type: "restarted", Details: map[string]any{"pid": in.pid()}})
	if in.key == "" {
		s.requestRefresh(false, allKinds...)
	}
}

// failed is the supervisor's OnFailed.
func (in *instance) failed(err error) {
	s := in.srv
	in.attemptFailed(err)
	in.mu.Lock()
	in.lastErr = err
	in.mu.Unlock()
	s.f.emit(Event{Server: s.Name(), Session: in.key, Type: "failed", Details: map[string]any{"error": s.Config().RedactText(err.Error())}})
}

// attemptFailed keeps in the history the restart attempt under way, if
// one is, as failed with err: the supervisor reports an attempt's failure
// only as the cause of the next attempt, or in its final failure.
func (in *instance) attemptFailed(err error) {
	in.mu.Lock()
	at := in.attempt
	in.attempt = 0
	in.mu.Unlock()
	if at != 0 && err != nil {
		se := in.startFailure(err, at-1)
		in.mu.Lock()
		in.lastErr = se
		in.mu.Unlock()
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
	switch {
	case errors.As(in.lastErr, &se):
	case errors.As(in.lastErr, &ee):
		// A process that served, and ended before it answered a client
		// (disconnected recorded how).
		se = &StartError{Server: cfg.Name, Stage: StageServing, Err: in.lastErr, reason: exitReason(ee.Status, "while it served")}
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
	in.mu.Lock()
	in.legacy = in.legacy || legacy
	in.conn = l
	in.firstUser, in.manyUsers = "", false
	now := time.Now()
	in.startedAt, in.lastActivity = now, now
	in.spawns++
	in.armLocked(now)
	in.mu.Unlock()
}

func (in *instance) disconnected(err error) {
	in.mu.Lock()
	pid := pidOf(in.conn)
	ended := in.conn
	in.conn = nil
	in.attempt = 0 // the restart that follows is caused by this end
	if err != nil {
		in.lastErr = err
	}
	sleeping := in.phase == phaseSleeping || in.phase == phaseStopped || in.phase == phaseClosed || in.phase == phaseRetired
	in.mu.Unlock()
	in.srv.countEnd(ended)
	if err != nil && !sleeping {
		e := in.servingExit(err, pid)
		d := map[string]any{"error": e.Error, "stage": e.Stage}
		if pid != 0 {
			d["pid"] = pid
		}
		if e.Code != nil {
			d["code"] = *e.Code
		}
		if e.Signal != "" {
			d["signal"] = e.Signal
		}
		if e.Kind != "" {
			d["kind"] = e.Kind // "oom": its memory limit killed it
		}
		if e.OOMKills > 0 {
			d["oomKills"] = e.OOMKills
			if l := in.srv.Config().Limits; l != nil && l.Memory > 0 {
				d["memoryLimitBytes"] = l.Memory
			}
		}
		if e.PIDsLimitHits > 0 {
			d["pidsLimitHits"] = e.PIDsLimitHits
		}
		var ee *backend.ExitError
		if errors.As(err, &ee) && ee.Status.Stage != "" {
			d["stopStep"] = ee.Status.Stage
		}
		if len(e.Stderr) > 0 {
			d["stderr"] = e.Stderr
		}
		in.srv.f.emit(Event{Server: in.srv.Name(), Session: in.key, Type: "exited", Details: d})
	}
}

func (in *instance) pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return pidOf(in.conn)
}

// root is the process tree of the instance's live connection, if it has
// a local one.
func (in *instance) root() (proc.Root, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return rootOf(in.conn)
}

func pidOf(l Live) int {
	if c, ok := l.(*backend.Conn); ok && c != nil && c.Process() != nil {
		return c.Process().Pid()
	}
	return 0
}

// begin counts a request Acquire serves as in flight, and returns its
// number among the instance's requests (for end).
func (in *instance) begin() int64 {
	in.mu.Lock()
	in.requests++
	seq := in.requests
	in.inflight++
	in.lastActivity = time.Now()
	in.mu.Unlock()
	return seq
}

// end ends a lease or a request begin counted: seq is the request's
// number (begin), 0 for one that cannot have waited for a start (a lease
// on the running connection, mcpvisor's own).
func (in *instance) end(seq int64) {
	in.mu.Lock()
	due := in.endLocked(seq)
	in.mu.Unlock()
	if due {
		in.srv.requestRefresh(false, allKinds...)
	}
}

// endLocked is end under in.mu, which it leaves held; due says the
// caller, once it has released in.mu, must ask for the lists' refresh.
func (in *instance) endLocked(seq int64) (due bool) {
	in.inflight--
	in.lastActivity = time.Now()
	if in.inflight == 0 && in.phase == phaseRunning {
		in.armLocked(in.lastActivity)
	}
	if in.refreshAfter > 0 && seq > 0 && seq <= in.refreshUpTo {
		in.refreshAfter--
		due = in.refreshAfter == 0
	}
	return due
}

func (in *instance) touch() {
	in.mu.Lock()
	in.lastActivity = time.Now()
	in.mu.Unlock()
}

// leaseRunning counts a lease on the running connection — a request when
// request is set — and returns it, all under one lock; when the instance is
// not running it counts nothing and returns nil.
func (in *instance) leaseRunning(session string, request bool) Live {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := in.conn
	if in.phase != phaseRunning || c == nil || !c.Alive() || !in.readyLocked() {
		return nil
	}
	in.inflight++
	in.holding++
	if request {
		in.requests++
	} else {
		in.own++
	}
	in.lastActivity = time.Now()
	in.usedLocked(c, session)
	return c
}

// release ends a lease leaseRunning or acquire gave: the call it held is
// over (a drain waiting for the last one is told), and the request no
// longer counts as in flight.
func (in *instance) release(own bool, seq int64) {
	in.mu.Lock()
	if own {
		in.own--
	}
	in.holding--
	if in.holding == 0 && in.drained != nil {
		close(in.drained)
		in.drained = nil
	}
	due := in.endLocked(seq) // under the same lock: one per release
	in.mu.Unlock()
	if due {
		in.srv.requestRefresh(false, allKinds...)
	}
}

func (in *instance) isRetired() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.phase == phaseRetired
}

// retire takes the instance out of service for good, at once: no lease is
// given on it any more (acquire returns errRetired, and its caller asks the
// server for the instance now in service), a start in progress is not kept
// (as for a close), and its idle timer stops; the calls it holds go on.
// The channel returned is closed once they are all released. Its process,
// should it exit meanwhile, is not started again by the restart policy:
// nothing would use it.
func (in *instance) retire() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.phase = phaseRetired
	in.setPolicyLocked(in.srv.Config())
	in.closes++ // a start in progress is stopped, not kept
	if in.timer != nil {
		in.timer.Stop()
	}
	return in.drainedLocked()
}

// drainedLocked returns a channel closed once every lease given on the
// instance is released: at once when none is held, else the one channel
// all such waiters share.
func (in *instance) drainedLocked() <-chan struct{} {
	if in.holding == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if in.drained == nil {
		in.drained = make(chan struct{})
	}
	return in.drained
}

// applySettings makes the instance's supervisor follow cfg's restart
// policy and connect timeout.
func (in *instance) applySettings(cfg *config.Server) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.setPolicyLocked(cfg)
}

// setPolicyLocked sets the supervisor's policy under cfg; mu is held, so
// that a retired instance — whenever the settings come — is never
// restarted by its policy: nothing would use it.
func (in *instance) setPolicyLocked(cfg *config.Server) {
	if in.sup != nil {
		in.sup.SetPolicy(in.policyLocked(cfg))
	}
}

// policyLocked is policy, with no restart for a retired instance; mu is
// held.
func (in *instance) policyLocked(cfg *config.Server) lifecycle.Policy {
	pol := in.policy(cfg)
	if in.phase == phaseRetired {
		pol.Restart = lifecycle.RestartNever
	}
	return pol
}

// current is the live connection, or nil.
func (in *instance) current() Live {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.phase == phaseRunning && in.conn != nil && in.conn.Alive() && in.readyLocked() {
		return in.conn
	}
	return nil
}

// armLocked (re)arms the idle timer for the next moment the instance could
// be due to sleep: idle for its idle timeout, or, with maxIdleMemory, its
// next memory check (memoryCheckEvery). Callers hold mu.
func (in *instance) armLocked(now time.Time) {
	cfg := in.srv.Config()
	maxIdle := maxIdleMemory(cfg)
	if cfg.IdleTimeout <= 0 && maxIdle == 0 {
		return
	}
	var next time.Time
	if cfg.IdleTimeout > 0 {
		_, next = idleDecision(activity{now: now, lastActivity: in.lastActivity, startedAt: in.startedAt, ready: true}, cfg.IdleTimeout, cfg.StartGrace)
		if next.IsZero() {
			next = now // due now: the check decides
		}
	}
	if check := now.Add(memoryCheckEvery); maxIdle > 0 && (next.IsZero() || check.Before(next)) {
		next = check
	}
	d := next.Sub(now)
	if in.timer == nil {
		in.timer = time.AfterFunc(d, in.idleCheck)
	} else {
		in.timer.Reset(d)
	}
}

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
	in.mu.Lock()
	if in.phase != phaseRunning {
		in.mu.Unlock()
		return
	}
	now := time.Now()
	a := activity{now: now, lastActivity: in.lastActivity, startedAt: in.startedAt, inflight: int(in.inflight),
		ready: in.conn != nil && in.conn.Alive() && in.runStateLocked().State == lifecycle.StateReady}
	var sleep bool
	var next time.Time
	if cfg.IdleTimeout > 0 {
		sleep, next = idleDecision(a, cfg.IdleTimeout, cfg.StartGrace)
	}
	if sleep {
		in.sleepLocked(now, "", nil)
		return
	}
	if maxIdle > 0 && a.ready && a.inflight == 0 && !now.Before(a.startedAt.Add(cfg.StartGrace)) {
		// Measured without the lock (it reads /proc or cgroup files);
		// slept only if nothing began meanwhile.
		conn, requests := in.conn, in.requests
		in.mu.Unlock()
		mem, measured := in.treeMemory(conn)
		pinned := in.srv.pinned(in.key) // takes the server's lock: not under in.mu
		in.mu.Lock()
		if measured && mem > maxIdle && !pinned && in.phase == phaseRunning && in.conn == conn && in.inflight == 0 && in.requests == requests {
			in.sleepLocked(now, "", map[string]any{"reason": "maxIdleMemory", "memoryBytes": mem, "maxIdleMemoryBytes": maxIdle})
			return
		}
		if in.phase != phaseRunning {
			in.mu.Unlock()
			return
		}
	}
	if in.inflight > 0 {
		// end() re-arms the timer when the last request finishes.
		in.mu.Unlock()
		return
	}
	wait := cfg.IdleTimeout // starting or restarting, or idle timeout off: look again later
	if !next.IsZero() {
		wait = next.Sub(now)
	}
	if maxIdle > 0 && (wait <= 0 || memoryCheckEvery < wait) {
		wait = memoryCheckEvery
	}
	if in.timer != nil {
		in.timer.Reset(wait)
	} else {
		// Dropped at a dormancy, or never armed (sleeping was off when
		// the process connected): this check, from an older timer, arms
		// the instance's.
		in.timer = time.AfterFunc(wait, in.idleCheck)
	}
	in.mu.Unlock()
}

// sleepLocked starts a dormant stop and returns a channel closed when it
// is done; mu is held and released. by, if set, names who asked for the
// sleep in the dormant event ("operator"); idleness asks for none. why, if
// set, adds to the event's details why it sleeps early (maxIdleMemory).
func (in *instance) sleepLocked(now time.Time, by string, why map[string]any) <-chan struct{} {
	cfg := in.srv.Config()
	in.phase = phaseSleeping
	done := make(chan struct{})
	in.sleepDone = done
	pid := pidOf(in.conn)
	idleFor := now.Sub(in.lastActivity)
	last := in.lastActivity
	sup := in.sup
	in.mu.Unlock()

	go func() {
		var err error
		restarts := 0
		if sup != nil { // (a running instance has its run; nothing to stop otherwise)
			restarts = sup.State().Restarts // (Stop forgets them)
			ctx, cancel := context.WithTimeout(context.Background(), stopBound(cfg.StdinWait, cfg.TermWait))
			err = sup.Stop(ctx)
			cancel()
		}
		in.mu.Lock()
		dormant := in.phase == phaseSleeping
		if dormant {
			in.phase = phaseDormant
			// A dormant instance keeps no timer: the next start arms a
			// new one (a check that fires meanwhile finds it dormant).
			if in.timer != nil {
				in.timer.Stop()
				in.timer = nil
			}
			// Nor its run: the next start makes one, with a connector.
			// (A stop cut short by ctx keeps it: Stop finishes in the
			// background, and a start waits for it. So does a start under
			// way, which holds it: it ends as stopped.)
			if err == nil && in.sup == sup && sup != nil && in.starting == nil {
				in.restarts = int32(restarts)
				in.sup = nil
			}
		}
		in.dormantAt = time.Now().UnixNano()
		in.conn = nil
		in.sleepDone = nil
		in.mu.Unlock()
		if dormant && in.key == "" && in.isDormant() {
			in.srv.spill() // (a wake right after only makes its lists read from disk until the wake's relearn)
		}
		close(done)
		d := map[string]any{"pid": pid, "idleSeconds": idleFor.Seconds(), "lastActivity": last}
		if by != "" {
			d["by"] = by
		}
		for k, v := range why {
			d[k] = v
		}
		if err != nil {
			d["error"] = err.Error()
		}
		in.srv.f.emit(Event{Server: in.srv.Name(), Session: in.key, Type: "dormant", Details: d})
	}()
	return done
}

// isDormant reports whether the instance is dormant now.
func (in *instance) isDormant() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.phase == phaseDormant
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
		in.mu.Lock()
		if in.phase != phaseRunning || in.inflight > in.own || in.requests != requests || in.conn == nil || in.starting != nil {
			in.mu.Unlock()
			return false
		}
		if in.own > 0 {
			quiet := in.drainedLocked()
			in.mu.Unlock()
			select {
			case <-quiet:
				continue
			case <-ctx.Done():
				return false
			}
		}
		in.sleepLocked(time.Now(), "", nil)
		return true
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

func (in *instance) acquire1(ctx context.Context) (Live, bool, error) {
	name := in.srv.Name()
	woke := false
	for {
		in.mu.Lock()
		switch in.phase {
		case phaseClosed:
			in.mu.Unlock()
			return nil, woke, fmt.Errorf("server %s: the client session has ended", name)
		case phaseRetired:
			in.mu.Unlock()
			return nil, woke, errRetired
		case phaseSleeping:
			ch := in.sleepDone
			in.mu.Unlock()
			if err := waitFor(ctx, ch, name, "going dormant"); err != nil {
				return nil, woke, err
			}
			continue
		}
		c := in.conn
		if in.phase == phaseRunning && c != nil && c.Alive() && in.readyLocked() {
			in.holding++ // released by release
			in.mu.Unlock()
			return c, woke, nil
		}
		if in.phase == phaseRunning && c != nil && !c.Alive() {
			// The process just went away: wait for the supervisor to see
			// it (the tree is being reaped) and to restart it.
			in.mu.Unlock()
			if err := waitFor(ctx, c.Done(), name, "restarting"); err != nil {
				return nil, woke, err
			}
			if err := in.waitGone(ctx, c); err != nil {
				return nil, woke, err
			}
			continue
		}
		var changed <-chan struct{}
		if in.starting == nil {
			// A crash loop answers at once: a request never waits out
			// a backoff (the supervisor's unattended restart, or the
			// earliest a start may try again) — nor does one that would
			// begin an instance of a server in a crash loop (a
			// per-session server's, say: its instances share the
			// server's record).
			var err error
			if in.sup != nil {
				// Taken before what it says is read: a failure recorded
				// after wakes the wait below, which then finds the loop.
				changed = in.sup.Changed()
				err = in.sup.CrashLoop()
			} else {
				err = in.srv.crashLoop()
			}
			if err != nil {
				err = in.loopErrorLocked(err)
				in.mu.Unlock()
				return nil, woke, err
			}
		}
		if in.phase == phaseRunning && in.starting == nil && in.sup != nil {
			// Restarting by its policy — at once after a run that
			// answered, or after a single failure: wait for the next
			// change of the supervisor's state. (Given up — Failed or
			// Stopped — a request starts it again below.)
			info := in.sup.State()
			// Between the end of a session and the supervisor's move to
			// Restarting the connection is gone while the state still says
			// Ready: that is the start of a restart too.
			gone := in.conn == nil && (info.State == lifecycle.StateReady || info.State == lifecycle.StateDegraded)
			if info.State == lifecycle.StateRestarting || gone {
				in.mu.Unlock()
				select {
				case <-changed:
				case <-ctx.Done():
					return nil, woke, restartingError(name, info, ctx.Err())
				}
				continue
			}
		}
		if ch := in.starting; ch != nil {
			woke = woke || in.waking
			in.mu.Unlock()
			if err := in.awaitStart(ctx, ch); err != nil {
				return nil, woke, err
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			in.mu.Unlock()
			return nil, woke, fmt.Errorf("server %s: %w", name, err) // nobody left to start it for
		}
		if in.srv.f.closed.Load() {
			in.mu.Unlock()
			return nil, woke, fmt.Errorf("server %s: %w", name, ErrFleetClosed)
		}
		// The start runs on its own; this caller waits for it like every
		// other, within its own context.
		ch := make(chan struct{})
		in.starting = ch
		in.waking = in.phase == phaseDormant
		woke = woke || in.waking
		go in.start(ch, in.phase, in.closes, time.Duration(time.Now().UnixNano()-in.dormantAt))
		in.mu.Unlock()
		afterStartBegun(ch)
		// Its own start's outcome, even if it has ended already (and
		// in.starting with it): never a second start for one request.
		if err := in.awaitStart(ctx, ch); err != nil {
			return nil, woke, err
		}
	}
}

// awaitStart waits for the start that closes ch to end, within ctx, and
// returns its error (errRetired if the instance was retired meanwhile).
func (in *instance) awaitStart(ctx context.Context, ch chan struct{}) error {
	if err := waitFor(ctx, ch, in.srv.Name(), "starting"); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.phase == phaseRetired {
		return errRetired
	}
	return in.startErr
}

// afterStartBegun is called by acquire once it began a start, with the
// channel the start closes when it ends (a seam for tests).
var afterStartBegun = func(chan struct{}) {}

// afterStartSignalled is called by a start once it let its waiters go (a
// seam for tests).
var afterStartSignalled = func() {}

// beforeSupervisorStart is called by a start of one of s's instances
// right before it asks the supervisor, after acquire's check of the crash
// loop (a seam for tests).
var beforeSupervisorStart = func(s *Server) {}

// start starts the instance's supervisor for the requests waiting on ch,
// and closes ch when the outcome is recorded. was is the phase it starts
// from; gen the count of closes when it was decided: a close since wins.
func (in *instance) start(ch chan struct{}, was phase, gen int, dormantFor time.Duration) {
	name := in.srv.Name()

	mark := in.srv.stderrMark()
	in.mu.Lock()
	in.attempt = 0 // this start's failure is kept below, not as an attempt
	sup := in.runLocked()
	in.mu.Unlock()
	beforeSupervisorStart(in.srv)
	t0 := time.Now()
	err := sup.Start(context.Background())
	took := time.Since(t0)
	// What is cached may be older than this process: a shared instance
	// that woke, or started with lists cached, looks again (a relaunched
	// server's lists are learned again by relearn, whose lease alone lets
	// it sleep after). Decided here, outside in.mu.
	look := err == nil && in.key == "" && (was == phaseDormant || in.srv.Cached(Tools)) && !in.srv.lists.relaunchPending()

	in.mu.Lock()
	in.starting, in.waking = nil, false
	if in.closes != gen {
		// A close (a Stop, the end of the session, the fleet's Close)
		// raced the start, and wins whatever the start's outcome: what
		// started is stopped, not kept running for nobody, and a start
		// the close interrupted is no failure — it counts nothing
		// towards the respawn limit and reports no failed event.
		if err != nil {
			// Nothing runs: only the waiters are told.
			in.conn = nil
			in.startErr = fmt.Errorf("server %s was stopped while it started", name)
			in.mu.Unlock()
			close(ch)
			return
		}
		in.mu.Unlock()
		in.stopStarted(ch, sup)
		return
	}
	var se *StartError
	refreshNow, refused := false, false
	in.refreshAfter = 0
	switch {
	case errors.Is(err, lifecycle.ErrCrashLoop):
		// Refused at once, nothing started: no failure of its own, and
		// no spawn, wake or start either (the loop began after acquire
		// looked: another instance's failures, on the server's record).
		refused = true
		err = in.loopErrorLocked(err)
	case err != nil:
		se = in.startFailure(err, mark)
		err = se
		in.lastErr = err
	default:
		in.phase = phaseRunning
		if look {
			// The requests that waited for this start go first: the
			// refresh would compete with them for the new process,
			// which reads one message at a time and runs on cold code.
			if n := in.inflight - in.own; n > 0 {
				// Those are the requests begun so far (numbered up to
				// in.requests): no lease on the running connection
				// could be taken before now.
				in.refreshAfter, in.refreshUpTo = n, in.requests
			} else {
				refreshNow = true
			}
		}
	}
	in.startErr = err
	pid := pidOf(in.conn)
	in.mu.Unlock()
	if se == nil && !refused {
		// Counted before the waiters go on: a request this start served,
		// or that woke the server, finds them counted.
		in.srv.Telemetry().ObserveSpawn(took)
		if was == phaseDormant {
			in.srv.Telemetry().ObserveWake(took)
		}
	}
	close(ch)
	afterStartSignalled()
	if refused {
		return // the waiters have the crash loop's error; the failures that made it were reported
	}
	if se != nil {
		d := map[string]any{"error": se.Error(), "stage": se.Stage}
		if len(se.Stderr) > 0 {
			d["stderr"] = se.Stderr
		}
		in.srv.f.emit(Event{Server: name, Session: in.key, Type: "failed", Details: d})
		return
	}
	details := map[string]any{"pid": pid, "startMs": took.Milliseconds()}
	typ := "started"
	if was == phaseDormant {
		typ = "respawned"
		details = map[string]any{"pid": pid, "dormantSeconds": dormantFor.Seconds(), "respawnMs": float64(took.Microseconds()) / 1000}
	}
	in.srv.f.emit(Event{Server: name, Session: in.key, Type: typ, Details: details})
	in.srv.f.spawn(in.catchUp)
	if refreshNow {
		in.srv.requestRefresh(false, allKinds...)
	}
}

// stopStarted stops what a start that a close raced made with sup, tells
// the requests waiting on ch that it was stopped while it started, and
// reports it as stopped.
func (in *instance) stopStarted(ch chan struct{}, sup *lifecycle.Supervisor) {
	name := in.srv.Name()
	in.mu.Lock()
	pid := pidOf(in.conn)
	in.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.Background(), stopBound(in.srv.Config().StdinWait, in.srv.Config().TermWait))
	serr := sup.Stop(sctx)
	cancel()
	in.mu.Lock()
	in.conn = nil
	in.startErr = fmt.Errorf("server %s was stopped while it started", name)
	in.mu.Unlock()
	close(ch)
	d := map[string]any{"pid": pid, "reason": "stopped while it started"}
	if serr != nil {
		d["error"] = serr.Error()
	}
	in.srv.f.emit(Event{Server: name, Session: in.key, Type: "stopped", Details: d})
}

// waitGone waits until the supervisor has let go of a dead connection.
func (in *instance) waitGone(ctx context.Context, c Live) error {
	for {
		sup := in.supervisor()
		if sup == nil {
			return nil // the run is over
		}
		changed := sup.Changed()
		in.mu.Lock()
		same := in.conn == c && in.sup == sup && sup.IsReady()
		in.mu.Unlock()
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
	in.mu.Lock()
	// Only the close that ends a running phase reports the stop: a second
	// close finds the phase stopped, and a close during a dormant stop
	// leaves the report to it.
	running, pid := (in.phase == phaseRunning || in.phase == phaseRetired) && in.conn != nil, pidOf(in.conn)
	in.closes++
	switch {
	case in.phase == phaseRetired:
	case in.key != "":
		in.phase = phaseClosed
	case in.phase != phaseNew || in.starting != nil:
		in.phase = phaseStopped
	}
	if in.timer != nil {
		in.timer.Stop()
	}
	sup := in.sup
	in.mu.Unlock()
	t0 := time.Now()
	var err error
	if sup != nil {
		err = sup.Stop(ctx)
	}
	in.mu.Lock()
	in.conn = nil
	in.mu.Unlock()
	if running {
		d := map[string]any{"stopMs": float64(time.Since(t0).Microseconds()) / 1000}
		if reason != "" {
			d["reason"] = reason
		}
		if pid != 0 {
			d["pid"] = pid
		}
		if err != nil {
			d["error"] = err.Error()
		}
		in.srv.f.emit(Event{Server: in.srv.Name(), Session: in.key, Type: "stopped", Details: d})
	}
	return err
}

// rearm re-arms the idle timer of a running instance with nothing in
// flight (after something that kept it awake went away).
func (in *instance) rearm() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.phase == phaseRunning && in.inflight == 0 {
		in.armLocked(time.Now())
	}
}
