package gateway

import (
	"context"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// A client request either reaches a server — forward counts it in that
// server's metrics and makes its span (flight) — or mcpvisor answers it
// itself: the handshake, ping, the aggregated endpoint's lists,
// server/discover, a call of an unknown or denied tool, logging/setLevel
// on the aggregated endpoint, a retry of a held call, a method it does not
// serve. answer counts the latter in the gateway's Local and, with tracing
// on, makes their span, so that every request an endpoint answers is
// counted once, in one place or the other.

// forwardMarker is a request's related Sink that learns whether the
// request was forwarded: forward marks it. The fronts' own per-request
// sinks are markers (postStream, batchSink): serving a request over HTTP
// allocates nothing for it. Only the request's own goroutine marks and
// reads it.
type forwardMarker interface {
	markForwarded()
	wasForwarded() bool
}

// markSink makes a related Sink that is not a marker (stdio's, shared by
// the connection's requests) one, for one request.
type markSink struct {
	Sink
	forwarded bool
}

func (m *markSink) markForwarded()     { m.forwarded = true }
func (m *markSink) wasForwarded() bool { return m.forwarded }

// answer serves a client message on endpoint p — a legacy session's (s,
// mo nil) or a modern request (s nil, mo its _meta) — and, if it is a
// request that reached no server, counts it (LocalRequests) and makes its
// span.
func (g *Gateway) answer(ctx context.Context, s *Session, m *rpc.Message, mo *Modern, related Sink, p statelessPlan) *rpc.Message {
	if !m.IsRequest() {
		return p.handle(ctx, s, m, related)
	}
	var start time.Time
	if g.tracing != nil {
		start = time.Now()
	}
	fm, ok := related.(forwardMarker)
	if !ok {
		ms := &markSink{Sink: related}
		related, fm = ms, ms
	}
	var resp *rpc.Message
	if mo != nil {
		resp = g.serveStateless(ctx, m, mo, related, p)
	} else {
		resp = p.handle(ctx, s, m, related)
	}
	if fm.wasForwarded() {
		return resp
	}
	o, code := localOutcome(ctx, resp)
	g.local.Record(m.Method, o)
	if g.tracing != nil {
		g.traceAnswered(ctx, start, s, m, mo, resp, o, code)
	}
	return resp
}

// localOutcome is how a request mcpvisor answered itself ended, and the
// JSON-RPC error code of a protocol error.
func localOutcome(ctx context.Context, resp *rpc.Message) (telemetry.Outcome, int) {
	switch {
	case resp == nil:
		return telemetry.ProtocolError, rpc.InternalError // answered (fronts) as "no response"
	case resp.Error == nil:
		return telemetry.OK, 0
	case ctx.Err() != nil:
		return telemetry.Cancelled, 0
	}
	switch resp.Error.Code {
	case rpc.BackendUnavailable, rpc.LimitReached:
		return telemetry.Unavailable, 0
	case rpc.RequestTimeout:
		return telemetry.Timeout, 0
	}
	return telemetry.ProtocolError, resp.Error.Code
}

// traceAnswered makes the span of a request mcpvisor answered itself.
func (g *Gateway) traceAnswered(ctx context.Context, start time.Time, s *Session, m *rpc.Message, mo *Modern, resp *rpc.Message, o telemetry.Outcome, code int) {
	e := telemetry.End{Outcome: o, Code: code, RequestID: m.ID}
	if resp != nil && resp.Error != nil {
		e.Message = resp.Error.Message
	}
	switch {
	case mo != nil:
		e.Protocol = modernVersion
	case s != nil:
		if st := g.state(s); st != nil {
			g.mu.Lock()
			e.Protocol = st.protocol
			g.mu.Unlock()
		}
		if e.Protocol == "" && m.Method == "initialize" && resp != nil && resp.Error == nil {
			e.Protocol = negotiated(resp)
		}
		if s.ID != "" {
			e.SessionID = s.Key() // as flight's spans name it
		}
	}
	g.tracing.Answered(ctx, start, m.Method, m.Params, e)
}

// LocalRequests counts the client requests mcpvisor answered itself, by
// method and outcome (those forwarded to a server are counted in the
// server's telemetry).
func (g *Gateway) LocalRequests() *telemetry.Local { return &g.local }
