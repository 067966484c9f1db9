// Package gateway is mcpvisor's client-facing MCP server: the aggregated
// endpoint (every server's tools, prompts and resources under one session,
// names prefixed) and one endpoint per server (that server alone, every
// method forwarded), over Streamable HTTP and stdio. It relays bytes: it
// reads the JSON-RPC envelope and the few params it routes on, and passes
// results through untouched.
package gateway

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// Version is reported as mcpvisor's serverInfo.version.
var Version = "0.1.0"

// Gateway routes client sessions to the fleet's servers and relays what the
// servers send back. It implements fleet.Hooks.
//
// Every message a server sends reaches only the client it belongs to: what
// a client request caused (progress, logging during it, a server request)
// goes to that request's stream; what cannot be tied to one request goes
// only to the sessions that asked for it (subscribers of a resource,
// sessions that set a log level), and what a session's private instance
// sends goes to that session alone.
type Gateway struct {
	fleet *fleet.Fleet
	log   *slog.Logger
	seq   atomic.Int64
	// The request timers, a queue for each timeout (deadlinesOf).
	deadlines sync.Map // time.Duration → *deadlines

	// reg is who asks what: the sessions, and the calls in flight with
	// what is tied to them (registry).
	reg *registry
	// outbox holds what waits to be written to each server (outbox.go).
	outbox    outboxes
	agg       *aggregate
	skills    skillIndex   // which server serves each skill on /mcp (skills.go)
	pageSize  atomic.Int64 // of the aggregated lists; 0: whole lists (SetPageSize)
	listeners listenerSet  // open subscriptions/listen requests
	// held are the calls held for a modern client's retry (mrtr.go), by
	// id; holdTimeout bounds each, stateKey signs their requestState.
	held        heldTable
	holdTimeout atomic.Int64 // a time.Duration; 0 means DefaultHoldTimeout (SetHoldTimeout)
	// policy decides requests and filters lists (SetPolicy; nil allows).
	policy atomic.Pointer[policy.Policy]
	// audit records every call and denial (SetAudit; nil: none); limits
	// bound each identity's calls (SetLimits; nil: none).
	audit   atomic.Pointer[audit.Log]
	denials atomic.Uint64 // requests the policy denied
	// scopeRefusals and auditRefusals count calls refused for a server
	// scope the token lacks, and while a failClosed audit could not keep
	// up; receiverRefusals, forwarded calls refused because the replica
	// that received them could not be asked (ReceiverRefusals).
	scopeRefusals, auditRefusals, receiverRefusals atomic.Uint64
	// serverScopes is what a call of a server through /mcp needs of a
	// token's scopes (SetServerScopes; nil: nothing).
	serverScopes atomic.Pointer[func(server string) []string]
	// rulesGen counts the changes of policy and serverScopes: list
	// answers made under older rules are not kept (policy.go).
	rulesGen atomic.Uint64
	limits   atomic.Pointer[ratelimit.Limiter]
	// stamper stamps the ids g issues with their owner replica
	// (SetStamper; nil: a single mcpvisor).
	stamper  Stamper
	stateKey []byte
	// tracing makes a span of each request forwarded to a server; nil:
	// off (SetTracing).
	tracing *telemetry.Tracing
	// interests is what each legacy session asked of each server — its
	// resource subscriptions and log level — recorded as the requests
	// pass; the fleet replays it to new processes and keeps a subscribed
	// instance awake (Interest, fleet.Options.Interest).
	interests *interest.Book
	// clients is which clients used which server, counted as each
	// request ends (flight.record); read by the status API (Clients).
	clients clientbook.Book
	// local counts the requests mcpvisor answers itself (answer.go).
	local telemetry.Local
	// tasks are the tasks clients were given ids for (tasks.go), whose
	// ids are sealed with taskCipher (made once, from stateKey).
	tasks       taskBook
	taskKeyOnce sync.Once
	taskCipher  cipher.AEAD
}

// Working reports whether the instance keyed key of s works on a task a
// client follows: it must not go dormant (fleet.TaskHolder).
func (g *Gateway) Working(s *fleet.Server, key string) bool { return g.tasks.Working(s, key) }

// SetTracing turns tracing on (t nil: off, the default): each client
// request forwarded to a server gets a span, whose trace context goes in
// the _meta of the request the server gets. Call before serving.
func (g *Gateway) SetTracing(t *telemetry.Tracing) { g.tracing = t }

// SetHoldTimeout sets how long a call held for a modern client's retry
// waits for it (0 or less: DefaultHoldTimeout): the calls held after it
// returns. Safe to call while serving.
func (g *Gateway) SetHoldTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultHoldTimeout
	}
	g.holdTimeout.Store(int64(d))
}

// holdFor is the bound of a call held now.
func (g *Gateway) holdFor() time.Duration {
	if d := time.Duration(g.holdTimeout.Load()); d > 0 {
		return d
	}
	return DefaultHoldTimeout
}

// defaultLinger is how long after a session's request on a server ends the
// server's unattributable lines may still be that session's: a server
// often logs just after it answers.
const defaultLinger = 5 * time.Second

// SetPageSize sets how many items one page of the aggregated endpoint's
// lists holds (0: whole lists, the default), from the next list on. Safe
// to call while serving.
func (g *Gateway) SetPageSize(n int) { g.pageSize.Store(int64(max(n, 0))) }

// New returns a gateway. Pass it as the fleet's Hooks, then attach the
// fleet with SetFleet.
func New(log *slog.Logger) *Gateway {
	if log == nil {
		log = slog.Default()
	}
	g := &Gateway{
		log:      log,
		reg:      newRegistry(),
		stateKey: newStateKey(),
	}
	g.interests = interest.New(log)
	g.agg = &aggregate{g: g}
	return g
}

// Interest is what the sessions asked of the servers, for the fleet
// (fleet.Options.Interest): it replays it to each new process of an
// instance, and an instance a session subscribed on stays awake.
func (g *Gateway) Interest() *interest.Book { return g.interests }

// Clients lists the clients whose requests reached s, by name
// (clientbook.Other last); nil when none did.
func (g *Gateway) Clients(s *fleet.Server) []clientbook.Use { return g.clients.Of(s) }

// SetFleet attaches the fleet; call once before serving. f must be made
// with Options.Interest set to g.Interest(): the fleet reads what
// sessions asked from the gateway's book, and tells it to forget an
// ended session's (DetachSession) — with another book, what ended
// sessions asked would be kept and replayed for ever. SetFleet panics if
// it is not.
func (g *Gateway) SetFleet(f *fleet.Fleet) {
	if b, ok := f.Interest().(*interest.Book); !ok || b != g.interests {
		panic("gateway: the fleet's Options.Interest is not the gateway's interest book (Gateway.Interest)")
	}
	g.fleet = f
}

// Aggregate is the endpoint that serves every server as one.
func (g *Gateway) Aggregate() Endpoint { return g.agg }

// Single is the endpoint of one server, or nil if there is none by that
// name.
func (g *Gateway) Single(name string) Endpoint {
	s := g.fleet.Get(name)
	if s == nil {
		return nil
	}
	return g.singleOf(s)
}

// singleOf is the endpoint of the server s.
func (g *Gateway) singleOf(s *fleet.Server) *single { return &single{g: g, srv: s} }

// sessState is the gateway's per-session state.
type sessState struct {
	// srv is the server of the session's endpoint; nil for the aggregated
	// one. The server itself, not its name: a server removed and added
	// again under its name is another, whose messages the sessions still
	// open on the removed one's endpoint (which drains) must not get.
	srv   *fleet.Server
	calls map[string]*call // in flight, by the client's id (for its cancellation)
	// inFlight are the calls in flight, whatever their id: a client may
	// send a request under the id of one still in flight.
	inFlight map[*call]struct{}
	caps     map[string]json.RawMessage
	closed   bool
	outReqs  map[string]*outReq
	protocol string
	idle     chan struct{} // closed when the last call of a closed session ends
}

// call is a client request in flight on a backend.
type call struct {
	from     sender
	st       *sessState // its legacy session's state; nil for a modern request
	clientID json.RawMessage
	token    json.RawMessage // the client's progress token, if any
	ourTok   string
	related  Sink
	conn     fleet.Conn
	cancel   func(cause error)
	// task is, for a 2025-11-25 tasks/result, the server's id of the
	// task whose result it waits for: the server's requests about that
	// task go to it (askForTask).
	task string
	// timer is the request timeout (nil: none). It is set before the
	// call reaches its server — before anything can touch it: progress
	// and server requests find the call only once begin put it in the
	// registry (addCall) — and never changes after.
	timer *reqTimer
	// waiting counts the server's requests relayed to the client and not
	// yet answered: while one is, the server waits on the client, and the
	// request timeout does not run out.
	waiting atomic.Int32
}

// touch restarts c's request timeout, if it has one.
func (c *call) touch() { c.timer.touch() }

// outReq is a server→client request forwarded to a client session.
type outReq struct {
	call      *call // the client request it was relayed for
	conn      fleet.Conn
	backendID json.RawMessage
	sess      *Session // the legacy session it was sent to
	timer     *time.Timer
	// answer, if set, takes the client's answer instead of conn: the
	// request is mcpvisor's own, asking a legacy client for the input a
	// modern server's input_required result names (inputrounds.go).
	answer chan *rpc.Message
}

// deliver hands the client's answer m (a response) to whoever asked.
func (g *Gateway) deliver(r *outReq, m *rpc.Message) {
	if r.answer != nil {
		select {
		case r.answer <- m:
		default:
		}
		return
	}
	// Written from the server's outbox: a server that stops reading
	// does not hold up this client's other messages.
	ok := g.outbox.post(r.conn, func() {
		if m.Error != nil {
			_ = r.conn.ReplyError(r.backendID, m.Error.Code, m.Error.Message)
		} else {
			_ = r.conn.Reply(r.backendID, m.Result)
		}
	})
	if !ok {
		g.log.Warn("answer to a server request dropped: the server is not reading its input", "server", r.conn.Name())
	}
}

// serves reports whether the session's endpoint serves srv.
func (st *sessState) serves(srv *fleet.Server) bool { return st.srv == nil || st.srv == srv }

// closeWait bounds how long a session's close waits for its cancelled
// requests to end, so that their cancellations reach the servers before
// the session's per-session instances are stopped.
const closeWait = 100 * time.Millisecond

func (g *Gateway) closeSession(s *Session) {
	st, calls, reqs, idle := g.reg.closeSession(s)
	if st == nil {
		return
	}
	for _, c := range calls {
		c.cancel(errSessionClosed)
	}
	if idle != nil {
		t := time.NewTimer(closeWait)
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
	}
	for _, r := range reqs {
		r.timer.Stop()
		g.deliver(r, &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError, Message: "the client session ended before it answered"}})
	}
	// What it asked of the servers — its subscriptions and log levels —
	// is forgotten at once (the fleet tells the interest book as it
	// detaches the session); what it held in the fleet — its per-session
	// instances — ends with it, bounded.
	g.tasks.endSession(s.Key())
	stop := g.fleet.DetachSession(s.Key())
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), sessionEndBound)
		defer cancel()
		stop(ctx)
	}()
}

// sessionEndBound bounds the stop of a closed session's per-session
// instances (the process layer kills what is left at its end).
const sessionEndBound = 30 * time.Second

func (g *Gateway) nextID(prefix string) string {
	return prefix + strconv.FormatInt(g.seq.Add(1), 10)
}

// secretID is an id no client can guess: the id of a server request
// relayed to a client, which only that client may answer.
func secretID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// audience lists the sessions a message from src that belongs to no
// request may reach: the session of a private instance alone, else every
// session that sees the server and has no private instance of it.
func (g *Gateway) audience(src fleet.Source) []*Session {
	if src.Identity != "" {
		// An identity's instance: that identity's sessions alone.
		var out []*Session
		for _, s := range g.reg.sessionsFor(src.Server) {
			if src.Reaches(s.Identity()) {
				out = append(out, s)
			}
		}
		return out
	}
	if src.Session != "" {
		if s := g.reg.sessionByKey(src.Session); s != nil {
			return []*Session{s}
		}
		return nil
	}
	all := g.reg.sessionsFor(src.Server)
	if !src.Server.Private() {
		return all
	}
	// A per-session or per-identity server's shared instance only learns
	// its lists: nobody's traffic.
	return nil
}

// SessionCapabilities is what the legacy client session key declared at
// initialize of the capabilities mcpvisor carries (roots, sampling,
// elicitation: no other, such as tasks, which it does not carry), as an
// object — {} if none, or for a session no longer open — for its
// per-session instance to declare to its server
// (fleet.SessionCapabilities); for a 2026-07-28 request's own instance,
// those its _meta declared.
func (g *Gateway) SessionCapabilities(key string) json.RawMessage {
	caps := g.reg.declared(key, g.ModernSession(key), carriedCapabilities)
	b, err := json.Marshal(caps)
	if err != nil { // a declared value that is not JSON: none of it
		return json.RawMessage(`{}`)
	}
	return b
}

// carriedCapabilities are the client capabilities whose requests mcpvisor
// carries from a server to a client (capabilityOf).
var carriedCapabilities = config.CarriedCapabilities

// errorResponse builds a JSON-RPC error response for the client.
func errorResponse(id json.RawMessage, code int, msg string) *rpc.Message {
	return &rpc.Message{ID: id, Error: &rpc.Error{Code: code, Message: msg}}
}

// unavailable is the error response of a request whose server could not
// be had: msg says why; when the server failed to start, the error's data
// says at which stage and carries the last lines the server wrote to
// stderr (secrets redacted), the reason in its own words — and, in a crash
// loop, how many starts in a row failed and when it is tried again. A
// server that needs a login is answered with its NeedsLoginError.
func unavailable(id json.RawMessage, code int, msg string, err error) *rpc.Message {
	m := errorResponse(id, code, msg)
	var nl *fleet.NeedsLoginError
	var se *fleet.StartError
	if errors.As(err, &nl) {
		// Whatever carried it (a connection that ended for it, a failed
		// start), the answer is the login's: what to run, in its words.
		m.Error.Data = nl.RPCError().Data
		if code == rpc.BackendUnavailable {
			m.Error.Message = nl.Error()
		}
	} else if errors.As(err, &se) {
		data := map[string]any{"server": se.Server, "stage": se.Stage, "stderr": se.Stderr}
		if le := (*fleet.LoopError)(nil); errors.As(err, &le) {
			data["crashLoop"] = map[string]any{"failures": le.Failures, "nextAttempt": le.Next}
		}
		m.Error.Data, _ = json.Marshal(data)
	}
	return m
}

func resultResponse(id, result json.RawMessage) *rpc.Message {
	return &rpc.Message{ID: id, Result: result}
}
