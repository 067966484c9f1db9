package gateway

import (
	"context"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
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

// Session is one legacy (2025) client session: an Mcp-Session-Id on the
// HTTP front, the single client of the stdio front — or one mcpvisor
// holds for a subscriptions/listen request's resource subscriptions
// (listener). A 2026-07-28 request has none (modernReq). The gateway
// keeps each open one in its session table (sessionTable).
type Session struct {
	// ID is assigned by the transport (empty for stdio).
	ID      string
	Created time.Time
	out     Sink
	key     string // unique in this process: names per-session instances

	mu sync.Mutex // guards writes of ident

	// listener: the session holds a subscriptions/listen request's
	// resource subscriptions — mcpvisor's own, no client's: what it
	// forwards is no legacy client's activity.
	listener bool
	// ident is who the session's client says it is (identity.go); nil
	// until it says so or is given a hint. Written under mu.
	ident atomic.Pointer[clientIdent]
	// user is who the session's client is, as mcpvisor verified it (a
	// token's subject, the local user): set once, by the front, before
	// the session's first message is handled. nil: anonymous.
	user atomic.Pointer[identity.Identity]
	// endpoint is the server whose own endpoint the session is on; nil
	// for the aggregated one. Set before the session is used.
	endpoint *fleet.Server
}

// Identity is who the session's client is, as verified (nil: anonymous).
func (s *Session) Identity() *identity.Identity { return s.user.Load() }

// SetIdentity sets who the session's client is; the front calls it once,
// before the session's first message.
func (s *Session) SetIdentity(id *identity.Identity) { s.user.Store(id) }

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
