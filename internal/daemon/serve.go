package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/authn"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/conndeadline"
	"github.com/mcpvisor/mcpvisor/internal/dashboard"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/watchdog"
)

// Options are what serve and stdio share: where the config and state
// are, tracing, the shutdown's bound, learning, the log.
type Options struct {
	ConfigFile, StateDir string
	// OTLPEndpoint is where spans go ("": the OTEL_* environment, else
	// off); Version names mcpvisor in them.
	OTLPEndpoint, Version string
	ShutdownTimeout       time.Duration
	NoLearn               bool
	Log                   *slog.Logger
	// Stderr is where the lines for the person who started it go.
	Stderr io.Writer
}

// ServeOptions are mcpvisor serve's.
type ServeOptions struct {
	Options
	// Listen is the address ("": the config's, else 127.0.0.1:7331).
	Listen string
	// Token is the bearer token clients must send ("": none).
	Token string
	// ExitWithParent ends serve when the process that started it exits.
	ExitWithParent bool
	// NoWatch: the config file's changes do not reload it.
	NoWatch bool
	// Socket is the unix socket for mcpvisor connect (SocketAuto: the
	// state directory's; "" or "none": no socket).
	Socket string
	// ExitWhenUnused ends serve after this long without a client (0:
	// never).
	ExitWhenUnused time.Duration
	// Getenv reads the environment a replica learns its ordinal from
	// (MCPVISOR_ORDINAL, POD_NAME); nil means os.Getenv.
	Getenv func(string) string
}

// Serve runs mcpvisor serve until it is shut down (a signal, ctx ending,
// its parent's exit, unused): it opens the config,
// the state, the fleet, the gateway and its fronts, serves, and closes
// them in order. An error before serving closes what was opened, through
// one path (serving.close). It returns nil for a clean exit, else the exit
// code as an error (shutdown.ExitCode) or what went wrong.
func Serve(ctx context.Context, o ServeOptions) (err error) {
	s := &serving{o: o, log: o.Log, sd: shutdown.New()}
	defer context.AfterFunc(ctx, func() { s.sd.Trigger("stopped: " + context.Cause(ctx).Error()) })()
	served := false
	defer func() {
		if err != nil && !served {
			s.close(context.Background())
		}
	}()
	if err := s.open(); err != nil {
		return err
	}
	if err := s.start(); err != nil {
		return err
	}
	fmt.Fprintf(o.Stderr, "mcpvisor: serving %d servers at http://%s/mcp\n", len(s.a.fleet.Servers()), s.ln.Addr())
	if p := s.front.socket(); p != "" {
		fmt.Fprintf(o.Stderr, "mcpvisor: mcpvisor connect socket at %s\n", p)
	}
	served = true // the shutdown closes everything from here on
	return s.run()
}

// serving is one run of serve: what it opened, in the order it opened
// them (close undoes them in reverse).
type serving struct {
	o   ServeOptions
	log *slog.Logger
	sd  *shutdown.Shutdown

	tracing   *telemetry.Tracing // until the app takes it
	a         *app
	ln        net.Listener
	front     *daemonFront
	wd        *watchdog.Watchdog
	stopHUP   func()
	srv       *http.Server
	sessions  *gateway.SessionLimit
	aggregate *gateway.StreamableHandler
	routes    *gateway.ServerRouter
	rl        *reloader
	// bg counts the goroutines serve starts beside its own (the reload
	// signal's loop, the HTTP serve loop, the config watch, the team's
	// prefetch): each ends with the shutdown's context or the closing
	// of what it serves, and a shutdown that ends within its time
	// returns only once they have (one forced past its time does not
	// wait for the graceful path).
	bg sync.WaitGroup
	// team is the team identity every route's guard checks tokens by
	// (the config's auth; none without it), swapped at each reload.
	team *guard.Team
	// auditLog is the audit in force (nil: none), opened with auditOpts.
	auditLog  atomic.Pointer[audit.Log]
	auditOpts *audit.Options
	// local is the public front's handler but for forwarding: what the
	// peer interface serves.
	local http.Handler
	// replicas is this replica among its peers (nil: a single
	// mcpvisor, without a replicas block).
	replicas *replicaSet
}

// open builds everything serve runs; nothing is started.
func (s *serving) open() error {
	var err error
	if s.tracing, err = newTracing(s.o.OTLPEndpoint, s.o.Version); err != nil {
		return err
	}
	if s.a, err = openApp(s.o.ConfigFile, s.o.StateDir, s.log, s.openReplicas); err != nil {
		return err
	}
	s.a.setTracing(s.tracing)
	s.tracing = nil // the app's now: its close exports the last spans
	listen := s.o.Listen
	if listen == "" {
		listen = s.a.cfg.Listen
	}
	if s.ln, err = net.Listen("tcp", listen); err != nil {
		return err
	}
	if s.front, err = openDaemonFront(s.a, s.o.Socket, s.o.ExitWhenUnused, s.log); err != nil {
		return err
	}
	s.team = &guard.Team{}
	if err := s.setTeam(context.Background(), s.a.cfg); err != nil {
		return err
	}
	if err := s.setAudit(s.a.cfg); err != nil {
		return err
	}
	s.setLimits(s.a.cfg)
	if rs := s.replicas; rs != nil {
		rs.access = s.mcpAccess()
		rs.running = s.a.rt.Running
		rs.grants = s.a.fleet
		rs.admit, rs.audit = s.a.gw.Admit, s.a.gw.Audit
		rs.servers = func() []string {
			var names []string
			for _, srv := range s.a.fleet.Servers() {
				names = append(names, srv.Name())
			}
			return names
		}
		s.a.gw.SetStamper(rs)
	}
	if s.o.Token == "" && s.a.cfg.Auth == nil && !isLoopback(s.ln.Addr()) {
		s.log.Warn("listening beyond loopback without a bearer token: anyone who can reach this address can use every server", "listen", s.ln.Addr().String())
	}
	s.srv = s.routeAll()
	return nil
}

// openReplicas makes this replica's set from the config, if it has a
// replicas block: the app's hooks.
func (s *serving) openReplicas(cfg *config.Config) (*replicaHooks, error) {
	getenv := s.o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	rs, err := openReplicas(cfg, getenv, s.log)
	if err != nil || rs == nil {
		return nil, err
	}
	s.replicas = rs
	return &replicaHooks{
		place: func(cfg *config.Config) {
			if cfg.Replicas == nil {
				// A replica stays one until it restarts: the replica
				// settings in force place the new config's servers.
				s.log.Error("reload: the new config has no \"replicas\" block; the replica settings in force stay until a restart")
				cfg.Replicas = rs.cfg.Load()
			}
			place(cfg, rs.self.Ordinal)
		},
		gate:       rs.gate,
		peerClient: rs.peerClient(),
		peerGrant:  rs.peerGrant,
	}, nil
}

// adminAccess is the guard options of the admin routes, mcpAccess those
// of /mcp (a server's endpoint has its own Route).
func (s *serving) adminAccess() guard.Options {
	return guard.Options{Token: s.o.Token, Team: s.team, Route: guard.Route{Admin: true}}
}

func (s *serving) mcpAccess() guard.Options {
	o := s.adminAccess()
	o.Route = guard.Route{Path: "/mcp"}
	return o
}

// routeAll makes serve's HTTP server: every route behind one guard.
func (s *serving) routeAll() *http.Server {
	a, log := s.a, s.log
	// One guard for every route: the same Host, Origin and token checks
	// on /mcp, /servers/*, /api/*, /metrics, /healthz and any other path.
	// The MCP and admin handlers apply it themselves (the same options);
	// a route added here is wrapped in it. The probes, /livez and
	// /readyz, are the exception: a kubelet holds no token, and they
	// tell nothing but ok or not.
	access := s.adminAccess()
	g := guard.New(access)
	mcpAccess := s.mcpAccess()
	// One bound on client sessions across /mcp and every
	// /servers/{name}/mcp: the config's maxSessions.
	sessions := gateway.NewSessionLimit(a.cfg.MaxSessions)
	sessions.SetLogger(log)
	s.sessions = sessions
	opts := gateway.HTTPOptions{Access: mcpAccess, SessionLimit: sessions, Logger: log}
	mux := http.NewServeMux()
	s.aggregate = gateway.NewStreamableHandler(a.gw.Aggregate(), opts)
	// With tracing, a request's traceparent header is the parent of its
	// spans (its _meta's, if it has one, comes first).
	mcp := a.tracing.Handler(s.aggregate)
	mux.Handle("/mcp", mcp)
	// Each server's own endpoint, as the last reload left the servers;
	// any other name gets a 404 that says so, as a JSON-RPC error an MCP
	// client shows.
	s.routes = gateway.NewServerRouter(a.gw, opts, guard.New(mcpAccess).Wrap(unknownServer(a.fleet, a.gw.LocalRequests())))
	servers := a.tracing.Handler(s.routes)
	mux.Handle(gateway.ServerPattern, servers)
	s.rl = newReloader(a, s.o.ConfigFile, !s.o.NoLearn, func(cfg *config.Config, ap fleet.Applied) {
		a.gw.SetPageSize(cfg.PageSize)
		a.gw.SetHoldTimeout(cfg.HoldTimeout)
		a.gw.SetPolicy(cfg.Compiled)
		sessions.SetMax(cfg.MaxSessions)
		if err := s.setTeam(s.sd.Context(), cfg); err != nil {
			log.Error("reload: the new auth settings are not in force; the earlier ones are", "err", err)
		} else if s.o.Token == "" && cfg.Auth == nil && !isLoopback(s.ln.Addr()) {
			log.Warn("reload: listening beyond loopback with neither auth nor a bearer token: anyone who can reach this address can use every server", "listen", s.ln.Addr().String())
		}
		if err := s.setAudit(cfg); err != nil {
			log.Error("reload: the new audit settings are not in force; the earlier ones are", "err", err)
		}
		s.setLimits(cfg)
		if s.replicas != nil {
			s.replicas.reload(cfg)
		}
		a.gw.Reloaded()
		s.routes.Sync(ap.Removed)
	})
	api := admin.New(a.fleet, a.events, admin.Options{Access: access, Collisions: a.gw.Collisions, HeldCalls: a.gw.HeldCallsByServer,
		Clients:     a.gw.Clients,
		Local:       a.gw.LocalRequests(),
		Sessions:    sessions,
		Team:        s.teamStats,
		Containment: a.rt.Report().Layers,
		Logs: func(name string) *logbuf.Buffer {
			if srv := a.fleet.Get(name); srv != nil && srv.Config().Kind == config.KindStdio {
				// Lookup, never Get: a reload that removed the server
				// meanwhile closed its buffer, and a new one made here
				// would never be written to or closed (its followers
				// never told the end).
				return a.logs.Lookup(name)
			}
			return nil
		},
		Reload: func(ctx context.Context) (any, bool) {
			rep := s.rl.reload(ctx, "api", false)
			return rep, rep.Applied
		}})
	// RFC 9728 protected resource metadata (team identity only).
	mux.HandleFunc(authn.WellKnownResource, s.resourceMetadata)
	mux.HandleFunc(authn.WellKnownResource+"/", s.resourceMetadata)
	mux.Handle("/api/audit", g.Wrap(http.HandlerFunc(s.auditAPI)))
	mux.Handle("GET /api/replicas", g.Wrap(http.HandlerFunc(s.replicasAPI)))
	mux.Handle("/api/", api)
	mux.Handle("/metrics", api)
	// The redirect of a login the dashboard began: reached by the browser
	// without the token, found by its single-use state (admin.OAuthCallback).
	mux.HandleFunc("GET /oauth/callback", api.OAuthCallback)
	mux.Handle("/healthz", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })))
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /readyz", s.readyz)
	// The dashboard: GET / and its files under /ui/, behind the Host and
	// Origin checks (the page holds no data; what it shows comes from
	// /api/*, behind the token too). Any other path is a 404 behind the
	// whole guard.
	mux.Handle("/", dashboard.New(g, s.o.Token != "", g.Wrap(http.NotFoundHandler())))
	local := trimAfter(a.fleet, gateway.NewFront(mux, mcp, servers))
	s.local = local
	if s.replicas != nil {
		local = s.replicas.front(local)
	}
	return newHTTPServer(s.front.wrap(local), opts)
}

// replicasAPI serves GET /api/replicas: the whole deployment, each
// replica as it answers (bounded by ownerTimeout each, asked at once);
// none for a serve that is no replica.
func (s *serving) replicasAPI(w http.ResponseWriter, r *http.Request) {
	if s.replicas == nil {
		// No replica: a deployment of none (the dashboard asks every
		// serve, and hides the section).
		writeJSON(w, admin.Replicas{Self: -1})
		return
	}
	writeJSON(w, admin.Replicas{Self: s.replicas.self.Ordinal, Replicas: s.replicas.deployment(r.Context())})
}

// live is the liveness probe: the process serves HTTP. It never depends
// on a server.
func live(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }

// readyz is the readiness probe: the replica's own — its config loaded
// (it is, once serving), its peers known, not draining. A server that
// fails or waits for a login shows in /api and /metrics, never here: one
// bad server must not take every replica out of the Service.
func (s *serving) readyz(w http.ResponseWriter, _ *http.Request) {
	why := s.replicas.ready()
	if why == "" && s.sd.Context().Err() != nil {
		why = "shutting down"
	}
	if why != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: " + why + "\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// start starts what open built: the parent watch, the socket, the
// servers marked eager and learning, the reloads, the HTTP server.
func (s *serving) start() error {
	if s.o.ExitWithParent {
		wd, err := watchdog.Start(s.sd.Context(), watchdog.Config{OnTerminate: func(watchdog.Reason) { s.sd.Trigger("parent exited") }, Logger: s.log})
		if err != nil {
			return err
		}
		s.wd = wd
	}
	if err := s.front.start(s.sd, s.sessions, gateway.StdioOptions{Logger: s.log}); err != nil {
		return err
	}
	s.a.startEager(s.sd.Context(), !s.o.NoLearn)
	// Reloads: SIGHUP, a change of the config file, POST /api/reload
	// (mcpvisor reload) — one path, one at a time.
	hup := make(chan os.Signal, 1)
	s.stopHUP = notifyReload(hup)
	s.bg.Go(func() {
		for {
			select {
			case <-hup:
				s.rl.reload(s.sd.Context(), "signal", false)
			case <-s.sd.Context().Done():
				return
			}
		}
	})
	if !s.o.NoWatch {
		if err := s.rl.watch(s.sd.Context(), &s.bg); err != nil {
			s.log.Warn("not watching the config file: reload with SIGHUP or mcpvisor reload", "err", err)
		}
	}
	if s.replicas != nil {
		s.replicas.servePeers(s.sd.Context(), s.local)
	}
	s.bg.Go(func() {
		if err := serveHTTP(s.srv, s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server failed", "err", err)
			s.sd.Trigger("http server failed")
		}
	})
	return nil
}

// run waits for the shutdown and carries it out: stop accepting, end the
// client sessions, stop the servers.
func (s *serving) run() error {
	defer s.stopWatches()
	if s.replicas != nil {
		// A replica drains first: unready, serving what comes while the
		// balancer takes it out, then what is in flight finishes.
		<-s.sd.Context().Done()
		s.replicas.drain(context.Background())
	}
	return s.a.shutdown(s.sd, s.o.ShutdownTimeout, func(ctx context.Context) error {
		// Stop accepting, then end client sessions: requests in flight
		// are cancelled and answered with an error. The servers stop in
		// parallel meanwhile.
		front := make(chan struct{})
		go func() {
			defer close(front)
			_ = s.srv.Shutdown(ctx)
		}()
		if s.replicas != nil {
			// The listener is closed now: what was accepted before it
			// closed is answered before the endpoints close (bounded).
			s.replicas.waitIdle(ctx, time.Second)
			// What this replica relays for its clients ends with it: a
			// client's stream, relayed here, is opened again elsewhere.
			s.replicas.cutRelays()
		}
		s.aggregate.Close()
		s.routes.Close()
		s.front.close(ctx)
		err := s.a.close(ctx)
		// Live event streams have seen the servers stop; end them, so
		// that the HTTP server's shutdown can finish.
		s.a.events.Close()
		<-front
		// What serve started beside it has ended with the trigger and
		// the HTTP server's shutdown: a reload under way is over before
		// the team and the audit close (it could open an audit that
		// nothing would close).
		s.bg.Wait()
		s.closeTeam()
		if s.replicas != nil {
			// Before the audit: the lines of calls served for peers
			// that the peers did not take are written here.
			s.replicas.close(ctx)
		}
		s.closeAudit(ctx)
		return err
	})
}

// stopWatches ends the parent watch and the reload signal's delivery.
func (s *serving) stopWatches() {
	if s.wd != nil {
		s.wd.Stop()
	}
	if s.stopHUP != nil {
		s.stopHUP()
	}
}

// close undoes what open and start did, in reverse, when serve ends
// before serving: the one path of every error exit. What was not opened
// is skipped.
func (s *serving) close(ctx context.Context) {
	s.stopWatches()
	s.sd.Trigger("start-up failed") // ends what start began (reloads, the socket's sessions)
	if s.front != nil {
		s.front.close(ctx)
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
	// What start ran beside it ended with the trigger or the listener's
	// close; waited for before the team and the audit close, as run does.
	s.bg.Wait()
	if s.team != nil {
		s.closeTeam()
	}
	if s.replicas != nil {
		s.replicas.close(ctx)
	}
	if s.a != nil {
		s.closeAudit(ctx)
		if err := s.a.close(ctx); err != nil {
			s.log.Warn("closing after a failed start", "err", err)
		}
	}
	if s.tracing != nil {
		_ = s.tracing.Shutdown(ctx) // nothing exported yet
	}
	s.sd.Stop()
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// unknownServer answers a request to /servers/{name}/mcp for a name no
// server has: 404, with a JSON-RPC error that names the servers there are.
func unknownServer(f *fleet.Fleet, local *telemetry.Local) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local.RecordRefusal(telemetry.RefusedUnknownServer)
		m := &rpc.Message{ID: json.RawMessage("null"), Error: &rpc.Error{Code: rpc.InvalidRequest, Message: admin.NoSuchServer(f, r.PathValue("name"))}}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(append(m.Encode(), '\n'))
	})
}

// newHTTPServer is serve's HTTP server for h, whose gateway handlers
// have opts. Headers must arrive within 10 s and an idle keep-alive
// connection is closed after 2 min. A request's headers and body must
// arrive within the handlers' body bound: the server's ReadTimeout
// (HTTPOptions.ServerReadTimeout), which the handlers then leave to it.
// net/http lifts it once a body has been read to its end, or at once for
// a request without one, so it cuts no long request or event stream. (A
// handler that leaves a body unread and answers after the bound has its
// context ended and its connection closed after the answer: no route of
// serve's is such with the clients mcpvisor ships, which send actions
// without a body.) No server-wide WriteTimeout: it would cut long-lived
// event streams; each write has its own deadline.
func newHTTPServer(h http.Handler, opts gateway.HTTPOptions) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: opts.ServerReadTimeout(), IdleTimeout: 2 * time.Minute}
}

// serveHTTP serves srv on ln until srv shuts down. The deadlines of the
// connections — net/http's and the handlers', several a request — are
// kept by one goroutine for all of them (conndeadline), not a runtime
// timer each: under load that saves serve several percent of its CPU per
// call. The wrapper ends with the listener, which Serve closes.
func serveHTTP(srv *http.Server, ln net.Listener) error {
	return srv.Serve(conndeadline.NewListener(ln))
}

// trimAfter serves h and then asks f for a trim once things are quiet
// (fleet.TrimSoon): what a request left behind — the garbage of a large
// answer, the state file's pages a list read mapped in — is given back
// to the OS when the requests stop, not kept at the runtime's next
// collection goal for as long as mcpvisor stays idle.
// A probe (/healthz, /livez, /readyz) leaves nothing behind and asks for
// none.
func trimAfter(f *fleet.Fleet, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !probe(r.URL.Path) {
			defer f.TrimSoon()
		}
		h.ServeHTTP(w, r)
	})
}

// probe reports whether path is a health probe's.
func probe(path string) bool { return path == "/healthz" || path == "/livez" || path == "/readyz" }
