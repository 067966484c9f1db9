package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/guard"
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

// errHandlerClosed is why the modern requests in flight end at Close.
var errHandlerClosed = errors.New("the endpoint closed")

// modernShards spreads the modern requests in flight over locks of their
// own: one lock for all would be taken twice by every request.
const modernShards = 16

type modernShard struct {
	mu     sync.Mutex
	m      map[context.Context]context.CancelCauseFunc
	closed bool
}

// track registers a modern request's cancel for Close, in the shard it
// returns; if the handler has closed, it cancels the request instead and
// returns nil.
func (h *StreamableHandler) track(ctx context.Context, cancel context.CancelCauseFunc) *modernShard {
	sh := &h.modern[h.seq.Add(1)%modernShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		cancel(errHandlerClosed)
		return nil
	}
	if sh.m == nil {
		sh.m = map[context.Context]context.CancelCauseFunc{}
	}
	sh.m[ctx] = cancel
	return sh
}

// untrack removes what track registered.
func (sh *modernShard) untrack(ctx context.Context) {
	sh.mu.Lock()
	delete(sh.m, ctx)
	sh.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (h *StreamableHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.guard.Allow(w, r) {
		h.log.Debug("http: refused", "host", r.Host, "remote", r.RemoteAddr)
		if h.gw != nil {
			reason := telemetry.RefusedForbidden
			if status, _ := h.guard.Check(r); status == http.StatusUnauthorized {
				reason = telemetry.RefusedUnauthorized
			}
			h.gw.refusedHTTP(reason)
		}
		return
	}
	switch r.Method {
	case http.MethodPost:
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

// servePOST handles one JSON-RPC message from the client.
func (h *StreamableHandler) servePOST(w http.ResponseWriter, r *http.Request) {
	jsonOK, sseOK := accepts(r.Header[hdrAccept])
	if !jsonOK && !sseOK {
		h.refusePlain(w, r, nil, http.StatusNotAcceptable, "Not Acceptable: Accept must allow application/json and text/event-stream")
		return
	}
	hera, hv := era(r)
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	if isBatch(body) && hera <= eraLegacy {
		h.serveBatch(w, r, body, jsonOK, sseOK)
		return
	}
	m, err := rpc.Decode(body)
	if err != nil {
		var id json.RawMessage
		code, msg := rpc.ParseError, err.Error()
		var de *rpc.DecodeError
		if errors.As(err, &de) {
			code = de.Code
			if de.Request {
				id = de.ID
			}
		}
		h.refuseRPC(w, r, nil, http.StatusBadRequest, id, code, msg)
		return
	}
	switch hera {
	case eraUnknown:
		h.refuseReply(w, r, m, http.StatusBadRequest, unsupportedVersion(&rpc.Message{ID: requestID(m)}, hv))
		return
	case eraModern:
		h.serveModern(w, r, m, hv, jsonOK, sseOK)
		return
	case eraNone:
		if _, modern := modernVersionOf(m.Params); modern {
			h.serveModern(w, r, m, hv, jsonOK, sseOK)
			return
		}
	}

	sid := sessionIDOf(r)
	if sid == "" {
		if m.Method == "initialize" && m.IsRequest() {
			h.initialize(w, r, m, jsonOK, sseOK)
			return
		}
		h.refuseRPC(w, r, m, http.StatusBadRequest, requestID(m), rpc.InvalidRequest, "Bad Request: Mcp-Session-Id header required")
		return
	}
	hs := h.acquire(sid)
	if hs == nil {
		h.refuseNoSession(w, r, m)
		return
	}
	defer hs.place.exit()
	if !m.IsNotification() {
		hs.place.markSent()
	}

	if !m.IsRequest() {
		h.ep.Handle(r.Context(), hs.sess, m, noRelated)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	ps := &postStream{hs: hs, w: w, ctx: r.Context(), sseOK: sseOK}
	resp := h.ep.Handle(r.Context(), hs.sess, m, ps)
	ps.finish(h.response(m, resp), jsonOK)
}

// sessionIDOf is the request's Mcp-Session-Id, or "".
func sessionIDOf(r *http.Request) string {
	if v := r.Header[hdrSessionID]; len(v) != 0 {
		return v[0]
	}
	return ""
}

// isBatch tells whether a body is a JSON array.
func isBatch(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '['
	}
	return false
}

// serveBatch handles a JSON-RPC batch, for a session at batchVersion; any
// other gets 400 with a JSON-RPC error and nothing in it is handled.
// Notifications and responses are handled in order as they come; the
// requests run concurrently. Each invalid element gets an error response of
// its own (JSON-RPC 2.0, 6), an empty array one Invalid Request. With
// requests, the reply is 200: a JSON array of their responses in the order
// they were known, or, once a related message comes, an event stream of
// the related messages and the responses that ends after the last
// response; without, 202.
func (h *StreamableHandler) serveBatch(w http.ResponseWriter, r *http.Request, body []byte, jsonOK, sseOK bool) {
	sid := sessionIDOf(r)
	if sid == "" {
		h.refuseRPC(w, r, nil, http.StatusBadRequest, nil, rpc.InvalidRequest, "Bad Request: Mcp-Session-Id header required (initialize cannot be part of a batch)")
		return
	}
	hs := h.acquire(sid)
	if hs == nil {
		h.refuseNoSession(w, r, nil)
		return
	}
	defer hs.place.exit()
	if hs.version != batchVersion {
		h.refuseRPC(w, r, nil, http.StatusBadRequest, nil, rpc.InvalidRequest, "Bad Request: "+batchRefused(hs.version))
		return
	}
	ctx := r.Context()
	reqs, others, errs, fail := splitBatch(ctx, h.gw, body)
	if fail != nil {
		h.refuseRPC(w, r, nil, http.StatusBadRequest, nil, fail.Code, fail.Message)
		return
	}
	if len(reqs) > 0 || len(errs) > 0 || sendsResponse(others) {
		hs.place.markSent()
	}
	for _, m := range others {
		h.ep.Handle(ctx, hs.sess, m, noRelated)
	}
	if len(errs) == 0 && len(reqs) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	ps := &postStream{hs: hs, w: w, ctx: ctx, sseOK: sseOK, batch: true, left: len(errs) + len(reqs)}
	for _, e := range errs {
		ps.respond(e)
	}
	runBatch(reqs, func(m *rpc.Message) {
		related := &batchSink{p: ps}
		resp := h.response(m, h.ep.Handle(ctx, hs.sess, m, related))
		related.done.Store(true)
		ps.respond(resp)
	})
	ps.finishBatch(jsonOK)
}

// sendsResponse reports whether ms hold a response: a client's answer to
// a server's request.
func sendsResponse(ms []*rpc.Message) bool {
	for _, m := range ms {
		if m.IsResponse() {
			return true
		}
	}
	return false
}

// serveModern serves a request of the modern revision: on its own,
// whatever Mcp-Session-Id it carries, after checking its _meta and that
// its headers match its body (basic/transports/streamable-http, server
// validation). hv is its MCP-Protocol-Version header ("" if absent).
func (h *StreamableHandler) serveModern(w http.ResponseWriter, r *http.Request, m *rpc.Message, hv string, jsonOK, sseOK bool) {
	if !m.IsRequest() {
		if m.IsResponse() {
			h.refuseRPC(w, r, m, http.StatusBadRequest, nil, rpc.InvalidRequest, "Bad Request: an MCP "+modernVersion+" client sends no responses")
			return
		}
		// The revision defines no client notification over HTTP
		// (cancellation is the end of the request's stream): accepted,
		// and nothing to do.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	mo, bad := readModern(m)
	if bad == nil {
		bad = headerMismatch(r, m, hv, mo)
	}
	if bad == nil {
		bad = unsupportedVersion(m, mo.Version)
	}
	if bad != nil {
		h.refuseReply(w, r, m, http.StatusBadRequest, bad)
		return
	}
	if m.Method == "subscriptions/listen" {
		// A listen is the modern client's standing stream, as a session
		// is a legacy one's: it takes a place under the same bound,
		// making room as an initialize does, and is never evicted (see
		// SessionLimit).
		p, ok := h.limit.admitListen()
		if !ok {
			h.log.Warn("http: session limit reached, every session busy: subscriptions/listen refused", "limit", h.limit.Max())
			h.refuseRPC(w, r, m, http.StatusServiceUnavailable, m.ID, rpc.LimitReached, h.limit.limitMessage())
			return
		}
		defer p.leave()
	}
	// The request ends with its stream, or when the front closes (a
	// subscriptions/listen stream ends then with its result).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if sh := h.track(ctx, cancel); sh != nil {
		defer sh.untrack(ctx)
	}
	var resp *rpc.Message
	if ts, ok := h.ep.(toolSchemas); ok && m.Method == "tools/call" {
		// Its Mcp-Param-* headers are checked against the tool's schema:
		// learned first, if need be, within the request's life — its
		// timeout counting from its arrival, not from after that wait.
		t0 := time.Now()
		schema, err := ts.toolSchema(ctx, mo.Name)
		if time.Since(t0) > time.Millisecond {
			ctx = withArrival(ctx, t0)
		}
		if err != nil {
			resp = errorResponse(m.ID, rpc.BackendUnavailable, "mcpvisor cannot check the request's Mcp-Param headers: "+err.Error())
			o := telemetry.Unavailable
			if ctx.Err() != nil {
				o = telemetry.Cancelled // the client went away meanwhile
			}
			h.gw.refuse(ctx, m, m.ID, o, rpc.BackendUnavailable, resp.Error.Message)
		} else if schema != nil {
			if bad := paramHeaderMismatch(r, m, schema); bad != nil {
				h.refuseReply(w, r, m, http.StatusBadRequest, bad)
				return
			}
		}
	}
	mo.ctx, mo.cancel, mo.front = ctx, cancel, &h.held
	ps := &postStream{hs: h.modern0, w: w, ctx: r.Context(), sseOK: sseOK, modern: true}
	if resp == nil {
		resp = h.ep.Stateless(ctx, m, mo, ps)
	}
	ps.finish(h.response(m, resp), jsonOK)
}

// headerMismatch checks that a modern request's MCP headers are there and
// match its body: MCP-Protocol-Version its _meta version, Mcp-Method its
// method, and, for tools/call, prompts/get and resources/read, Mcp-Name
// its name or uri (Base64-decoded when sent as =?base64?...?=). A failure
// is a HeaderMismatch error naming the header.
func headerMismatch(r *http.Request, m *rpc.Message, hv string, mo *Modern) *rpc.Message {
	version := mo.Version
	mismatch := func(msg string) *rpc.Message {
		return errorResponse(m.ID, rpc.HeaderMismatch, "Header mismatch: "+msg)
	}
	switch {
	case hv == "":
		return mismatch("the MCP-Protocol-Version header is missing")
	case hv != version:
		return mismatch("MCP-Protocol-Version header value " + strconv.Quote(hv) + " does not match body value " + strconv.Quote(version))
	}
	method := r.Header[hdrMethod]
	switch {
	case len(method) == 0:
		return mismatch("the Mcp-Method header is missing")
	case method[0] != m.Method:
		return mismatch("Mcp-Method header value " + strconv.Quote(method[0]) + " does not match body value " + strconv.Quote(m.Method))
	}
	var want string
	switch m.Method {
	case "tools/call", "prompts/get":
		want = mo.Name
	case "resources/read":
		want = mo.URI
	default:
		return nil
	}
	name := r.Header[hdrName]
	if len(name) == 0 {
		return mismatch("the Mcp-Name header is missing (required for " + m.Method + ")")
	}
	got, ok := decodeHeaderValue(name[0])
	switch {
	case !ok:
		return mismatch("the Mcp-Name header value is not valid Base64 between =?base64? and ?=")
	case got != want:
		return mismatch("Mcp-Name header value " + strconv.Quote(got) + " does not match body value " + strconv.Quote(want))
	}
	return nil
}

// decodeHeaderValue undoes the sentinel encoding of Mcp-Name and
// Mcp-Param-* values: =?base64?B64?= is the UTF-8 text B64 encodes; any
// other value is itself.
func decodeHeaderValue(v string) (string, bool) {
	inner, ok := strings.CutPrefix(v, "=?base64?")
	if !ok {
		return v, true
	}
	inner, ok = strings.CutSuffix(inner, "?=")
	if !ok {
		return v, true
	}
	b, err := base64.StdEncoding.DecodeString(inner)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// initialize starts a session for an initialize request.
func (h *StreamableHandler) initialize(w http.ResponseWriter, r *http.Request, m *rpc.Message, jsonOK, sseOK bool) {
	h.mu.RLock()
	closed := h.closed
	h.mu.RUnlock()
	if closed {
		const msg = "Service Unavailable: shutting down"
		h.gw.refuse(r.Context(), m, m.ID, telemetry.Unavailable, 0, msg)
		plainError(w, http.StatusServiceUnavailable, msg)
		return
	}
	// The place is held until closeSession, whatever ends the session
	// (a failed initialize included), or until an admission takes it
	// over (an eviction). The initialize is the session's request in
	// flight: it cannot be evicted before it is answered.
	hs := &httpSession{h: h, id: rand.Text()}
	hs.place.init(h.limit, hs, true)
	if !h.limit.admit(&hs.place) {
		h.log.Warn("http: session limit reached, every session busy: initialize refused", "limit", h.limit.Max())
		h.refuseRPC(w, r, m, http.StatusServiceUnavailable, m.ID, rpc.LimitReached, h.limit.limitMessage())
		return
	}
	hs.sess = h.ep.Open(hs)
	hs.sess.ID = hs.id

	ps := &postStream{hs: hs, w: w, ctx: r.Context(), sseOK: sseOK, sid: hs.id}
	resp := h.response(m, h.ep.Handle(r.Context(), hs.sess, m, ps))
	hs.version = negotiated(resp) // before register: read-only once visible
	if resp.Error != nil || !h.register(hs) {
		hs.place.exit()
		hs.place.close()
		h.closeSession(hs)
		if resp.Error == nil {
			resp = &rpc.Message{ID: m.ID, Error: &rpc.Error{Code: rpc.InternalError, Message: "server is shutting down"}}
		}
		ps.forgetSession()
		ps.finish(resp, jsonOK)
		return
	}
	h.log.Debug("http: session opened", "session", hs.id, "version", hs.version)
	ps.finish(resp, jsonOK)
	hs.place.exit()
}

// negotiated is the protocol revision of an initialize response.
func negotiated(resp *rpc.Message) string {
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if resp.Result != nil {
		_ = json.Unmarshal(resp.Result, &res)
	}
	return res.ProtocolVersion
}

// acquire finds a live session and counts the caller as a request in
// flight on it (which keeps it from expiring or being evicted); the
// caller must end it with hs.place.exit. nil if there is none, or it is
// being closed.
func (h *StreamableHandler) acquire(sid string) *httpSession {
	return h.lookup(sid, (*Place).enter)
}

// lookup finds session sid and enters it as enter does, or nil.
func (h *StreamableHandler) lookup(sid string, enter func(*Place) bool) *httpSession {
	h.mu.RLock()
	hs := h.sessions[sid]
	if hs != nil && !enter(&hs.place) {
		hs = nil
	}
	h.mu.RUnlock()
	return hs
}

// bodyPrealloc is the most readBody allocates up front on the word of
// Content-Length; a longer body grows its buffer as its bytes arrive.
const bodyPrealloc = 64 << 10

// readBody reads a POST body of at most maxBody bytes, within BodyTimeout,
// into a buffer of its own (the decoded message aliases it, and the
// endpoint may keep it). On failure it writes the error reply and returns
// false: 413 over the limit, 408 past the timeout (both close the
// connection: the rest of the body cannot be told from a next request),
// 400 for a body cut short.
func (h *StreamableHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > h.maxBody {
		h.bodyTooLarge(w, r)
		return nil, false
	}
	// The deadline covers this read only: net/http lifts it when the body
	// reaches EOF (before it watches the connection for the client going
	// away), so that it cannot cancel a long request. After a failure it
	// stays, bounding net/http's discarding of the body's rest. (A server
	// without deadlines, such as a test's recorder, reads without one.)
	// A server whose ReadTimeout is no longer than bodyWait has set one
	// already, for the headers and the body together, lifted the same
	// way: another would cost each request a change of the poller's timer
	// and bound nothing more.
	serverBound, byServer := serverBoundsBody(r, h.bodyWait)
	if !byServer {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.bodyWait))
	}
	var b []byte
	var bp *[]byte
	switch n := r.ContentLength; {
	case n >= 0 && n < bodyPrealloc:
		b = make([]byte, 0, n+1) // +1: room to see EOF without growing
	case n >= 0:
		b = make([]byte, 0, bodyPrealloc)
	default: // chunked: read into a pooled buffer, then copy
		bp = getBuf()
		defer putBuf(bp)
		b = (*bp)[:0]
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > h.maxBody {
			h.bodyTooLarge(w, r)
			return nil, false
		}
		if err == io.EOF {
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			h.bodyTooSlow(w, r, len(b), serverBound, byServer)
			return nil, false
		}
		if err != nil {
			h.refuseRPC(w, r, nil, http.StatusBadRequest, nil, rpc.ParseError, "could not read the request body")
			return nil, false
		}
	}
	if bp != nil {
		*bp = b
		return append([]byte(nil), b...), true
	}
	return b, true
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

// serverBoundsBody reports whether r's server bounds a request's body
// within wait by itself, and by how much: its ReadTimeout, which net/http
// sets as the connection's read deadline for each request from its first
// byte, is positive and no longer than wait.
func serverBoundsBody(r *http.Request, wait time.Duration) (time.Duration, bool) {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil || srv.ReadTimeout <= 0 || srv.ReadTimeout > wait {
		return 0, false
	}
	return srv.ReadTimeout, true
}

// Eras of a request, by its MCP-Protocol-Version header.
const (
	eraNone    = iota // no header: legacy (2025-03-26, which had none), unless the body is modern
	eraLegacy         // a revision served in sessions
	eraModern         // 2026-07-28
	eraUnknown        // a revision mcpvisor does not serve
)

// era classifies the request's MCP-Protocol-Version header.
func era(r *http.Request) (int, string) {
	v := r.Header[hdrProtocolVersion]
	if len(v) == 0 {
		return eraNone, ""
	}
	switch v[0] {
	case "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05":
		return eraLegacy, v[0]
	case modernVersion:
		return eraModern, v[0]
	}
	return eraUnknown, v[0]
}

// accepts reads Accept headers: whether application/json and whether
// text/event-stream are acceptable. No Accept header accepts anything.
func accepts(vals []string) (jsonOK, sseOK bool) {
	if len(vals) == 0 {
		return true, true
	}
	for _, v := range vals {
		if v == "application/json, text/event-stream" || v == "*/*" {
			return true, true
		}
		for part := range strings.SplitSeq(v, ",") {
			media, params, _ := strings.Cut(part, ";")
			media = strings.TrimSpace(media)
			if params != "" && zeroQ(params) {
				continue
			}
			switch {
			case media == "*/*":
				jsonOK, sseOK = true, true
			case strings.EqualFold(media, "application/json"), strings.EqualFold(media, "application/*"):
				jsonOK = true
			case strings.EqualFold(media, "text/event-stream"), strings.EqualFold(media, "text/*"):
				sseOK = true
			}
		}
	}
	return jsonOK, sseOK
}

// zeroQ reports whether media-type parameters carry q=0 (not acceptable).
func zeroQ(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(k, "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && q == 0
		}
	}
	return false
}

// noRelated is the related Sink for messages that are not requests.
var noRelated = SinkFunc(func(*rpc.Message) error { return ErrNoStream })
