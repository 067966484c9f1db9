package fleet

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Server is one configured server and its instances.
type Server struct {
	cfg atomic.Pointer[config.Server] // replaced by a reload (Fleet.Reload)
	f   *Fleet

	// shared is the instance every session shares (a per-session
	// server's own use too); a new launch replaces it (replaceInstances).
	shared atomic.Pointer[instance]
	// streak is the server's crash-loop record, shared by the
	// supervisors of all its instances (made by their first start: a
	// server never started costs no more; streakOf).
	streak atomic.Pointer[lifecycle.Streak]
	// cat is what is known of its lists and definitions (catalog.go).
	cat catalog.Catalog
	tel atomic.Pointer[telemetry.Server] // its call metrics, made on first use (Telemetry); gone with it

	mu         sync.Mutex // guards perSession, stopping, freed and ends; taken before any instance's mu, never under it
	perSession map[string]*instance
	stopping   int           // per-session instances detached, still stopping
	freed      chan struct{} // closed (and replaced) as one of them is gone

	// idents are the identities InstanceKey named, by identity key: what
	// a per-identity server's instance for one resolves ${identity.sub}
	// with. One small record per person who used the server.
	idents sync.Map

	ends *ends // what the ends of its processes and starts left (History, counters); guarded by mu, made on the first

	// refusal, when set, is the error every request gets instead of an
	// instance: the operator stopped the server (until Start), or a
	// reload removed it (for good). Read on every request, without a lock.
	refusal atomic.Pointer[error]
	// opMu serializes the operator's actions and reloads on this server:
	// one Stop, Start, Restart or reload change at a time.
	opMu sync.Mutex
}

// Name is the configured name.
func (s *Server) Name() string { return s.Config().Name }

// Config is the server's resolved configuration, as the last reload left
// it. Read it once per decision: a reload may replace it meanwhile.
func (s *Server) Config() *config.Server { return s.cfg.Load() }

// Telemetry is the server's call metrics (calls by outcome, durations,
// bytes relayed, spawn and wake durations): made on first use (a server
// that never served costs nothing more), kept across reloads that change
// the server. When a reload removes it they are still exported while it
// drains (Fleet.CallTelemetry), and a server added again under its name
// meanwhile continues them.
func (s *Server) Telemetry() *telemetry.Server {
	if t := s.tel.Load(); t != nil {
		return t
	}
	s.tel.CompareAndSwap(nil, telemetry.NewServer())
	return s.tel.Load()
}

// sharedIn is the shared instance.
func (s *Server) sharedIn() *instance { return s.shared.Load() }

func (s *Server) instances() []*instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*instance{s.sharedIn()}
	for _, in := range s.perSession {
		out = append(out, in)
	}
	return out
}

// detachSession returns the instance a per-session server ran for
// session — out of perSession, so no request finds it, but counted as
// stopping until stopDetached — for the caller to stop; nil if there is
// none. asked tells that the session had asked something of the server
// (Interest.End, before): then the shared instance of a modern server is
// told the subscriptions left.
func (s *Server) detachSession(session string, asked bool) *instance {
	s.mu.Lock()
	in := s.perSession[session]
	if in != nil {
		s.stopping++ // until stopped (stopDetached)
	}
	delete(s.perSession, session)
	s.mu.Unlock()
	if asked {
		if in == nil {
			// What the session asked is forgotten: a modern server's
			// listen drops its subscriptions.
			s.resync()
		}
		s.sharedIn().rearm() // a subscription it held may have kept it awake
	}
	return in
}

// stopDetached stops in, an instance detachSession took out, within ctx,
// and lets a session waiting for a place under the instance limit take
// its place.
func (s *Server) stopDetached(ctx context.Context, in *instance) {
	_ = in.close(ctx)
	s.freePlace()
}

// Status describes the server (its shared instance, how many
// per-session instances run, and each identity's instance).
func (s *Server) Status() Status {
	st := s.sharedIn().status()
	st.Name = s.Name()
	st.Sessions, st.Identities = s.identityStatus()
	if err := s.refused(); err != nil {
		st.State = "stopped"
		st.Refusing = err.Error()
	} else if info, ok := s.OAuth(); ok {
		st.OAuth = &info
		if needsLogin(st.State, info) {
			st.State = "needs-login"
		}
	}
	st.Learned = s.cat.Cached(catalog.Tools)
	st.Warning = s.cat.Warning()
	st.PendingDefinitions = s.cat.PendingDefinitions()
	st.Ready = ready(st)
	if t := s.tel.Load(); t != nil {
		st.Calls = t.CallCounts()
	}
	st.LastError = s.Config().RedactText(st.LastError) // it may quote the server's stderr
	st.Draining = len(s.f.drainingOf(s))
	st.Limits = s.f.limitsStatus(s.Config())
	st.OOMKills, st.PIDsLimitHits = s.limitCounts()
	st.Launcher = s.launcher()
	st.Era = s.cat.Era()
	return st
}

// Roots lists the process tree of every running instance of the server,
// shared and per-session, and of those still draining after a restart, a
// reload or a stop — they hold memory too —, and of the process each runs
// for modern clients when the server is dual-era, for proc.TreeUsage
// (remote servers have none).
func (s *Server) Roots() []proc.Root {
	var out []proc.Root
	for _, in := range append(s.instances(), s.f.drainingOf(s)...) {
		if r, ok := in.root(); ok {
			out = append(out, r)
		}
		if r, ok := in.modernRoot(); ok {
			out = append(out, r)
		}
	}
	return out
}

// liveInit is the initialize result of the shared instance's live
// connection, or nil when it is not running.
func (s *Server) liveInit() *InitResult {
	if c, ok := s.sharedIn().current().(Conn); ok && c != nil {
		return c.Init()
	}
	return nil
}

// requests counts the requests ever begun on the shared instance (as
// Status.Requests does).
func (s *Server) requests() int64 {
	var n int64
	s.sharedIn().view(func(st *instState) { n = st.requests })
	return n
}

// rest puts the shared instance to sleep at once if it is running, has no
// client request in flight, no request began since requests returned
// requests and no resource subscription holds it awake: a server started
// only to learn its lists goes back to sleep. mcpvisor's own work on it (a
// list refresh, a relayed notification), which a sleep would cut, is
// waited for, within ctx. It reports whether it put the server to sleep;
// when ctx ends first, nothing changes.
func (s *Server) rest(ctx context.Context, requests int64) bool {
	return s.sharedIn().rest(ctx, requests)
}

// streakOf is the server's crash-loop record, made if need be.
func (s *Server) streakOf() *lifecycle.Streak {
	if k := s.streak.Load(); k != nil {
		return k
	}
	s.streak.CompareAndSwap(nil, new(lifecycle.Streak))
	return s.streak.Load()
}

// crashLoop is the server's crash loop error, or nil (lifecycle.Streak.CrashLoop).
func (s *Server) crashLoop() error {
	if k := s.streak.Load(); k != nil {
		return k.CrashLoop(s.Name())
	}
	return nil
}

// failures is the count of its starts in a row that failed before
// answering a client.
func (s *Server) failures() int {
	if k := s.streak.Load(); k != nil {
		return k.Failures()
	}
	return 0
}
