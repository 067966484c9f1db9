package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Sink delivers messages to one client. Send must not block for long: a
// transport that cannot deliver (stream gone, buffer full) returns an error
// and the message is dropped, or kept for resumption where the transport
// supports it.
type Sink interface {
	Send(m *rpc.Message) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(m *rpc.Message) error

// Send calls f(m).
func (f SinkFunc) Send(m *rpc.Message) error { return f(m) }

// Endpoint is the transport-independent MCP server side: the aggregated
// endpoint and each per-server endpoint implement it; the Streamable HTTP
// and stdio fronts drive it.
type Endpoint interface {
	// Open starts a client session. Messages that relate to no request
	// (list_changed, resource updates) go to out: the HTTP front delivers
	// them on its GET stream, the stdio front on stdout.
	Open(out Sink) *Session

	// Handle processes one message from the client on s. For a request it
	// returns the response, with the client's id, once it is known;
	// messages that belong to the request (progress, logging, server-to-
	// client requests such as sampling) are sent to related meanwhile.
	// ctx ends when the client goes away: the request is then cancelled
	// upstream. For notifications and for the client's responses to
	// server-to-client requests it returns nil. It never returns nil for a
	// request.
	Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message

	// Stateless serves one request of a modern (2026-07-28) client, which
	// has no session: m is a request whose _meta mo was read by readModern
	// and whose version was accepted. Messages that belong to it
	// (progress) go to related; no server-to-client request ever does
	// (the modern revision has none). The response carries resultType,
	// and ttlMs and cacheScope where the method is cacheable; methods the
	// modern revision removed get MethodNotFound. Safe for concurrent use;
	// never nil.
	Stateless(ctx context.Context, m *rpc.Message, mo *Modern, related Sink) *rpc.Message

	// Close ends the session: requests it has in flight are cancelled,
	// pending server-to-client requests fail, per-session servers stop.
	// Idempotent.
	Close(s *Session)
}

// Session is one client session: an Mcp-Session-Id on the HTTP front, the
// single client of the stdio front.
type Session struct {
	// ID is assigned by the transport (empty for stdio).
	ID      string
	Created time.Time
	out     Sink
	key     string // unique in this process: names per-session instances

	mu     sync.Mutex
	closed bool
	state  any // the endpoint's own per-session state

	modern *Modern      // the request's own _meta, for the session of a modern request
	req    *rpc.Message // that request, as the client sent it
	held   *heldCall    // the held call whose session this is, if any
	st     *sessState   // a modern request's session state (it is in no table)
	// client, for a modern request on a stdio connection: the connection's
	// session. Every request of one connection is its one client's.
	client *Session
	// listener: the session a modern client's subscriptions/listen holds
	// its resource subscriptions in — mcpvisor's own, no legacy client's.
	listener bool
	// rename, for a modern request's session: the name its server knows
	// the requested tool or prompt by, put in the params by its forward
	// with the rest of their edit (one copy: begin).
	rename json.RawMessage
	// ident is who the session's client says it is (identity.go); nil
	// until it says so or is given a hint. Written under mu.
	ident atomic.Pointer[clientIdent]
}

// legacyClient reports whether s is a legacy client's session (not a
// modern request's, nor one mcpvisor holds for a listener).
func (s *Session) legacyClient() bool { return s.modern == nil && !s.listener }

// requester is who s's requests come from, as far as attributing a
// server's log lines goes: s itself, or, for a modern request over stdio,
// the connection's session — the requests of one stdio client are one
// requester, while each modern request over HTTP is its own (nothing
// there says two come from one client).
func (s *Session) requester() *Session {
	if s.client != nil {
		return s.client
	}
	return s
}

// NewSession returns a session whose unsolicited messages go to out.
// Endpoints call it from Open.
func NewSession(out Sink) *Session {
	return &Session{Created: time.Now(), out: out, key: "s" + strconv.FormatInt(sessionSeq.Add(1), 10)}
}

var sessionSeq atomic.Int64

// Key names the session uniquely within this mcpvisor process.
func (s *Session) Key() string { return s.key }

// Out is where messages related to no request go.
func (s *Session) Out() Sink { return s.out }
