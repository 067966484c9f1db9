package gateway

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// A POST: its Accept header and its revision (era) are read, its body
// within its bounds, its message decoded; then a 2026-07-28 request is
// served on its own (serveModern), a legacy one in the session its
// Mcp-Session-Id names (or the one an initialize makes), by the endpoint,
// whose answer is the reply (postStream). A batch, which only a
// 2025-03-26 session may send, is served by serveBatch, last.

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
	hs := h.acquire(r, sid)
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

// sessionIDOf is the request's Mcp-Session-Id, or "".
func sessionIDOf(r *http.Request) string {
	if v := r.Header[hdrSessionID]; len(v) != 0 {
		return v[0]
	}
	return ""
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
	hs := &httpSession{h: h, id: h.gw.stamp(rand.Text())}
	hs.place.init(h.limit, hs, true)
	if !h.limit.admit(&hs.place) {
		h.log.Warn("http: session limit reached, every session busy: initialize refused", "limit", h.limit.Max())
		h.refuseRPC(w, r, m, http.StatusServiceUnavailable, m.ID, rpc.LimitReached, h.limit.limitMessage())
		return
	}
	hs.sess = h.ep.Open(hs)
	hs.sess.ID = hs.id
	// The session is its initializer's: another identity that names it
	// is told it does not exist (lookup).
	hs.sess.SetIdentity(identity.FromContext(r.Context()))

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
func (h *StreamableHandler) acquire(r *http.Request, sid string) *httpSession {
	return h.lookup(r, sid, (*Place).enter)
}

// lookup finds session sid of r's identity and enters it as enter does,
// or nil. A session another identity initialized is not found: its id
// alone lets nobody else in.
func (h *StreamableHandler) lookup(r *http.Request, sid string, enter func(*Place) bool) *httpSession {
	h.mu.RLock()
	hs := h.sessions[sid]
	cur := identity.FromContext(r.Context())
	if hs != nil && !identity.Same(hs.sess.Identity(), cur) {
		hs = nil
	}
	if hs != nil && cur != nil {
		// The same person by the same client, maybe with a renewed
		// token whose claims differ: the session is theirs as they are
		// now (each request is decided by its own token anyway).
		hs.sess.SetIdentity(cur)
	}
	if hs != nil && !enter(&hs.place) {
		hs = nil
	}
	h.mu.RUnlock()
	return hs
}

// noRelated is the related Sink for messages that are not requests.
var noRelated = SinkFunc(func(*rpc.Message) error { return ErrNoStream })

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
	hs := h.acquire(r, sid)
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
