package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// The Streamable HTTP server side of MCP 2025-11-25 (basic/transports),
// driving an Endpoint.
//
// POST carries one JSON-RPC message (or, for a session at 2025-03-26, a
// batch of them: see serveBatch). A notification or a response is
// handed to the endpoint and answered 202 Accepted. A request is answered
// with application/json when its response is known before any message
// related to it (the common case: no SSE framing, no extra goroutine); the
// first related message (progress, logging, a server-to-client request)
// upgrades the reply to text/event-stream, on which the related messages
// and then the response are sent as events, after which the stream ends.
//
// GET opens the session's stream for messages related to no request (the
// Sink given to Endpoint.Open). A session has at most one: a new GET
// replaces the open one, which ends (a client that lost its connection
// reconnects at once instead of being refused until the server notices the
// old one is dead). Such messages are numbered and kept in a ring of
// HTTPOptions.EventBuffer per session whether or not a stream is open; a
// GET delivers those its session has not yet written to a stream, or with
// Last-Event-ID those after that event. A message pushed out of a full
// ring before any stream took it is dropped and counted (Dropped).
//
// Every request passes the guard (Host, Origin, token) first. A POST body
// is bounded in size (MaxBodyBytes) and in time (BodyTimeout), sessions in
// number (MaxSessions), and every write to a client in time
// (WriteTimeout): a client that stops reading is dropped.
//
// Event ids are "<stream>_<n>": stream 0 is the session's GET stream,
// 1, 2, ... its POST streams. A POST stream cannot be resumed — its request
// is cancelled when the client goes away — so a GET with the Last-Event-ID
// of one gets an empty stream that ends at once (a client waiting for that
// request's response learns that it will not come).
//
// The front reads in the order a request meets it: front.go routes /mcp
// and /servers/{name}/mcp to a handler; http.go is the handler, its
// options and ServeHTTP (the guard, the method); http_post.go serves a
// POST (its Accept header, its era, its body, its session);
// http_modern.go and paramheaders.go check a 2026-07-28 request;
// http_reply.go writes the reply, JSON or an event stream, and holds the
// writers every stream uses; http_session.go is a legacy session's GET
// stream, its DELETE, and the table of sessions with their expiry;
// http_refuse.go turns requests away. batch.go holds what the HTTP and
// stdio fronts share of JSON-RPC batches.

// Header names, in canonical form so that header maps can be indexed
// directly.
const (
	hdrSessionID       = "Mcp-Session-Id"
	hdrProtocolVersion = "Mcp-Protocol-Version"
	hdrMethod          = "Mcp-Method"
	hdrName            = "Mcp-Name"
	hdrLastEventID     = "Last-Event-Id"
	hdrAccept          = "Accept"
	hdrContentType     = "Content-Type"
)

// Shared header values; net/http only reads them.
var (
	hvJSON    = []string{"application/json"}
	hvSSE     = []string{"text/event-stream"}
	hvNoCache = []string{"no-cache, no-transform"}
	hvNoBuf   = []string{"no"}
	hvText    = []string{"text/plain; charset=utf-8"}
	hvNoSniff = []string{"nosniff"}
	hvClose   = []string{"close"}
)

// HTTP option defaults.
const (
	DefaultSessionTimeout = 30 * time.Minute
	DefaultMaxBodyBytes   = 16 << 20
	DefaultEventBuffer    = 256
	DefaultKeepAlive      = 25 * time.Second
	DefaultBodyTimeout    = 30 * time.Second
	DefaultMaxSessions    = 1000
	DefaultWriteTimeout   = 30 * time.Second
)

// HTTPOptions configures a StreamableHandler. The zero value is usable.
type HTTPOptions struct {
	// Access is checked before anything else, by the same guard as every
	// other route of mcpvisor (package guard): DNS-rebinding protection by
	// Host and Origin (403), then the bearer token if one is set (401).
	Access guard.Options

	// MaxSessions bounds the sessions open at once, and 2026-07-28
	// subscriptions/listen streams with them. At the bound an initialize
	// or a listen makes room: the least recently active session with no
	// request in flight is evicted (its next request gets 404, which
	// tells its client to initialize again); only when every session has
	// a request in flight (a listen is one) is it refused, with 503 and a
	// JSON-RPC error naming the limit. See SessionLimit for what counts
	// as activity. 0 or negative means DefaultMaxSessions: the number is
	// never unbounded. Ignored when SessionLimit is set.
	MaxSessions int

	// SessionLimit, if set, is a bound shared with other handlers
	// (mcpvisor serve shares one between /mcp and every
	// /servers/{name}/mcp), in place of MaxSessions.
	SessionLimit *SessionLimit

	// SessionTimeout is how long a session may stay idle (no request in
	// flight, no GET stream open) before it is closed; its id then gets
	// 404. A session that has sent nothing since initialize — no request
	// and no response: notifications (notifications/initialized among
	// them) and GET streams do not count — is closed
	// UnusedSessionTimeout (one minute) after it, or after SessionTimeout
	// if that is shorter, GET stream open or not. 0 means
	// DefaultSessionTimeout; negative, never (neither).
	SessionTimeout time.Duration

	// MaxBodyBytes limits a POST body: a longer one gets 413 with a
	// JSON-RPC error naming the limit. The body is read as it arrives,
	// never into a buffer sized by what Content-Length claims. 0 means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// BodyTimeout bounds the time a POST body takes to arrive, from the
	// moment the handler starts reading it: a body not complete by then
	// (a client that trickles it, or stops) gets 408 with a JSON-RPC
	// error and the connection is closed. 0 or negative means
	// DefaultBodyTimeout. An http.Server whose ReadTimeout is positive
	// and no longer than BodyTimeout bounds the body itself (from the
	// request's first byte, headers included); the handler then sets no
	// deadline of its own, which saves each request a change of the
	// runtime poller's timer. ServerReadTimeout is that ReadTimeout;
	// mcpvisor serve's server has it.
	BodyTimeout time.Duration

	// EventBuffer is how many events a stream keeps: per session, the
	// messages of its GET stream kept for delivery and resumption; per
	// POST stream, the related messages queued for writing. 0 means
	// DefaultEventBuffer.
	EventBuffer int

	// WriteTimeout bounds every write to a client: a JSON reply, and each
	// write of an event stream (a POST's reply, a GET stream, their
	// pings). A client that has not taken a write within it is dropped:
	// the stream ends and the connection closes, and a stalled GET stream
	// closes its session as well (its client cannot be reached). A write
	// of more than 256 KiB gets the time for each 256 KiB, so that a slow
	// client that keeps reading is not cut off. 0 or negative means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration

	// KeepAlive is the interval of ": ping" comments on open event
	// streams. 0 means DefaultKeepAlive; negative, none.
	KeepAlive time.Duration

	// Logger receives the transport's diagnostics (nil: discarded).
	Logger *slog.Logger
}

// ServerReadTimeout is the ReadTimeout for the http.Server that serves
// handlers with these options: their body bound (BodyTimeout, or its
// default). The handlers then leave each body's deadline to the server.
func (o HTTPOptions) ServerReadTimeout() time.Duration { return o.bodyTimeout() }

// bodyTimeout is BodyTimeout with its default.
func (o HTTPOptions) bodyTimeout() time.Duration {
	if o.BodyTimeout <= 0 {
		return DefaultBodyTimeout
	}
	return o.BodyTimeout
}

// Errors returned by the Sinks of a StreamableHandler.
var (
	// ErrSessionClosed: the session has ended.
	ErrSessionClosed = errors.New("gateway: session closed")
	// ErrStreamClosed: the request's stream has ended or its client is
	// gone.
	ErrStreamClosed = errors.New("gateway: stream closed")
	// ErrNoStream: the client did not accept text/event-stream, so
	// nothing but the response can reach it.
	ErrNoStream = errors.New("gateway: client accepts no event stream")
	// ErrStreamFull: the request's stream has EventBuffer messages not
	// yet written.
	ErrStreamFull = errors.New("gateway: stream buffer full")
)

// StreamableHandler serves an Endpoint over MCP Streamable HTTP. It is an
// http.Handler for the MCP endpoint path.
type StreamableHandler struct {
	ep Endpoint
	// gw is ep's gateway, which counts what the handler refuses before ep
	// sees it (nil: an endpoint of no gateway, nothing is counted).
	gw *Gateway
	// modern0 is the session every modern request's stream is written
	// for: none of its own (no id, no events kept, no stream numbers).
	modern0 *httpSession
	// held are the calls held for its modern clients' retries: they end
	// at Close.
	held      heldFront
	log       *slog.Logger
	timeout   time.Duration
	maxBody   int64
	bodyWait  time.Duration
	evBuf     int
	keepAlive time.Duration
	guard     *guard.Guard
	limit     *SessionLimit
	ownLimit  bool // limit is the handler's own (not HTTPOptions.SessionLimit)
	writeWait time.Duration
	grace     time.Duration // left to streams to end once the handler closes

	life context.Context // cancelled by Close
	stop context.CancelFunc
	// modern holds the cancels of the 2026-07-28 requests being served,
	// which have no session for Close to end: Close cancels them.
	modern [modernShards]modernShard
	seq    atomic.Uint32

	// unused is how long a session that has sent nothing since
	// initialize lives (0: as long as any other).
	unused time.Duration

	mu       sync.RWMutex
	sessions map[string]*httpSession
	closed   bool
	timer    *time.Timer
	timerDue time.Time // when timer fires; zero while it is not armed
	sweeps   sync.WaitGroup

	dropped atomic.Uint64
}

// NewStreamableHandler returns a handler serving ep.
func NewStreamableHandler(ep Endpoint, opts HTTPOptions) *StreamableHandler {
	h := &StreamableHandler{
		ep:        ep,
		gw:        gatewayOf(ep),
		log:       opts.Logger,
		timeout:   opts.SessionTimeout,
		maxBody:   opts.MaxBodyBytes,
		bodyWait:  opts.bodyTimeout(),
		evBuf:     opts.EventBuffer,
		keepAlive: opts.KeepAlive,
		guard:     guard.New(opts.Access),
		limit:     opts.SessionLimit,
		writeWait: opts.WriteTimeout,
		sessions:  make(map[string]*httpSession),
	}
	h.modern0 = &httpSession{h: h}
	h.life, h.stop = context.WithCancel(context.Background())
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.timeout == 0 {
		h.timeout = DefaultSessionTimeout
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.limit == nil {
		h.limit, h.ownLimit = NewSessionLimit(opts.MaxSessions), true
		h.limit.SetLogger(h.log)
	}
	if h.timeout > 0 {
		h.unused = min(UnusedSessionTimeout, h.timeout)
	}
	if h.evBuf <= 0 {
		h.evBuf = DefaultEventBuffer
	}
	if h.keepAlive == 0 {
		h.keepAlive = DefaultKeepAlive
	}
	if h.writeWait <= 0 {
		h.writeWait = DefaultWriteTimeout
	}
	h.grace = min(closeGrace, h.writeWait)
	return h
}

// ServeHTTP implements http.Handler.
func (h *StreamableHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r, status := h.guard.Admit(w, r)
	if status != 0 {
		h.log.Debug("http: refused", "status", status)
		if h.gw != nil {
			reason := telemetry.RefusedForbidden
			if status == http.StatusUnauthorized || status == http.StatusBadRequest || status == http.StatusServiceUnavailable {
				reason = telemetry.RefusedUnauthorized
			}
			h.gw.refusedHTTP(reason)
		}
		return
	}
	switch r.Method {
	case http.MethodPost:
		if h.shed(w, r) {
			return
		}
		h.servePOST(w, r)
	case http.MethodGet:
		h.serveGET(w, r)
	case http.MethodDelete:
		h.serveDELETE(w, r)
	default:
		h.gw.refusedHTTP(telemetry.RefusedMethod)
		w.Header()["Allow"] = []string{"GET, POST, DELETE"}
		plainError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
	}
}

// Sessions reports the number of open sessions.
func (h *StreamableHandler) Sessions() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.sessions)
}

// Dropped reports how many messages related to no request were dropped
// from a full session buffer before any GET stream delivered them.
func (h *StreamableHandler) Dropped() uint64 { return h.dropped.Load() }

// Close ends every session: their GET streams end and the endpoint's Close
// is called for each. New sessions are refused afterwards (503). Requests
// in flight finish as the endpoint answers them (Close cancels them), and
// the calls held for modern clients' retries end (the server's call is
// cancelled: no retry can come). An
// event stream blocked on a client that stopped reading is given
// min(1 s, WriteTimeout) more, then ends, so that no client can hold up
// the HTTP server's graceful shutdown; a JSON reply being written is
// bounded by WriteTimeout.
func (h *StreamableHandler) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.stop()
	for i := range h.modern {
		sh := &h.modern[i]
		sh.mu.Lock()
		sh.closed = true
		for _, cancel := range sh.m {
			cancel(errHandlerClosed)
		}
		sh.mu.Unlock()
	}
	all := h.sessions
	h.sessions = make(map[string]*httpSession)
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.sweeps.Wait() // a sweep that had started closes what it took
	h.held.close()
	for _, hs := range all {
		hs.place.close()
		h.closeSession(hs)
	}
	if h.ownLimit {
		h.limit.Flush()
	}
}

// shed answers 429 at once, before the body is read, a POST of an
// identity whose rate limit has no token left: a flood costs little of
// what serves the others. The call's own check (begin) does the
// counting; this one only peeks.
//
// Only a request whose Mcp-Method header names a call the limits count
// (a 2026-07-28 client's) is shed: a response to the server's question,
// a cancellation or an initialize goes on, and a legacy session's call,
// whose method only its body says, is refused in begin.
//
// Nor is a request forwarded by the replica that received it
// (WithReceiver): that replica's limits govern it, and they cannot be
// peeked at here without a round trip to it, which would cost what
// shedding saves. The call's own check in begin asks them.
func (h *StreamableHandler) shed(w http.ResponseWriter, r *http.Request) bool {
	if h.gw == nil {
		return false
	}
	method := r.Header.Get(hdrMethod)
	if method == "" || !decided(method) {
		return false
	}
	lim := h.gw.Limits()
	if lim == nil || receiverOf(r.Context()) != nil {
		return false
	}
	who := identity.FromContext(r.Context())
	d := lim.Exhausted(who.Key())
	if d <= 0 {
		return false
	}
	secs := ratelimit.RetryAfter(d)
	h.gw.auditShed(who, r.URL.Path, method, r.Header.Get(hdrName))
	w.Header()["Retry-After"] = []string{secs}
	h.refuseRPC(w, r, nil, http.StatusTooManyRequests, nil, rpc.RateLimited, "rate limit exceeded: retry after "+secs+" s")
	return true
}
