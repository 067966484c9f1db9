package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// A 2026-07-28 POST: a request on its own, whatever Mcp-Session-Id it
// carries. Its MCP headers are checked against its body (a tools/call's
// Mcp-Param-* headers against its tool's schema: paramHeaderMismatch),
// and it is tracked while it is served so that Close can end it.

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
// its name or uri (for tasks/get, tasks/update and tasks/cancel, its
// taskId) (Base64-decoded when sent as =?base64?...?=). A failure
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
	case "tasks/get", "tasks/update", "tasks/cancel":
		want = mo.TaskID // the tasks extension's rule (SEP-2663)
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

// errHandlerClosed is why the modern requests in flight end at Close.
var errHandlerClosed = errors.New("the endpoint closed")
