package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
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

func newServeCmd() *cobra.Command {
	var (
		rf                runFlags
		listen, tokenFile string
		exitWithParent    bool
		noWatch           bool
		socket            string
		exitWhenUnused    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--listen 127.0.0.1:7331]",
		Short: "Serve the configured MCP servers over Streamable HTTP",
		Long: `Serve every configured server as one MCP endpoint at /mcp (tools and prompts
named {server}__{name}), and each server alone at /servers/{name}/mcp, over
Streamable HTTP. Servers start on first use and sleep when idle. The bearer
token, if any, comes from --token-file or the MCPVISOR_TOKEN environment
variable. GET /api/servers reports every server's state (mcpvisor ps); GET /
is a dashboard of them, live.

SIGHUP, a change of the config file (unless --no-watch) and mcpvisor reload
reload the configuration: a file with errors changes nothing; a valid one is
applied server by server, leaving unchanged servers untouched.

The first SIGINT or SIGTERM stops accepting requests, ends client sessions
and stops every server in parallel within --shutdown-timeout (exit 0); a
second signal, or the timeout, kills every server at once (exit 3).

serve also listens on a unix socket (--socket; by default mcpvisor.sock in
the state directory, mode 0600) for mcpvisor connect: each connection is
one client session, served as mcpvisor stdio serves its stdin and stdout.
A socket a live serve holds is never taken; a dead one's is replaced.
--exit-when-unused (which mcpvisor connect sets on a daemon it starts)
shuts serve down once it has had no client for that long: no socket
connection, no HTTP request or session.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := rf.log.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return usageError{Err: err}
			}
			token := os.Getenv("MCPVISOR_TOKEN")
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					return usageError{Err: fmt.Errorf("--token-file %s is empty", tokenFile)}
				}
			}
			tr, err := newTracing(rf.otlpEndpoint)
			if err != nil {
				return err
			}
			sd := shutdown.New()
			a, err := openApp(rf.configFile, rf.stateDir, log)
			if err != nil {
				_ = tr.Shutdown(context.Background()) // nothing exported yet
				return err
			}
			a.setTracing(tr)
			if listen == "" {
				listen = a.cfg.Listen
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				_ = a.close(context.Background())
				return err
			}
			daemon, err := openDaemonFront(a, socket, exitWhenUnused, log)
			if err != nil {
				_ = ln.Close()
				_ = a.close(context.Background())
				return err
			}
			if token == "" && !isLoopback(ln.Addr()) {
				log.Warn("listening beyond loopback without a bearer token: anyone who can reach this address can use every server", "listen", ln.Addr().String())
			}
			// One guard for every route: the same Host, Origin and
			// token checks on /mcp, /servers/*, /api/*, /metrics,
			// /healthz and any other path. The MCP and admin handlers
			// apply it themselves (the same options); a route added here
			// is wrapped in it.
			access := guard.Options{Token: token}
			g := guard.New(access)
			// One bound on client sessions across /mcp and every
			// /servers/{name}/mcp: the config's maxSessions.
			sessions := gateway.NewSessionLimit(a.cfg.MaxSessions)
			sessions.SetLogger(log)
			opts := gateway.HTTPOptions{Access: access, SessionLimit: sessions, Logger: log}
			mux := http.NewServeMux()
			aggregate := gateway.NewStreamableHandler(a.gw.Aggregate(), opts)
			// With tracing, a request's traceparent header is the parent
			// of its spans (its _meta's, if it has one, comes first).
			mcp := tr.Handler(aggregate)
			mux.Handle("/mcp", mcp)
			// Each server's own endpoint, as the last reload left the
			// servers; any other name gets a 404 that says so, as a
			// JSON-RPC error an MCP client shows.
			routes := gateway.NewServerRouter(a.gw, opts, g.Wrap(unknownServer(a.fleet, a.gw.LocalRequests())))
			servers := tr.Handler(routes)
			mux.Handle(gateway.ServerPattern, servers)
			rl := newReloader(a, rf.configFile, !rf.noLearn, func(cfg *config.Config, ap fleet.Applied) {
				a.gw.SetPageSize(cfg.PageSize)
				a.gw.SetHoldTimeout(cfg.HoldTimeout)
				sessions.SetMax(cfg.MaxSessions)
				a.gw.Reloaded()
				routes.Sync(ap.Removed)
			})
			api := admin.New(a.fleet, a.events, admin.Options{Access: access, Collisions: a.gw.Collisions, HeldCalls: a.gw.HeldCallsByServer,
				Clients:     a.gw.Clients,
				Local:       a.gw.LocalRequests(),
				Sessions:    sessions,
				Containment: a.rt.Report().Layers,
				Logs: func(name string) *logbuf.Buffer {
					if s := a.fleet.Get(name); s != nil && s.Config().Kind == config.KindStdio {
						// Lookup, never Get: a reload that removed the
						// server meanwhile closed its buffer, and a new
						// one made here would never be written to or
						// closed (its followers never told the end).
						return a.logs.Lookup(name)
					}
					return nil
				},
				Reload: func(ctx context.Context) (any, bool) {
					rep := rl.reload(ctx, "api", false)
					return rep, rep.Applied
				}})
			mux.Handle("/api/", api)
			mux.Handle("/metrics", api)
			mux.Handle("/healthz", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })))
			// The dashboard: GET / and its files under /ui/, behind the
			// Host and Origin checks (the page holds no data; what it
			// shows comes from /api/*, behind the token too). Any other
			// path is a 404 behind the whole guard.
			mux.Handle("/", dashboard.New(g, token != "", g.Wrap(http.NotFoundHandler())))
			srv := newHTTPServer(daemon.wrap(trimAfter(a.fleet, gateway.NewFront(mux, mcp, servers))), opts)

			if exitWithParent {
				wd, err := watchdog.Start(sd.Context(), watchdog.Config{OnTerminate: func(r watchdog.Reason) { sd.Trigger("parent exited") }, Logger: log})
				if err != nil {
					daemon.close(context.Background())
					_ = ln.Close()
					_ = a.close(context.Background())
					return err
				}
				defer wd.Stop()
			}
			if err := daemon.start(sd, sessions, gateway.StdioOptions{Logger: log}); err != nil {
				daemon.close(context.Background())
				_ = ln.Close()
				_ = a.close(context.Background())
				return err
			}
			a.startEager(sd.Context(), !rf.noLearn)
			// Reloads: SIGHUP, a change of the config file, POST
			// /api/reload (mcpvisor reload) — one path, one at a time.
			hup := make(chan os.Signal, 1)
			defer notifyReload(hup)()
			go func() {
				for {
					select {
					case <-hup:
						rl.reload(sd.Context(), "signal", false)
					case <-sd.Context().Done():
						return
					}
				}
			}()
			if !noWatch {
				if err := rl.watch(sd.Context()); err != nil {
					log.Warn("not watching the config file: reload with SIGHUP or mcpvisor reload", "err", err)
				}
			}
			go func() {
				if err := serveHTTP(srv, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("http server failed", "err", err)
					sd.Trigger("http server failed")
				}
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "mcpvisor: serving %d servers at http://%s/mcp\n", len(a.fleet.Servers()), ln.Addr())
			if p := daemon.socket(); p != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "mcpvisor: mcpvisor connect socket at %s\n", p)
			}

			return a.shutdown(sd, rf.shutdownTimeout, func(ctx context.Context) error {
				// Stop accepting, then end client sessions: requests in
				// flight are cancelled and answered with an error. The
				// servers stop in parallel meanwhile.
				front := make(chan struct{})
				go func() {
					defer close(front)
					_ = srv.Shutdown(ctx)
				}()
				aggregate.Close()
				routes.Close()
				daemon.close(ctx)
				err := a.close(ctx)
				// Live event streams have seen the servers stop; end
				// them, so that the HTTP server's shutdown can finish.
				a.events.Close()
				<-front
				return err
			})
		},
	}
	rf.add(cmd)
	cmd.Flags().StringVar(&listen, "listen", "", "listen address (default from the config, else 127.0.0.1:7331)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token clients must send")
	cmd.Flags().BoolVar(&exitWithParent, "exit-with-parent", false, "shut down when the process that started mcpvisor exits")
	cmd.Flags().BoolVar(&noWatch, "no-watch", false, "do not reload when the config file changes (SIGHUP and mcpvisor reload still do)")
	cmd.Flags().StringVar(&socket, "socket", socketAuto, `unix socket for mcpvisor connect ("auto": mcpvisor.sock in the state directory; "" or "none": no socket)`)
	cmd.Flags().DurationVar(&exitWhenUnused, "exit-when-unused", 0, "shut down after this long without a client (0: never; set by mcpvisor connect on a daemon it starts)")
	return cmd
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
// A probe (/healthz) leaves nothing behind and asks for none.
func trimAfter(f *fleet.Fleet, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			defer f.TrimSoon()
		}
		h.ServeHTTP(w, r)
	})
}
