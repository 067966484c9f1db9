package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// Refusals: how the HTTP front turns a request away before its endpoint
// sees it, in the order a POST's checks run (its Accept header, its body,
// its message, its revision, its session), then the replies they write,
// which GET and DELETE use as well. A POST's refusal is counted
// (Gateway.refuse) before it is written.

// refusePlain refuses a POST with an HTTP error status and a text body,
// and counts it first (a protocol error with no JSON-RPC code).
func (h *StreamableHandler) refusePlain(w http.ResponseWriter, r *http.Request, m *rpc.Message, status int, msg string) {
	var id json.RawMessage
	if m != nil {
		id = requestID(m)
	}
	h.gw.refuse(r.Context(), m, id, telemetry.ProtocolError, 0, msg)
	plainError(w, status, msg)
}

// bodyTooLarge is the 413 reply.
func (h *StreamableHandler) bodyTooLarge(w http.ResponseWriter, r *http.Request) {
	w.Header()["Connection"] = hvClose
	h.refuseRPC(w, r, nil, http.StatusRequestEntityTooLarge, nil, rpc.InvalidRequest,
		"request body exceeds the limit of "+strconv.FormatInt(h.maxBody, 10)+" bytes")
}

// bodyTooSlow is the 408 reply to a body not complete within its bound:
// the handler's, or, byServer, its server's ReadTimeout (serverBound).
// read is how much of it arrived.
func (h *StreamableHandler) bodyTooSlow(w http.ResponseWriter, r *http.Request, read int, serverBound time.Duration, byServer bool) {
	h.log.Debug("http: request body too slow", "remote", r.RemoteAddr, "read", read)
	w.Header()["Connection"] = hvClose
	h.refuseRPC(w, r, nil, http.StatusRequestTimeout, nil, rpc.InvalidRequest,
		bodyBound(h.bodyWait, serverBound, byServer))
}

// bodyBound says which bound a body missed: the handler's (wait), or,
// byServer, its server's, counted from the request's first byte.
func bodyBound(wait, server time.Duration, byServer bool) string {
	if byServer {
		return "request not received within " + server.String() + " (headers and body)"
	}
	return "request body not received within " + wait.String()
}

// refuseRPC refuses a POST before the endpoint sees its message m (as far
// as it was read; nil: not at all) with an HTTP error status and a
// JSON-RPC error body (id nil: null), and counts it (Gateway.refuse) first:
// whoever reads the reply can count on the count.
func (h *StreamableHandler) refuseRPC(w http.ResponseWriter, r *http.Request, m *rpc.Message, status int, id json.RawMessage, code int, msg string) {
	h.gw.refuse(r.Context(), m, id, refusalOutcome(code), code, msg)
	rpcError(w, status, id, code, msg)
}

// refuseReply refuses a POST whose message m was read with an HTTP error
// status and bad, an error response, and counts it first.
func (h *StreamableHandler) refuseReply(w http.ResponseWriter, r *http.Request, m *rpc.Message, status int, bad *rpc.Message) {
	h.gw.refuse(r.Context(), m, bad.ID, refusalOutcome(bad.Error.Code), bad.Error.Code, bad.Error.Message)
	h.reply(w, status, bad)
}

// requestID is m's id if m is a request, for an error reply.
func requestID(m *rpc.Message) json.RawMessage {
	if m.IsRequest() {
		return m.ID
	}
	return nil
}

// refuseNoSession refuses a POST whose Mcp-Session-Id names no live
// session (m: its message, nil for a batch) with sessionNotFound's 404,
// and counts it first.
func (h *StreamableHandler) refuseNoSession(w http.ResponseWriter, r *http.Request, m *rpc.Message) {
	h.refusePlain(w, r, m, http.StatusNotFound, noSessionMsg)
}

// sessionNotFound is the 404 for an unknown, deleted or expired session.
// The body is deliberately not a JSON-RPC error: clients (the go-sdk among
// them) read a bare 404 as "this session is gone, initialize again".
func sessionNotFound(w http.ResponseWriter) {
	plainError(w, http.StatusNotFound, noSessionMsg)
}

// noSessionMsg is the body of sessionNotFound.
const noSessionMsg = "Not Found: no such session (it may have expired or been deleted)"

// reply writes a JSON-RPC message as the whole reply, with status.
func (h *StreamableHandler) reply(w http.ResponseWriter, status int, m *rpc.Message) {
	hdr := w.Header()
	hdr[hdrContentType] = hvJSON
	hdr["X-Content-Type-Options"] = hvNoSniff
	w.WriteHeader(status)
	h.writeReply(w, m.Encode())
}

// rpcError replies with an HTTP error status and a JSON-RPC error body.
func rpcError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	m := rpc.Message{ID: id, Error: &rpc.Error{Code: code, Message: msg}}
	hdr := w.Header()
	hdr[hdrContentType] = hvJSON
	hdr["X-Content-Type-Options"] = hvNoSniff
	w.WriteHeader(status)
	_, _ = w.Write(m.Encode())
}

// plainError replies with an HTTP error status and a text body.
func plainError(w http.ResponseWriter, status int, msg string) {
	hdr := w.Header()
	hdr[hdrContentType] = hvText
	hdr["X-Content-Type-Options"] = hvNoSniff
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

// requireSessionID is the Mcp-Session-Id of a GET or DELETE, which
// cannot be served without one: a request that has none is refused (400)
// and ok is false.
func (h *StreamableHandler) requireSessionID(w http.ResponseWriter, r *http.Request) (sid string, ok bool) {
	if sid = r.Header.Get(hdrSessionID); sid == "" {
		h.gw.refusedHTTP(telemetry.RefusedNoSession)
		plainError(w, http.StatusBadRequest, "Bad Request: Mcp-Session-Id header required")
		return "", false
	}
	return sid, true
}
