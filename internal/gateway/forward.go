package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Causes of a forwarded request's cancellation.
var (
	errTimeout       = errors.New("request timeout")
	errSessionClosed = errors.New("the client session ended (closed by the client, expired, or mcpvisor is shutting down)")
	errClientCancel  = errors.New("cancelled by the client")
)

// forward sends one client request to srv and returns the response for the
// client. It never returns nil: a server that is down, crashes, times out
// or sends garbage yields a JSON-RPC error naming it.
func (g *Gateway) forward(ctx context.Context, s *Session, srv *fleet.Server, method string, params json.RawMessage, clientID json.RawMessage, related Sink) *rpc.Message {
	name := srv.Name()
	st := g.state(s)
	if st == nil {
		return errorResponse(clientID, rpc.InvalidRequest, "session closed")
	}
	timeout := srv.Config().RequestTimeout
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	srv.Begin(s.Key())
	defer srv.End(s.Key())
	var conn *backend.Conn
	if !srv.PerSession() {
		conn = srv.Current() // the hot path: a running shared server
	}
	if conn == nil {
		startCtx := ctx
		if timeout > 0 {
			var c context.CancelFunc
			startCtx, c = context.WithTimeout(ctx, timeout+srv.Config().InitTimeout)
			defer c()
		}
		var err error
		if conn, err = srv.Conn(startCtx, s.Key()); err != nil {
			return errorResponse(clientID, rpc.BackendUnavailable, fmt.Sprintf("server %s is unavailable: %v", name, err))
		}
	}

	c := &call{sess: s, st: st, clientID: clientID, related: related, conn: conn, cancel: cancel}
	// The timeout restarts whenever the server reports progress.
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { cancel(errTimeout) })
		defer timer.Stop()
		c.touch = func() { timer.Reset(timeout) }
	} else {
		c.touch = func() {}
	}
	if tok := rpc.ProgressToken(params); tok != nil {
		c.token = tok
		c.ourTok = g.nextID("mcpv-p")
		params, _ = rpc.ReplaceProgressToken(params, json.RawMessage(strconv.Quote(c.ourTok)))
	}
	key := string(clientID)
	g.mu.Lock()
	st.calls[key] = c
	g.calls[conn] = append(g.calls[conn], c)
	if c.ourTok != "" {
		g.tokens[c.ourTok] = c
	}
	g.mu.Unlock()
	defer g.endCall(c, key)

	resp, err := conn.Call(ctx, method, params)
	switch {
	case err == nil:
		return &rpc.Message{ID: clientID, Result: resp.Result, Error: resp.Error}
	case errors.Is(context.Cause(ctx), errTimeout):
		return errorResponse(clientID, rpc.RequestTimeout, fmt.Sprintf("server %s did not answer %s within %v", name, method, timeout))
	case ctx.Err() != nil:
		return errorResponse(clientID, rpc.BackendUnavailable, fmt.Sprintf("request to server %s cancelled: %v", name, context.Cause(ctx)))
	case errors.Is(err, rpc.ErrLineTooLong):
		return errorResponse(clientID, rpc.MessageTooLarge, fmt.Sprintf("server %s: %v", name, err))
	default:
		return errorResponse(clientID, rpc.BackendUnavailable, fmt.Sprintf("server %s failed while answering %s: %v", name, method, err))
	}
}

func (g *Gateway) endCall(c *call, key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.st.calls[key] == c {
		delete(c.st.calls, key)
	}
	list := g.calls[c.conn]
	for i, x := range list {
		if x == c {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(g.calls, c.conn)
	} else {
		g.calls[c.conn] = list
	}
	if c.ourTok != "" {
		delete(g.tokens, c.ourTok)
	}
}

// newestCall is the most recent request in flight on conn, or nil.
func (g *Gateway) newestCall(conn *backend.Conn) *call {
	g.mu.Lock()
	defer g.mu.Unlock()
	list := g.calls[conn]
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}

// Notification relays what a server sends on its own (backend.Hooks).
func (g *Gateway) Notification(conn *backend.Conn, m *rpc.Message) {
	if srv := g.fleet.Get(conn.Name()); srv != nil {
		srv.Touch(conn)
	}
	switch m.Method {
	case "notifications/progress":
		tok := rpc.ProgressToken(m.Params)
		var id string
		if err := json.Unmarshal(tok, &id); err != nil {
			return
		}
		g.mu.Lock()
		c := g.tokens[id]
		g.mu.Unlock()
		if c == nil {
			return
		}
		c.touch()
		params, _ := rpc.ReplaceProgressToken(m.Params, c.token)
		_ = c.related.Send(&rpc.Message{Method: m.Method, Params: params})
	case "notifications/message":
		if c := g.newestCall(conn); c != nil {
			_ = c.related.Send(m)
			return
		}
		for _, s := range g.sessionsFor(conn.Name()) {
			_ = s.Out().Send(m)
		}
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		g.invalidate(conn.Name(), m.Method)
		for _, s := range g.sessionsFor(conn.Name()) {
			_ = s.Out().Send(m)
		}
	case "notifications/resources/updated":
		uri := stringField(m.Params, "uri")
		g.mu.Lock()
		var to []*Session
		for s, st := range g.sessions {
			if (st.server == "" || st.server == conn.Name()) && st.subs[uri] {
				to = append(to, s)
			}
		}
		g.mu.Unlock()
		for _, s := range to {
			_ = s.Out().Send(m)
		}
	case "notifications/cancelled":
		// The server withdrew a request it had sent to a client.
		id := rpc.CancelledRequestID(m.Params)
		g.mu.Lock()
		var ours string
		var r *outReq
		for k, x := range g.outReqs {
			if x.conn == conn && string(x.backendID) == string(id) {
				ours, r = k, x
				break
			}
		}
		if r != nil {
			delete(g.outReqs, ours)
			if st := g.sessions[r.sess]; st != nil {
				delete(st.outReqs, ours)
			}
		}
		g.mu.Unlock()
		if r != nil {
			r.timer.Stop()
			params, _ := json.Marshal(map[string]any{"requestId": ours, "reason": stringField(m.Params, "reason")})
			_ = r.sess.Out().Send(&rpc.Message{Method: m.Method, Params: params})
		}
	default:
		g.log.Debug("notification from server not relayed", "server", conn.Name(), "method", m.Method)
	}
}

// Request bridges a server→client request (sampling, elicitation, roots)
// to the client session whose request is in flight on that server
// (backend.Hooks).
//
// Over stdio a server's request carries nothing that ties it to the client
// request that caused it. So it is bridged only when that is unambiguous:
// every request in flight on this connection comes from one client
// session. When several sessions share the server and have requests in
// flight, guessing could hand one user's sampling prompt to another, so the
// server gets an error that names the fix (sharing "per-session", which
// gives every session its own process).
//
// It runs on the connection's read loop, which must not wait for the
// server to read: answers given here are written from another goroutine.
func (g *Gateway) Request(conn *backend.Conn, m *rpc.Message) {
	if m.Method == "ping" {
		go func() { _ = conn.Reply(m.ID, json.RawMessage(`{}`)) }()
		return
	}
	c, sessions := g.bridgeTarget(conn)
	switch {
	case c == nil:
		msg := fmt.Sprintf("mcpvisor cannot forward %s: no client request is in flight on server %s", m.Method, conn.Name())
		go func() { _ = conn.ReplyError(m.ID, rpc.InternalError, msg) }()
		return
	case sessions > 1:
		g.log.Warn("server request is ambiguous between client sessions; refused", "server", conn.Name(), "method", m.Method, "sessions", sessions)
		msg := fmt.Sprintf("mcpvisor cannot tell which of %d client sessions %s is for: configure server %s with \"sharing\": \"per-session\"", sessions, m.Method, conn.Name())
		go func() { _ = conn.ReplyError(m.ID, rpc.InternalError, msg) }()
		return
	}
	ours := g.nextID("mcpv-r")
	r := &outReq{conn: conn, backendID: m.ID, sess: c.sess}
	timeout := 5 * time.Minute
	r.timer = time.AfterFunc(timeout, func() {
		if g.takeOutReq(ours) != nil {
			_ = conn.ReplyError(m.ID, rpc.RequestTimeout, fmt.Sprintf("the client did not answer %s within %v", m.Method, timeout))
		}
	})
	g.mu.Lock()
	g.outReqs[ours] = r
	c.st.outReqs[ours] = r
	g.mu.Unlock()
	if err := c.related.Send(&rpc.Message{ID: json.RawMessage(strconv.Quote(ours)), Method: m.Method, Params: m.Params}); err != nil {
		if g.takeOutReq(ours) != nil {
			r.timer.Stop()
			msg := fmt.Sprintf("mcpvisor could not deliver %s to the client: %v", m.Method, err)
			go func() { _ = conn.ReplyError(m.ID, rpc.InternalError, msg) }()
		}
	}
}

// bridgeTarget is the newest request in flight on conn and the number of
// client sessions that have requests in flight there.
func (g *Gateway) bridgeTarget(conn *backend.Conn) (*call, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	list := g.calls[conn]
	if len(list) == 0 {
		return nil, 0
	}
	seen := map[*Session]bool{}
	for _, c := range list {
		seen[c.sess] = true
	}
	return list[len(list)-1], len(seen)
}

func (g *Gateway) takeOutReq(id string) *outReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.outReqs[id]
	if r != nil {
		delete(g.outReqs, id)
		if st := g.sessions[r.sess]; st != nil {
			delete(st.outReqs, id)
		}
	}
	return r
}

// clientMessage handles what every endpoint handles alike: the client's
// responses to bridged requests and its cancellations. It reports whether
// m was one of those.
func (g *Gateway) clientMessage(s *Session, m *rpc.Message) bool {
	switch {
	case m.IsResponse():
		var id string
		if json.Unmarshal(m.ID, &id) != nil {
			return true
		}
		r := g.takeOutReq(id)
		if r == nil || r.sess != s {
			return true
		}
		r.timer.Stop()
		if m.Error != nil {
			_ = r.conn.ReplyError(r.backendID, m.Error.Code, m.Error.Message)
		} else {
			_ = r.conn.Reply(r.backendID, m.Result)
		}
		return true
	case m.Method == "notifications/cancelled":
		id := rpc.CancelledRequestID(m.Params)
		g.mu.Lock()
		var c *call
		if st := g.sessions[s]; st != nil {
			c = st.calls[string(id)]
		}
		g.mu.Unlock()
		if c != nil {
			c.cancel(errClientCancel)
		}
		return true
	case m.Method == "notifications/initialized":
		return true
	}
	return false
}

// stringField reads a top-level string member of a JSON object, scanning
// rather than decoding it ("" when absent).
func stringField(obj json.RawMessage, name string) string {
	s, _ := rpc.StringMember(obj, name)
	return s
}
