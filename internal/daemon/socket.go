package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/bridge"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/watchdog"
)

// SocketAuto is --socket's default: <state dir>/mcpvisor.sock, or a short
// path of the user's own where that is too long for a socket.
const SocketAuto = "auto"

// daemonFront is what makes serve the shared daemon of mcpvisor connect:
// a unix socket on which every connection is one client session, served
// by the stdio front as mcpvisor stdio serves its stdin and stdout (a
// byte copy for connect: no HTTP session, SSE or header translation, and
// the cheapest hop there is), and, with --exit-when-unused, the watchdog
// that ends the daemon once it has had no client for that long.
type daemonFront struct {
	a   *app
	log *slog.Logger
	ln  *bridge.Listener // nil: no socket

	// activity counts the clients: open socket connections and HTTP
	// requests in flight, whose ends restart the unused time.
	activity watchdog.Tracker
	sessions *gateway.SessionLimit // open HTTP sessions count as clients too
	unused   time.Duration

	cancel context.CancelFunc
	served chan struct{} // closed when the socket's sessions have all ended
	wd     *watchdog.Watchdog
	once   sync.Once
}

// openDaemonFront listens on the socket of --socket (SocketAuto: the
// state directory's; "" or "none": no socket). A live daemon's socket is
// never taken: another serve on it is an error that says so.
func openDaemonFront(a *app, socket string, unused time.Duration, log *slog.Logger) (*daemonFront, error) {
	d := &daemonFront{a: a, log: log, unused: unused}
	switch socket {
	case "", "none":
		return d, nil
	case SocketAuto:
		path, fallback, err := bridge.SocketPath(a.stateDir)
		if err != nil {
			return nil, fmt.Errorf("--socket: %w", err)
		}
		if fallback {
			log.Warn("the state directory's path is too long for a unix socket: the mcpvisor connect socket is elsewhere", "socket", path, "state_dir", a.stateDir)
		}
		socket = path
	}
	ln, err := bridge.Listen(socket)
	if errors.Is(err, bridge.ErrInUse) {
		return nil, fmt.Errorf("--socket %s: another mcpvisor serve is running on it (%w); stop it, or pass another --socket (or --socket none)", socket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("--socket %s: %w", socket, err)
	}
	d.ln = ln
	return d, nil
}

// wrap counts every request to h as activity but the probes and /metrics:
// a probe or a scrape is no client, and a monitor scraping every 15 s
// would keep an auto-started daemon up forever. (A dashboard's or the
// CLI's request counts.)
func (d *daemonFront) wrap(h http.Handler) http.Handler {
	if d.unused <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probe(r.URL.Path) || r.URL.Path == "/metrics" {
			h.ServeHTTP(w, r)
			return
		}
		d.activity.Begin()
		defer d.activity.End()
		h.ServeHTTP(w, r)
	})
}

// start serves the socket and starts the unused watchdog, which triggers
// sd once nothing — no socket connection, no HTTP request, none of
// sessions — has been open for --exit-when-unused.
func (d *daemonFront) start(sd *shutdown.Shutdown, sessions *gateway.SessionLimit, stdio gateway.StdioOptions) error {
	d.sessions = sessions
	if d.unused > 0 {
		wd, err := watchdog.Start(sd.Context(), watchdog.Config{
			IdleTimeout: d.unused,
			State: func() (time.Time, int) {
				last, n := d.activity.Snapshot()
				return last, n + d.sessions.Open()
			},
			// Started detached by connect, whose exit is no reason to go:
			// orphan detection off.
			OriginalPPID: 1,
			PollInterval: d.unused,
			OnTerminate:  func(watchdog.Reason) { sd.Trigger("no client for " + d.unused.String()) },
			Logger:       d.log,
		})
		if err != nil {
			return err
		}
		d.wd = wd
	}
	if d.ln == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.served = cancel, make(chan struct{})
	srv := &bridge.Server{Open: d.open(stdio), Activity: &d.activity, Logger: d.log}
	go func() {
		defer close(d.served)
		_ = srv.Serve(ctx, d.ln)
	}()
	return nil
}

// open resolves a connection's preface to its session: the aggregated
// endpoint, or the one server it names, in a place under the config's
// maxSessions, the bound the HTTP sessions are under (a connect is a
// client session as an HTTP one is), by the same rule: at the bound the
// least recently active session with no request in flight — HTTP or
// socket — is evicted to make room, and the connection is refused,
// saying so, only when none can be (gateway.SessionLimit). An evicted
// socket session is told why and its connection closes
// (gateway.StdioOptions.Place): mcpvisor connect then exits 1. Each
// session counts its requests in flight (passed on to the daemon's
// activity): the client's EOF, which connect passes on as it closes its
// write side, ends the session only once their answers are written
// (bounded by bridge.DefaultFlushTimeout, connect's own wait for them).
func (d *daemonFront) open(stdio gateway.StdioOptions) func(bridge.Hello) (bridge.Session, func(), error) {
	return func(h bridge.Hello) (bridge.Session, func(), error) {
		ep := d.a.gw.Aggregate()
		if h.Server != "" {
			if ep = d.a.gw.Single(h.Server); ep == nil {
				return nil, nil, errors.New(admin.NoSuchServer(d.a.fleet, h.Server))
			}
		}
		var place *gateway.Place
		if d.sessions != nil {
			var err error
			if place, err = d.sessions.AdmitConn(); err != nil {
				return nil, nil, err
			}
		}
		opts := stdio
		opts.ClientHint = h.Client // the program that launched connect
		if h.PeerKnown {
			opts.Identity = localIdentity(h.PeerUID)
		}
		opts.Place = place
		release := func() {}
		if place != nil {
			release = place.Release
		}
		return func(ctx context.Context, r io.Reader, w io.Writer) error {
			inflight := &bridge.InFlight{Next: &d.activity}
			opts.Activity = inflight
			return opts.Serve(ctx, ep, inflight.HoldEOF(ctx, r, bridge.DefaultFlushTimeout), w)
		}, release, nil
	}
}

// socket is the socket's path, or "".
func (d *daemonFront) socket() string {
	if d.ln == nil {
		return ""
	}
	return d.ln.Path()
}

// close stops the watchdog, stops accepting, ends every socket session
// (requests in flight are cancelled and answered with an error) and waits
// for them, bounded by ctx. Safe to call more than once.
func (d *daemonFront) close(ctx context.Context) {
	d.once.Do(func() {
		if d.wd != nil {
			d.wd.Stop()
		}
		if d.ln == nil {
			return
		}
		if d.cancel == nil { // never started
			_ = d.ln.Close()
			return
		}
		d.cancel()
		select {
		case <-d.served:
		case <-ctx.Done():
		}
		_ = d.ln.Close()
	})
}
