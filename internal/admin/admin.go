// Package admin serves mcpvisor's status API on the serve listener:
// GET /api/servers (every server's state), GET /api/servers/{name} (one
// server in detail), GET /api/servers/{name}/tools (its cached tools),
// GET /api/servers/{name}/logs (its recent stderr lines, or a live
// Server-Sent Events stream of them), GET /api/events (recent
// lifecycle events, or a live Server-Sent Events stream of them) and
// GET /metrics (Prometheus text format); and the operator's actions:
// POST /api/servers/{name}/restart|stop|start|sleep|refresh, POST
// /api/servers/{name}/approve (held tools) and POST /api/reload; and the
// dashboard, GET / (package dashboard), on the same listener.
package admin

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// Servers is the body of GET /api/servers.
type Servers struct {
	Servers []fleet.Status `json:"servers"`
	Totals  Totals         `json:"totals"`
	// Collisions are the names of the aggregated endpoint that more than
	// one server exports, and which server serves each.
	Collisions []string `json:"collisions,omitempty"`
	// HeldCalls counts, per server, the calls held for a modern client's
	// retry (multi round-trip requests): each holds its server's call open,
	// or, once the server answered, its answer until the retry takes it.
	HeldCalls map[string]int `json:"heldCalls,omitempty"`
}

// Totals counts servers: running ones are active, dormant ones hold no
// process, and ByState has every state.
type Totals struct {
	Total   int            `json:"total"`
	Active  int            `json:"active"`
	Dormant int            `json:"dormant"`
	ByState map[string]int `json:"byState"`
	// MemoryBytes sums the servers' memory (Linux).
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
}

// Snapshot builds the status of every server of f, with what each
// server's running process trees use (per-session ones and pid-namespace
// inits included): memory, peak memory, CPU time and tasks, from each
// tree's cgroup leaf where it has the counter, else from /proc (one pass
// over /proc for all of them; Linux), and the clients that used each as
// clients lists them (Options.Clients; nil: none known).
func Snapshot(f *fleet.Fleet, clients func(*fleet.Server) []clientbook.Use) Servers {
	out := Servers{}
	out.Totals = eachStatus(f, clients, func(st *fleet.Status) error {
		out.Servers = append(out.Servers, *st)
		return nil
	})
	return out
}

// eachStatus calls fn with the status of every server of f in turn, as
// Snapshot has it, and returns their totals, without holding every
// status at once (GET /api/servers streams them). Each server's usage is
// read first, for all servers in one pass, then its status. It stops at
// fn's first error.
func eachStatus(f *fleet.Fleet, clients func(*fleet.Server) []clientbook.Use, fn func(*fleet.Status) error) Totals {
	tot := Totals{ByState: map[string]int{}}
	servers := f.Servers()
	// Only running servers have roots: servers[at[k]]'s are
	// roots[ends[k-1]:ends[k]] (from 0 for k = 0).
	var roots []proc.Root
	var at, ends []int
	for i, s := range servers {
		if r := s.Roots(); len(r) > 0 {
			roots = append(roots, r...)
			at, ends = append(at, i), append(ends, len(roots))
		}
	}
	usage, _ := proc.TreeUsage(roots)
	k, from := 0, 0
	for i, s := range servers {
		st := s.Status()
		if clients != nil {
			st.Clients = clients(s)
		}
		var u proc.Usage
		if k < len(at) && at[k] == i {
			for _, x := range usage[from:ends[k]] {
				u.Add(x)
			}
			from = ends[k]
			k++
		}
		setUsage(&st, u)
		tot.Total++
		tot.ByState[st.State]++
		switch st.State {
		case "running", "degraded", "starting", "restarting":
			tot.Active++
		case "dormant":
			tot.Dormant++
		}
		tot.MemoryBytes += st.MemoryBytes
		if err := fn(&st); err != nil {
			break
		}
	}
	return tot
}

// setUsage puts u in st.
func setUsage(st *fleet.Status, u proc.Usage) {
	st.MemoryBytes, st.MemoryPeakBytes, st.CPUSeconds, st.PIDs = u.MemoryBytes, u.MemoryPeakBytes, u.CPUSeconds, u.Tasks
	if st.Limits != nil && u.ChargedBytes != 0 {
		l := *st.Limits // the status's own copy
		l.ChargedBytes = u.ChargedBytes
		st.Limits = &l
	}
}

// DefaultWriteTimeout is the default of Options.WriteTimeout.
const DefaultWriteTimeout = 10 * time.Second

// Options configure the handler.
type Options struct {
	// Access is checked on every route before anything else, by the same
	// guard as /mcp (package guard): Host and Origin (403), then the
	// bearer token if one is set (401).
	Access guard.Options
	// WriteTimeout bounds every write to a client: a whole reply, or one
	// write of the live event stream. A client that has not taken it by
	// then has stopped reading and is dropped. 0 or negative means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Collisions, if set, lists the aggregated endpoint's name
	// collisions for /api/servers.
	Collisions func() []string
	// HeldCalls, if set, counts the calls held for a modern client's
	// retry, per server, for /api/servers and /metrics.
	HeldCalls func() map[string]int
	// Clients, if set, lists the clients whose requests reached a
	// server (the gateway's client book, Gateway.Clients), for
	// /api/servers, /api/servers/{name} and /metrics.
	Clients func(*fleet.Server) []clientbook.Use
	// Local, if set, counts the client requests the gateway answered
	// itself, for /metrics (mcpvisor_gateway_requests_total).
	Local *telemetry.Local
	// Sessions, if set, is the bound on client sessions (maxSessions),
	// for /metrics: the places held, the bound, and the sessions evicted
	// by reason.
	Sessions SessionStats

	// Team, if set, reports the audit's, the rate limits' and the
	// policy's counts for /metrics.
	Team func() TeamStats
	// Logs, if set, returns the stderr buffer of the configured server
	// name (it is asked only for names the fleet has), for
	// /api/servers/{name}/logs; nil, or a nil buffer, means its logs are
	// not kept (a 404 that says so).
	Logs func(name string) *logbuf.Buffer
	// Reload, if set, serves POST /api/reload.
	Reload ReloadFunc
	// Containment is the containment layers of the process runtime that
	// runs the stdio servers' processes (proc.Runtime.Report), on and
	// off, for GET /api/servers/{name}; nil: not known, not shown.
	Containment []proc.Layer
}

// SessionStats is what /metrics reports of the bound on client sessions
// (a *gateway.SessionLimit).
type SessionStats interface {
	// Open is the places held: client sessions and listen streams.
	Open() int
	// Max is the bound.
	Max() int
	// EachEviction calls fn with each reason's label and count.
	EachEviction(fn func(reason string, n uint64))
}

// Handler serves /api/servers, /api/events and /metrics.
type Handler struct {
	f         *fleet.Fleet
	opts      Options
	guard     *guard.Guard
	streams   atomic.Int64 // live event and log streams
	mux       *http.ServeMux
	log       *EventLog
	dashFlows dashboardFlows // logins the dashboard began (login.go)
	closed    chan struct{}  // closed by Close
	closeOnce sync.Once
}

// New returns the admin API over f; events are read from log (may be nil).
func New(f *fleet.Fleet, log *EventLog, opts Options) *Handler {
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	h := &Handler{f: f, opts: opts, guard: guard.New(opts.Access), mux: http.NewServeMux(), log: log, closed: make(chan struct{})}
	h.mux.HandleFunc("GET /api/servers", h.servers)
	h.mux.HandleFunc("GET /api/servers/{name}", h.detail)
	h.mux.HandleFunc("GET /api/servers/{name}/tools", h.tools)
	h.mux.HandleFunc("GET /api/servers/{name}/logs", h.logs)
	h.mux.HandleFunc("GET /api/servers/{name}/definitions/diff", h.definitionsDiff)
	h.mux.HandleFunc("POST /api/servers/{name}/approve", h.approve)
	h.mux.HandleFunc("POST /api/servers/{name}/definitions/accept-lost", h.acceptLost)
	h.mux.HandleFunc("POST /api/servers/{name}/{action}", h.action)
	h.mux.HandleFunc("POST /api/reload", h.reload)
	h.loginRoutes()
	h.mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, r *http.Request) {
		if wantsStream(r) {
			h.streamEvents(w, r)
			return
		}
		h.writeJSON(w, map[string]any{"events": h.log.Events()})
	})
	h.mux.HandleFunc("GET /metrics", h.metrics)
	return h
}

// Close ends every live stream, event and log streams alike, now and
// later (as closing the event log ends the event streams), so that the
// HTTP server can shut down; the other routes are still served.
func (h *Handler) Close() { h.closeOnce.Do(func() { close(h.closed) }) }

// ServeHTTP serves the routes above, to the requests the guard allows.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A POST acts on the fleet: for the dashboard, on this listener's own
	// origin, and for clients that send no Origin (the CLI).
	if h.guard.AllowChange(w, r) {
		h.mux.ServeHTTP(w, r)
	}
}

// writeJSON replies with v, indented.
func (h *Handler) writeJSON(w http.ResponseWriter, v any) { h.writeStatusJSON(w, http.StatusOK, v) }

// writeStatusJSON replies with status and v, indented.
func (h *Handler) writeStatusJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	h.reply(w, append(b, '\n'))
}

// reply writes a whole reply under a deadline of WriteTimeout: a client
// that does not take it by then is dropped. (net/http's final flush runs
// under the same deadline, and lifts it before the connection's next
// request.)
func (h *Handler) reply(w http.ResponseWriter, b []byte) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	_, _ = w.Write(b)
}
