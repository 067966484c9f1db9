package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Conn is a live, initialized connection to one instance of a server, as
// the front uses it. *backend.Conn is one.
type Conn interface {
	// Name is the server's configured name.
	Name() string
	// Init is what the server answered to initialize.
	Init() *InitResult
	// Call sends a request and waits for its response, bounded by ctx.
	Call(ctx context.Context, method string, params json.RawMessage) (*rpc.Message, error)
	// Start is Call with the wait left to the caller (see
	// rpc.Conn.Start): a wait may be interrupted and taken up elsewhere.
	Start(ctx context.Context, method string, params json.RawMessage) (rpc.Waiter, error)
	// Notify sends a notification (bounded: see rpc.Conn.Notify).
	Notify(method string, params json.RawMessage) error
	// Reply and ReplyError answer a request the server sent.
	Reply(id, result json.RawMessage) error
	ReplyError(id json.RawMessage, code int, msg string) error
}

// InitResult is a server's initialize result.
type InitResult = backend.InitResult

// Source says where a message from a server came from: the server, the
// client session whose private instance sent it ("" for the shared
// instance) and the connection.
type Source struct {
	Server *Server
	// Session is the key of the private instance that sent it: a client
	// session's, or, for a per-identity server, its identity's instance
	// key (Server.InstanceKey), which is no session's; "" for the shared
	// instance.
	Session string
	// Identity is the identity key (IdentityKey) of a per-identity
	// server's instance, else "": what it sends on its own is that
	// identity's alone (Reaches).
	Identity string
	Conn     Conn
	// Sole is the only client session that has used this connection
	// (taken a lease on it) since it was made, or "" when none or several
	// have: every message of the connection is then that session's.
	Sole string
}

// Hooks receive what servers send on their own. Both are called on the
// connection's read goroutine and must not block, nor write to the server
// there: a Request hook answers through Conn.Reply or Conn.ReplyError from
// another goroutine. The fleet has already counted the message as the
// instance's activity.
type Hooks interface {
	Notification(src Source, m *rpc.Message)
	Request(src Source, m *rpc.Message)
}

// ModernSessions is a Hooks that tells which client sessions are modern
// requests': a per-session server's instance for one of those is started
// as a modern server (probed first), with no second process for modern
// clients — only its request uses it (backend.StdioConnector.ModernFirst).
type ModernSessions interface {
	ModernSession(key string) bool
}

// SessionCapabilities is implemented by an Options.Hooks that knows what
// each client session declared: a per-session instance is started
// declaring exactly its session's capabilities (an object), so that the
// server asks only what its client answers, as it would directly. nil
// keeps what mcpvisor declares to a shared instance: all it carries.
type SessionCapabilities interface {
	SessionCapabilities(key string) json.RawMessage
}

// Lease is one request's hold on a server instance: while it is held the
// request counts as in flight, so the instance does not go dormant.
// Release it exactly once when the request is done (more calls do
// nothing); it re-arms the idle timer of the instance it counted on, and
// never creates or resurrects an instance.
type Lease struct {
	in   *instance
	live Live // the connection leased
	conn Conn // live, when it is an MCP connection (else nil)
	once sync.Once
	woke time.Duration
	own  bool  // mcpvisor's own (Peek), not a client's request
	seq  int64 // the request's number (instance.begin); 0: a lease on the running connection
}

// Woke is how long Acquire waited for the instance to start from dormant
// (a wake this request caused or joined); 0 when it did not.
func (l *Lease) Woke() time.Duration { return l.woke }

// Conn is the leased connection.
func (l *Lease) Conn() Conn { return l.conn }

// Answered tells that the server answered the client's request this
// lease is for (with a result or a JSON-RPC error): the run did useful
// work, and its end counts as no failure (lifecycle.Answerer). mcpvisor's
// own requests are not told: a server that answers only those and dies
// is in a crash loop. Safe to call concurrently, and more than once.
func (l *Lease) Answered() {
	if a, ok := l.live.(interface{ MarkAnswered() }); ok {
		a.MarkAnswered()
	}
}

// Release ends the lease. Safe to call more than once and concurrently;
// only the first call counts.
func (l *Lease) Release() { l.once.Do(l.release) }

func (l *Lease) release() { l.in.release(l.own, l.seq) }

// Acquire leases a live connection of the server for session (the
// instance of that session when the server is per-session, else the shared
// one), starting or respawning the process if needed: concurrent callers
// share one spawn and its outcome. The request counts as in flight from
// before the start, so the instance cannot go dormant under it. ctx bounds
// the wait, not the spawn.
//
// A server the operator stopped, or a reload removed, refuses: the error
// says which. An instance taken out of service while the caller waited on
// it (a restart, a reload that changed how the server is launched) sends
// the caller on to the instance that replaced it.
func (s *Server) Acquire(ctx context.Context, session string) (*Lease, error) {
	for {
		if err := s.refused(); err != nil {
			return nil, err
		}
		if err := s.loginRefusal(); err != nil {
			return nil, err
		}
		in, err := s.instanceFor(ctx, session)
		if err != nil {
			return nil, err
		}
		seq := in.begin()
		t0 := time.Now()
		l, woke, err := in.acquire(ctx)
		if errors.Is(err, errRetired) {
			in.end(seq)
			continue
		}
		if err != nil {
			in.end(seq)
			return nil, s.asLoginError(err)
		}
		in.used(l, session)
		c, _ := l.(Conn)
		lease := &Lease{in: in, live: l, conn: c, seq: seq}
		if woke {
			lease.woke = time.Since(t0)
		}
		return lease, nil
	}
}

// TryAcquire is Acquire without a wait: it leases session's instance when
// it is running and ready, counted as a request like Acquire, and reports
// false otherwise (nothing counted, nothing started, no instance created).
// It is the hot path of a request to a running server, which needs no
// start timeout.
func (s *Server) TryAcquire(session string) (*Lease, bool) { return s.leaseRunning(session, true) }

// Peek leases the running connection of session's instance without
// starting anything: ok is false when that instance does not exist or is
// not running. The lease holds the instance awake like any other, but is
// not counted among the server's requests (Status.Requests). A client
// notification goes through Peek: it has nothing to say to a server that is
// not running.
func (s *Server) Peek(session string) (l *Lease, ok bool) { return s.leaseRunning(session, false) }

// leaseRunning leases session's instance if it exists and runs, as a
// request when request is set; otherwise it counts, creates and starts
// nothing.
func (s *Server) leaseRunning(session string, request bool) (*Lease, bool) {
	if s.refused() != nil {
		return nil, false
	}
	in := s.instanceOf(session)
	if in == nil {
		return nil, false
	}
	cur := in.leaseRunning(session, request)
	if cur == nil {
		return nil, false
	}
	c, _ := cur.(Conn)
	return &Lease{in: in, live: cur, conn: c, own: !request}, true
}

// instanceOf is the instance that serves session if there is one: the
// shared one unless the server is per-session and session is set, else
// session's own instance or nil. It creates nothing.
func (s *Server) instanceOf(session string) *instance {
	if !s.Private() || session == "" {
		return s.sharedIn()
	}
	if _, ok := identityOfKey(session); ok != s.PerIdentity() {
		return nil // not a key of this server's instances (InstanceKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perSession[session]
}

// instanceFor is the instance that serves session, as instanceOf, with
// session's per-session instance created when it has none: only below the
// instance limit, which counts the instances still stopping
// (DetachSession) with those that run: a process is a process until it
// is gone. At the limit, while some are stopping (or, on a per-identity
// server, an identity's instance goes to sleep, idle: releaseIdentity),
// it waits for one to be gone, within ctx.
func (s *Server) instanceFor(ctx context.Context, session string) (*instance, error) {
	if !s.Private() || session == "" {
		return s.sharedIn(), nil
	}
	_, perIdentity := identityOfKey(session)
	if perIdentity != s.PerIdentity() {
		if perIdentity {
			return nil, fmt.Errorf("server %s: an identity's instance key for a server that is not per-identity", s.Name())
		}
		return nil, errNoIdentity(s.Name())
	}
	each := "one per client session"
	if perIdentity {
		each = "one per identity"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if in := s.perSession[session]; in != nil {
			return in, nil
		}
		if err := s.refused(); err != nil {
			return nil, err // stopped or removed while this caller waited for a place
		}
		if !perIdentity && s.f.sessionEnded(session) {
			return nil, fmt.Errorf("server %s: the client session has ended", s.Name())
		}
		max := s.Config().MaxInstances
		if max <= 0 || len(s.perSession)+s.stopping < max {
			break
		}
		if s.stopping == 0 && !(perIdentity && s.identityStoppingLocked()) {
			return nil, fmt.Errorf("%w: server %s runs %d instances, %s (maxInstances %d)", ErrInstanceLimit, s.Name(), len(s.perSession)+s.stopping, each, max)
		}
		if s.freed == nil {
			s.freed = make(chan struct{})
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			return nil, fmt.Errorf("%w: server %s runs %d instances (maxInstances %d), and none stopped in time: %v", ErrInstanceLimit, s.Name(), len(s.perSession)+s.stopping, max, context.Cause(ctx))
		}
	}
	if _, _, known := s.whoFor(session); !known {
		return nil, fmt.Errorf("server %s: no identity is known for instance key %s (lease it under Server.InstanceKey)", s.Name(), session)
	}
	in := s.newInstance(session)
	if s.perSession == nil {
		s.perSession = map[string]*instance{}
	}
	s.perSession[session] = in
	return in, nil
}
