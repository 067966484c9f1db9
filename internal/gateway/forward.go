package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
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
func (g *Gateway) forward(ctx context.Context, w sender, srv *fleet.Server, method string, params json.RawMessage, clientID json.RawMessage, related Sink) *rpc.Message {
	var run uint64
	resp := g.forwardOnce(ctx, w, srv, method, params, clientID, related, &run)
	if method == "tools/call" && resp.Result != nil && bytes.Contains(resp.Result, taskIDKey) {
		// A call answered with a task: its id becomes mcpvisor's.
		if run == 0 {
			run = eraRun(w, srv) // a held call's: the process of its era now
		}
		return g.taskCreated(w, srv, run, resp)
	}
	return resp
}

// forwardOnce is forward but for what it does to a result; *run is set
// to the run (fleet.ConnRun) of the process the request was sent to, when
// it was sent in one flight (not held across rounds).
func (g *Gateway) forwardOnce(ctx context.Context, w sender, srv *fleet.Server, method string, params json.RawMessage, clientID json.RawMessage, related Sink, run *uint64) *rpc.Message {
	if fm, ok := related.(forwardMarker); ok {
		fm.markForwarded() // counted and traced as its server's call, not as mcpvisor's answer
	}
	r := w.req
	if r != nil && r.held == nil && mrtrMethod(method) && r.mo.givesInput() {
		// A modern client's call that may need its input: held across
		// rounds.
		return g.forwardHeld(ctx, r, srv, &rpc.Message{ID: clientID, Method: method}, params, related)
	}
	var cancel context.CancelCauseFunc
	if r != nil && r.held == nil && r.mo.cancel != nil && ctx == r.mo.ctx {
		// A modern request's context is its own: its forward ends it.
		// Only a forward given that very context takes it; any other
		// (skills/list's fan-out gives each server's a context derived
		// from the request's, and a request of its own) derives its
		// own, and so must begin before the first ends — after, the
		// request's context has ended.
		cancel, r.mo.cancel = r.mo.cancel, nil
	}
	f, resp := g.begin(ctx, cancel, w, srv, method, params, clientID, related)
	if resp != nil {
		return resp
	}
	sr, err := f.send()
	*run = fleet.ConnRun(f.conn)
	resp = f.finish(sr, err)
	if r != nil {
		if need := r.needCap.Load(); need != nil {
			// The server asked for input the client declared no
			// capability for, and was refused (Request).
			return capabilityError(clientID, f.name, *need)
		}
	}
	return resp
}

// arrivalKey is the context key of a request's arrival time (withArrival).
type arrivalKey struct{}

// withArrival records in ctx when its request arrived, for a request that
// waited before it was forwarded (an aggregated list built, a tool's
// schema learned): its timeout counts from then.
func withArrival(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, arrivalKey{}, t)
}

// arrival is when ctx's request arrived: as withArrival recorded it, else
// now.
func arrival(ctx context.Context) time.Time {
	if t, ok := ctx.Value(arrivalKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}

// flight is a request forward has begun at its server: what its end
// (finish) needs.
type flight struct {
	g *Gateway
	// ctx is f's context: as begin was given it, or, when f's cancel is
	// its own, made on first use (context). cancel ends f: the one begin
	// was given, or stop.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// With a cancel of its own, a flight derives no context per request
	// (context.WithCancelCause costs a request several allocations and
	// registers with the request's context): its request to the server
	// waits on parent and on abort, closed by stop; only a wait that
	// needs a context (a start, the pin check, …) makes one, ended by
	// stop too. cause is why stop ended f.
	own          bool
	parent       context.Context
	abort        chan struct{}
	ownMu        sync.Mutex
	cause        error
	stopCtx      context.CancelCauseFunc
	c            *call
	key          string
	from         sender
	mo           *Modern // from.modern() as it began: a held call's later rounds replace it (registry.nextRound)
	name, method string
	params       json.RawMessage // as the server gets them
	clientID     json.RawMessage
	timeout      time.Duration
	lease        *fleet.Lease
	conn         fleet.Conn
	timer        *reqTimer // &rt when the request has a timeout

	// The call and the timer, allocated with the flight.
	call call
	rt   reqTimer

	// What its end records (end): when it began, its server, the tool or
	// prompt it names, how it ended; its span, with tracing on.
	start  time.Time
	srv    *fleet.Server
	target []byte // the tool or prompt it names, as the server knows it (aliases the request; nil if escaped)

	// For a use of a server's item (decided): what the policy is asked,
	// and the audit's target and copy of the arguments; refused, it was
	// answered before it began (its audit line written then).
	who         *identity.Identity // the request's own identity (requestIdentity)
	recv        *Receiver          // the replica the request was forwarded from, if governed (receiverOf)
	preq        *policy.Request
	auditTarget string
	auditArgs   json.RawMessage
	refused     bool
	outcome     telemetry.Outcome
	// legacyToModern: a legacy client's request to a modern server
	// (serverParams). Kept with the other small fields, which share a
	// word: the flight stays in its allocation size class.
	legacyToModern bool
	code           int // the JSON-RPC error code of a protocol error
	received       int // bytes of the server's result or error
	tr             *flightSpan
}

// flightSpan is what a flight's span needs: made only with tracing on.
type flightSpan struct {
	span     telemetry.Span
	target   string // the tool or prompt it names
	protocol string // the client's MCP revision
	msg      string // the error message of a failure
}

// begin does what forward does before the request reaches its server: the
// call is registered, the server leased (started, if need be), the
// request timer armed, the params put in the server's era. It returns the
// flight, or the response for the client if the request ends before it
// reaches the server. The flight's context is ctx with a cancel of its
// own, or, when cancel is given, ctx itself, ended by cancel (a held call
// brings its own).
func (g *Gateway) begin(ctx context.Context, cancel context.CancelCauseFunc, w sender, srv *fleet.Server, method string, params json.RawMessage, clientID json.RawMessage, related Sink) (*flight, *rpc.Message) {
	f, raw := g.newFlight(ctx, cancel, w, srv, method, params, clientID, related)
	// The policy, the audit's room and the rate limits first: a refused
	// use of a server's item starts nothing.
	if decided(method) && g.governed() && !f.who.Decided() {
		// A call forwarded by the replica that received it is limited
		// and audited there (receiver.go): looked up once, here.
		f.recv = receiverOf(ctx)
		// The limits first: a flood of refused calls is limited as one
		// of served calls is, and writes no more audit lines.
		if resp := g.prepare(f, raw, params); resp != nil {
			return nil, resp
		}
		if resp := g.admit(f); resp != nil {
			return nil, resp
		}
		if resp := g.scoped(f); resp != nil {
			return nil, resp
		}
		if resp := g.permit(f); resp != nil {
			return nil, resp
		}
	}
	// The call is the sender's from the start, before its server is
	// reached: a cancellation or the session's end that comes while the
	// server starts or restarts cancels it there, and it never runs.
	if resp := g.reg.register(f, srv); resp != nil {
		return nil, resp
	}
	// The request's timeout runs from its arrival, over everything before
	// it reaches its server too: a start or restart, a dual-era server's
	// process for modern clients, the pin check.
	f.armTimer(f.c)
	if resp := f.reach(raw); resp != nil {
		return nil, resp
	}
	params, resp := f.serverParams(params)
	if resp != nil {
		return nil, resp
	}
	if g.tracing != nil {
		params = f.tr.span.Inject(params) // the server's spans join the client's trace
	}
	f.params = params
	g.reg.addCall(f.c, f.conn)
	if f.err() != nil || f.timeout > 0 && time.Since(f.start) >= f.timeout {
		// Cancelled, or out of time (its timer may not have fired yet),
		// as the lease was granted: nothing was sent.
		defer f.end()
		if f.err() == nil {
			f.cancel(errTimeout)
		}
		return nil, f.notReached(nil)
	}
	return f, nil
}

// newFlight is the flight of w's request to srv, not yet begun: its
// target, its span (tracing on), its context and its call. raw is the
// tool or prompt the request names, as the server knows it.
func (g *Gateway) newFlight(ctx context.Context, cancel context.CancelCauseFunc, w sender, srv *fleet.Server, method string, params json.RawMessage, clientID json.RawMessage, related Sink) (f *flight, raw json.RawMessage) {
	f = &flight{g: g, from: w, mo: w.modern(), name: srv.Name(), method: method, clientID: clientID, timeout: srv.Config().RequestTimeout,
		start: arrival(ctx), srv: srv, who: requestIdentity(ctx, w)}
	switch method {
	case "tools/call", "prompts/get":
		if w.req != nil {
			raw = w.req.rename // a modern request's: the server's own name, put in later
		}
		if raw == nil {
			raw = rpc.Member(params, "name")
		}
		f.target = plainString(raw)
	}
	if g.tracing != nil {
		target, _ := rpc.String(raw) // escapes decoded, for the span alone
		f.tr = &flightSpan{span: g.tracing.Start(ctx, method, spanTarget(srv, method, f.target), params), target: target}
		if w.req != nil {
			f.tr.protocol = modernVersion
		}
	}
	if cancel != nil {
		f.ctx, f.cancel = ctx, cancel
	} else {
		f.own, f.parent, f.abort = true, ctx, make(chan struct{})
		f.cancel = f.stop
	}
	f.call = call{from: w, clientID: clientID, related: related, cancel: f.cancel}
	if method == "tasks/result" {
		f.call.task, _ = rpc.StringMember(params, "taskId")
	}
	f.c, f.key = &f.call, string(clientID)
	return f, raw
}

// reach leases f's server (starting it, if need be) and picks the
// connection its request goes on: for a modern request, the server's
// process of that era. A pinned server's tool (raw) is checked on the
// process that would serve it. It returns the client's answer if the
// request ends before (f has then ended).
func (f *flight) reach(raw json.RawMessage) *rpc.Message {
	// The lease counts the request in flight from before the start to
	// the end, so the server cannot go dormant under it. A running server
	// is leased at once; only a start or restart is waited for, bounded.
	srv, key := f.srv, f.srv.InstanceKey(f.from.key(), f.from.identity())
	lease, ok := srv.TryAcquire(key)
	if !ok {
		var err error
		if lease, err = srv.Acquire(f.context(), key); err != nil {
			defer f.end()
			return f.notReached(err)
		}
	}
	f.lease = lease
	conn := lease.Conn()
	if f.from.req != nil && conn != nil {
		// A modern client's request goes to the server in its own era:
		// a dual-era server's process for modern clients (started the
		// first time), a modern server; or, as a held call, a legacy one.
		m, err := lease.ModernConn(f.context())
		if err != nil {
			defer f.end()
			return f.notReached(err)
		}
		if m != nil {
			conn = m
		}
	}
	f.conn = conn
	if strings.HasPrefix(f.method, "tasks/") {
		// A task's request goes only to the process that holds the
		// task: a server restarted since may reuse its id for another
		// client's task.
		if want, ok := f.valueCtx().Value(taskRunKey{}).(uint64); ok && fleet.ConnRun(conn) != want {
			defer f.end()
			f.set(telemetry.ProtocolError, rpc.InvalidParams, "the task's process has ended")
			return errorResponse(f.clientID, rpc.InvalidParams, f.method+": the task is gone: server "+srv.Name()+
				" has restarted since (a new process), and a task lives only in the process that was working on it")
		}
	}
	if f.method == "tools/call" && srv.Config().Pin {
		// Checked on the process that would serve it, with its list as
		// that process lists it (catalog.Catalog.CheckTool).
		tool, _ := rpc.String(raw)
		if err := srv.Catalog().CheckTool(f.context(), lease.Process(), tool); err != nil {
			defer f.end()
			if he := (*catalog.HeldError)(nil); errors.As(err, &he) {
				f.set(telemetry.ProtocolError, rpc.InvalidParams, err.Error())
				return heldTool(f.clientID, he)
			}
			return f.notReached(err)
		}
	}
	return nil
}

// serverParams are the params of f's request as its server gets them
// (serverEra), with the client's progress token replaced by one of
// mcpvisor's own, by which the server's progress finds the call. A
// legacy client's request the modern era has no method for is answered
// here (resp; f has then ended).
func (f *flight) serverParams(params json.RawMessage) (_ json.RawMessage, resp *rpc.Message) {
	toModern := modernConn(f.conn)
	f.legacyToModern = f.from.req == nil && toModern
	if f.legacyToModern {
		if resp := f.answerLegacyOnly(f.conn); resp != nil {
			return nil, resp
		}
	}
	params = f.g.serverEra(f.c, f.srv, f.method, params, toModern)
	// (A modern request's _meta was read whole: whether it has a token is
	// known.)
	if r := f.from.req; r == nil || r.mo.hasToken {
		if tok := rpc.ProgressToken(params); tok != nil {
			c := f.c
			c.token = tok
			c.ourTok = f.g.nextID("mcpv-p")
			params, _ = rpc.ReplaceProgressToken(params, json.RawMessage(strconv.Quote(c.ourTok)))
		}
	}
	return params, nil
}

// serverEra is the params of c's request, of method, in the era of the
// connection it goes on (toModern: a modern server, or a dual-era
// server's process for modern clients) — the one place a request's
// params change era. A modern request's lose what a legacy server's
// session does not have (modernParams) and the capabilities srv's config
// withholds; a legacy session's, to a modern server, gain the _meta the
// modern era carries in each request (legacyMeta).
func (g *Gateway) serverEra(c *call, srv *fleet.Server, method string, params json.RawMessage, toModern bool) json.RawMessage {
	if r := c.from.req; r != nil {
		params = modernParams(r, params, toModern)
		cfg := srv.Config()
		if cfg.ClientCapabilities != nil {
			params = narrowCapabilities(params, cfg)
		}
		if cfg.PerSession() && declaresExtension(r.mo.Caps, tasksExtension) {
			// The request's own instance ends with it: a task it began
			// would end unfinished. Not declared, the server answers
			// the call itself (or says it needs a task).
			params = withoutExtension(params, tasksExtension)
		}
		return params
	}
	if toModern {
		return g.legacyMeta(c, srv, method, params)
	}
	return params
}

// senderEnded ends f, whose sender ended before its call was registered,
// and is the client's answer.
func (f *flight) senderEnded() *rpc.Message {
	f.cancel(nil)
	f.record(telemetry.Cancelled, 0, "session closed")
	return errorResponse(f.clientID, rpc.InvalidRequest, "session closed")
}

// aborter is a connection whose requests can be bounded by a channel as
// well as by a context (backend.Conn).
type aborter interface {
	CallAbort(ctx context.Context, abort <-chan struct{}, cause func() error, method string, params json.RawMessage) (*rpc.Message, error)
}

// send sends f's request to its server and waits for the response, until
// f ends.
func (f *flight) send() (*rpc.Message, error) {
	if f.own {
		if a, ok := f.conn.(aborter); ok {
			return a.CallAbort(f.parent, f.abort, f.causeErr, f.method, f.params)
		}
	}
	return f.conn.Call(f.context(), f.method, f.params)
}

// valueCtx is the context f's values are read from (its parent's, when
// f's context is its own and not made yet).
func (f *flight) valueCtx() context.Context {
	if f.own {
		return f.parent
	}
	return f.ctx
}

// context is f's context: ended when f is (stop) or its parent is.
func (f *flight) context() context.Context {
	if !f.own {
		return f.ctx
	}
	f.ownMu.Lock()
	defer f.ownMu.Unlock()
	if f.ctx == nil {
		f.ctx, f.stopCtx = context.WithCancelCause(f.parent)
		if f.cause != nil {
			f.stopCtx(f.cause)
		}
	}
	return f.ctx
}

// stop ends f (its own cancel): the first call's cause is kept (nil:
// context.Canceled), unless f's parent ended before — then the parent's
// cause is f's, as for a context derived from it.
func (f *flight) stop(cause error) {
	f.ownMu.Lock()
	if f.cause != nil {
		f.ownMu.Unlock()
		return
	}
	switch {
	case f.parent.Err() != nil:
		cause = context.Cause(f.parent)
	case cause == nil:
		cause = context.Canceled
	}
	f.cause = cause
	close(f.abort)
	stopCtx := f.stopCtx
	f.ownMu.Unlock()
	if stopCtx != nil {
		stopCtx(cause)
	}
}

// err is the error of f's context: nil until f or its parent ended.
func (f *flight) err() error {
	if !f.own {
		return f.ctx.Err()
	}
	f.ownMu.Lock()
	ended := f.cause != nil
	f.ownMu.Unlock()
	if ended {
		return context.Canceled
	}
	return f.parent.Err()
}

// causeErr is the cause of f's context's end (context.Cause), nil until
// it ended.
func (f *flight) causeErr() error {
	if !f.own {
		return context.Cause(f.ctx)
	}
	f.ownMu.Lock()
	cause := f.cause
	f.ownMu.Unlock()
	if cause != nil {
		return cause
	}
	return context.Cause(f.parent)
}

// modernParams are the params of modern request r as its server gets
// them. A legacy server serves the request in the 2025 session mcpvisor
// opened: the revision's version key is not that session's. What the
// request says of its client stays — a server that reads capabilities
// per request (as the go-sdk's does in either era) then honours this
// client's, not the union mcpvisor declared at initialize. The tool's
// name as the server knows it (r.rename, taken) goes in with the same
// copy.
func modernParams(r *modernReq, params json.RawMessage, modernConn bool) json.RawMessage {
	var drop []string
	if !modernConn {
		drop = []string{metaProtocolVersion}
	}
	name := ""
	if r.rename != nil {
		name = "name"
	}
	if name != "" || drop != nil {
		params, _ = rpc.EditParams(params, name, r.rename, drop...)
	}
	r.rename = nil
	if !modernConn && bytes.Contains(params, legacyTaskParam) {
		// The 2025-11-25 revision's request for a task, which a
		// 2026-07-28 request may carry but its revision ignores
		// (SEP-2663): a legacy server would make a task the client
		// cannot follow.
		params = rpc.DropMembers(params, []string{"task"}, nil)
	}
	return params
}

// legacyTaskParam is in the params of a request for a 2025-11-25 task.
var legacyTaskParam = []byte(`"task"`)

// narrowCapabilities is params, a modern request's, with its client's
// capabilities in _meta left without those the server's config does not
// let mcpvisor declare to it ("clientCapabilities"); params itself when
// there are none to leave out.
func narrowCapabilities(params json.RawMessage, cfg *config.Server) json.RawMessage {
	meta := rpc.Member(params, "_meta")
	var caps map[string]json.RawMessage
	if json.Unmarshal(rpc.Member(meta, metaClientCaps), &caps) != nil {
		return params
	}
	n := len(caps)
	for name := range caps {
		if withheld(cfg, name) {
			delete(caps, name)
		}
	}
	if len(caps) == n {
		return params
	}
	meta, _ = rpc.ReplaceMember(meta, metaClientCaps, mustJSON(caps))
	out, _ := rpc.ReplaceMember(params, "_meta", meta)
	return out
}

// withheld reports whether client capability name is one mcpvisor carries
// that cfg does not let it declare to the server ("clientCapabilities").
func withheld(cfg *config.Server, name string) bool {
	return !cfg.Declares(name) && slices.Contains(config.CarriedCapabilities, name)
}

// modernConn reports whether conn's server is spoken to in the modern era
// (a modern server, or a dual-era server's process for modern clients).
func modernConn(conn fleet.Conn) bool {
	if conn == nil {
		return false
	}
	in := conn.Init()
	return in != nil && in.ProtocolVersion == modernVersion
}

// answerLegacyOnly answers, and ends, a legacy client's request of a
// method the 2026-07-28 revision does not have, sent to a modern
// server: nil for any other method, which is forwarded.
func (f *flight) answerLegacyOnly(conn fleet.Conn) *rpc.Message {
	switch f.method {
	case "logging/setLevel":
		// Recorded by the caller; a modern server gets the level in
		// each of the session's requests.
		f.end()
		return resultResponse(f.clientID, json.RawMessage(`{}`))
	case "resources/subscribe", "resources/unsubscribe":
		// The revision has no such method: the subscriptions of the
		// instance's sessions (recorded by forwardSubscription) go in
		// mcpvisor's subscriptions/listen on the server, whose
		// updates come back as notifications/resources/updated.
		rs, ok := conn.(interest.ResourceSubscriber)
		if !ok || !rs.Modern() {
			msg := fmt.Sprintf("server %s speaks MCP %s, which has no %s", f.name, modernVersion, f.method)
			f.set(telemetry.ProtocolError, rpc.MethodNotFound, msg)
			f.end()
			return errorResponse(f.clientID, rpc.MethodNotFound, msg)
		}
		f.g.interests.Sync(rs, f.srv, bookInstance(f.srv, f.from))
		f.end()
		return resultResponse(f.clientID, json.RawMessage(`{}`))
	}
	return nil
}

// armTimer arms f's request timer, counted from f.start, as c's timer:
// the timeout restarts whenever the server reports progress or gets the
// client's answer to a request of its (call.touch), and does not run out
// while such a request waits for the client. When it runs out, f ends
// (its cancel) with errTimeout.
func (f *flight) armTimer(c *call) {
	if f.timeout <= 0 {
		return
	}
	rt := &f.rt
	rt.cancel, rt.waiting = f.cancel, &c.waiting
	f.g.deadlinesOf(f.timeout).add(rt, f.start)
	f.timer, c.timer = rt, rt
}

// notReached records why f ended before it reached its server — err, the
// fleet's (it names the server), or f's context: cancelled, or its
// timeout run out while it waited (for a start, a restart, …) — and is
// the client's answer.
func (f *flight) notReached(err error) *rpc.Message {
	// err first: a cause read first could be nil with err set by an end
	// in between.
	ended := f.err() != nil
	switch cause := f.causeErr(); {
	case errors.Is(cause, errTimeout):
		msg := fmt.Sprintf("server %s did not answer %s within %v", f.name, f.method, f.timeout)
		if we := (*fleet.WaitError)(nil); errors.As(err, &we) {
			msg += ": it was still " + we.For
			if we.Why != "" {
				msg += " (" + we.Why + ")"
			}
		} else if err != nil {
			msg += ": " + err.Error()
		}
		out := unavailable(f.clientID, rpc.RequestTimeout, msg, err)
		f.set(telemetry.Timeout, 0, out.Error.Message)
		return out
	case ended:
		f.set(telemetry.Cancelled, 0, cause.Error())
		return errorResponse(f.clientID, rpc.BackendUnavailable, fmt.Sprintf("request to server %s cancelled: %v", f.name, cause))
	}
	code := rpc.BackendUnavailable
	if errors.Is(err, fleet.ErrInstanceLimit) {
		code = rpc.LimitReached
	}
	f.set(telemetry.Unavailable, 0, err.Error())
	// The fleet's errors name the server: said once.
	return unavailable(f.clientID, code, err.Error(), err)
}

// finish ends f with the server's response (or the error that stood for
// it) and returns the response for the client.
func (f *flight) finish(resp *rpc.Message, err error) *rpc.Message {
	defer f.end()
	g, name, method, clientID := f.g, f.name, f.method, f.clientID
	if err == nil && f.legacyToModern && resp.Error == nil {
		// A modern server's result, for a legacy client: its input
		// requests asked of the client, then what only the modern era
		// has left out (the one translation of results into the legacy
		// era: revision.ToLegacyResult).
		resp, err = g.fulfil(f.context(), f.c, f.srv, f.conn, method, f.params, resp)
		if err == nil && resp.Result != nil {
			if t, ok := rpc.StringMember(resp.Result, "resultType"); ok && t != "complete" {
				// Not fulfilled (fulfil takes input_required it can
				// read), or a type of a later revision: nothing a
				// legacy client can read.
				resp = &rpc.Message{Error: &rpc.Error{Code: rpc.InternalError,
					Message: fmt.Sprintf("server %s answered %s with a result of type %q, which a client of the 2025 revisions cannot read", name, method, t)}}
			} else {
				resp.Result = revision.ToLegacyResult(method, resp.Result)
			}
		}
	}
	if err != nil && f.err() != nil {
		g.reg.abandon(f.conn, f.from, f.timeout)
	}
	var out *rpc.Message
	switch {
	case err == nil:
		// Its server did useful work: no crash loop — the run its lease
		// is on, and the process that answered when it is another (a
		// dual-era server's for modern clients).
		f.lease.Answered()
		if a, ok := f.conn.(interface{ MarkAnswered() }); ok && f.conn != f.lease.Conn() {
			a.MarkAnswered()
		}
		out = &rpc.Message{ID: clientID, Result: resp.Result, Error: resp.Error}
		switch {
		case resp.Error != nil:
			f.set(telemetry.ProtocolError, resp.Error.Code, resp.Error.Message)
			f.received = len(resp.Error.Message) + len(resp.Error.Data)
		case method == "tools/call" && isError(resp.Result):
			f.set(telemetry.ToolError, 0, "the tool's result has isError true")
		}
		f.received += len(resp.Result)
		return out
	case errors.Is(f.causeErr(), errTimeout):
		out = errorResponse(clientID, rpc.RequestTimeout, fmt.Sprintf("server %s did not answer %s within %v", name, method, f.timeout))
		f.set(telemetry.Timeout, 0, out.Error.Message)
	case f.err() != nil:
		out = errorResponse(clientID, rpc.BackendUnavailable, fmt.Sprintf("request to server %s cancelled: %v", name, f.causeErr()))
		f.set(telemetry.Cancelled, 0, out.Error.Message)
	case errors.Is(err, oauthclient.ErrNeedsLogin):
		// The server refused the request's credentials and only the user
		// can give better ones (a login, a step-up to more scopes).
		lerr := fleet.LoginError(name, err)
		out = unavailable(clientID, rpc.BackendUnavailable, lerr.Error(), lerr)
		f.set(telemetry.Unavailable, 0, out.Error.Message)
	case errors.Is(err, rpc.ErrLineTooLong):
		out = errorResponse(clientID, rpc.MessageTooLarge, fmt.Sprintf("server %s: %v", name, err))
		f.set(telemetry.ProtocolError, rpc.MessageTooLarge, out.Error.Message)
	default:
		out = errorResponse(clientID, rpc.BackendUnavailable, fmt.Sprintf("server %s failed while answering %s: %v", name, method, err))
		f.set(telemetry.Unavailable, 0, out.Error.Message)
	}
	return out
}

// spanTarget is what a span's name says the request of method targets:
// the tool or prompt named (target, as the server knows it) if the
// server lists it, else "" — a client's own names stay out of span names.
func spanTarget(srv *fleet.Server, method string, target []byte) string {
	if len(target) == 0 {
		return ""
	}
	switch method {
	case "tools/call":
		tools, _ := srv.Catalog().CachedList(catalog.Tools)
		if l := srv.Telemetry().ToolLabel(target, tools); l != telemetry.Other {
			return l
		}
	case "prompts/get":
		prompts, _ := srv.Catalog().CachedList(catalog.Prompts)
		for _, p := range prompts {
			if n, _ := rpc.StringMember(p, "name"); n == string(target) {
				return n
			}
		}
	}
	return ""
}

// plainString is the content of the JSON string v when it has no escape
// (aliasing v), else nil: a name worth counting has none.
func plainString(v json.RawMessage) []byte {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return nil
	}
	return v[1 : len(v)-1]
}

// isErrorKey is how a tools/call result that reports a failure says so.
var isErrorKey = []byte(`"isError"`)

// isError reports whether a tools/call result has isError true. Most
// results do not name it at all: they are searched for the key, quickly,
// and scanned only when it is there.
func isError(result json.RawMessage) bool {
	if !bytes.Contains(result, isErrorKey) {
		return false
	}
	return string(rpc.Member(result, "isError")) == "true"
}

// errMsg is the message set gave f, kept only for its span.
func (f *flight) errMsg() string {
	if f.tr == nil {
		return ""
	}
	return f.tr.msg
}

// set records how f ended, for end to count.
func (f *flight) set(o telemetry.Outcome, code int, msg string) {
	f.outcome, f.code = o, code
	if f.tr != nil {
		f.tr.msg = msg
	}
}

// record counts f — its outcome, duration, bytes — in its server's
// metrics, and as a request of its client (Session.clientIdentity), and
// ends its span. It runs once per request that reached
// forward: from end, or for a request that ended before begin registered
// its call. It returns when it counted f's end.
func (f *flight) record(o telemetry.Outcome, code int, msg string) time.Time {
	f.set(o, code, msg)
	now := time.Now()
	c := telemetry.Call{Method: f.method, Outcome: f.outcome, Code: f.code, Duration: now.Sub(f.start), Sent: len(f.params), Received: f.received}
	if f.method == "tools/call" {
		c.Tool = f.target
		c.Tools, _ = f.srv.Catalog().CachedList(catalog.Tools)
	}
	f.srv.Telemetry().Record(c)
	var nb [clientbook.MaxNameLen]byte
	var vb [clientbook.MaxVersionLen]byte
	name, version := f.from.clientIdentity(f.mo, nb[:0], vb[:0])
	f.g.clients.Note(f.srv, name, version, now)
	f.auditCall(now)
	if f.tr != nil {
		f.endSpan()
	}
	return now
}

// end releases what begin took, in the reverse order: the timer, the
// lease, the call's registration, its context.
func (f *flight) end() {
	if f.timer != nil {
		f.timer.stop()
	}
	now := f.record(f.outcome, f.code, f.errMsg())
	if f.lease != nil {
		f.lease.Release()
	}
	f.g.reg.endCall(f.c, f.key, now)
	f.cancel(nil)
}

// endSpan ends f's span with what is known of f's end.
func (f *flight) endSpan() {
	e := telemetry.End{Server: f.name, Outcome: f.outcome, Code: f.code, Message: f.tr.msg,
		Protocol: f.tr.protocol, RequestID: f.clientID}
	if s := f.from.sess; s != nil && s.ID != "" {
		// The gateway's own key of the session, as events and logs name
		// it: the client's Mcp-Session-Id lets whoever has it use the
		// session, and has no place in a trace backend.
		e.SessionID = s.Key()
	}
	if f.method == "tools/call" {
		e.Tool = f.tr.target
	}
	if f.lease != nil {
		e.Wake = f.lease.Woke()
	}
	f.tr.span.End(e)
}

// Notification relays what a server sends on its own (fleet.Hooks) to the
// clients it belongs to, and to no other.
func (g *Gateway) Notification(src fleet.Source, m *rpc.Message) {
	conn := src.Conn
	if modernConn(conn) {
		// What names the server's side of the exchange stays there
		// (revision.Notification): the one translation of a server's
		// notifications, for clients of either era.
		if p := revision.Notification(m.Params); len(p) != len(m.Params) {
			m = &rpc.Message{Method: m.Method, Params: p}
		}
	}
	switch m.Method {
	case "notifications/progress":
		tok := rpc.ProgressToken(m.Params)
		var id string
		if err := json.Unmarshal(tok, &id); err != nil {
			return
		}
		c, token := g.reg.progressOf(conn, id)
		if c == nil {
			return
		}
		c.touch()
		if token == nil {
			return // a held call's round that asked for no progress
		}
		params, _ := rpc.ReplaceProgressToken(m.Params, token)
		_ = c.related.Send(&rpc.Message{Method: m.Method, Params: params})
	case "notifications/message":
		g.relayLog(src, m)
	case "notifications/tasks/status":
		g.taskStatus(src, m)
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		// The shared instance's lists are the fleet's cache: it fetches
		// them again and reports what changed (ListsChanged). A private
		// instance's change is its session's alone.
		if src.Session != "" {
			for _, s := range g.audience(src) {
				_ = s.Out().Send(m)
			}
		}
	case "notifications/resources/updated":
		if src.Session == "" && src.Server.Private() {
			// A per-session server's shared instance only learns its
			// lists: it serves no session, and its updates are no one's.
			return
		}
		uri := stringField(m.Params, "uri")
		for _, key := range g.interests.Subscribers(src.Server, uri) {
			if src.Session != "" && src.Identity == "" && key != src.Session {
				continue // a per-session instance's update is its session's alone
			}
			s := g.reg.sessionByKey(key)
			if s == nil || !g.reg.sees(s, src.Server) {
				continue
			}
			if src.Identity != "" && !src.Reaches(s.Identity()) {
				continue // a per-identity instance's update is its identity's sessions' alone
			}
			_ = s.Out().Send(m)
		}
	case "notifications/cancelled":
		// The server withdrew a request it had sent to a client.
		id := rpc.CancelledRequestID(m.Params)
		if ours, r := g.reg.withdraw(conn, id); r != nil {
			r.timer.Stop()
			params, _ := json.Marshal(map[string]any{"requestId": ours, "reason": stringField(m.Params, "reason")})
			_ = r.sess.Out().Send(&rpc.Message{Method: m.Method, Params: params})
			return
		}
		// Or one a held call keeps for its client's next round.
		for _, h := range g.held.all() {
			if h.withdraw(conn, id) {
				break
			}
		}
	default:
		g.log.Debug("notification from server not relayed", "server", conn.Name(), "method", m.Method)
	}
}

// relayLog delivers a server's log message. A stdio server's log line
// carries nothing that ties it to a request, so it is attributed only when
// that is certain: the line of a session's private instance, or of a
// shared server that only one session has used, is that session's — on
// the stream of its newest request in flight there, else on its session
// stream; on a server several sessions use, the line that comes while
// requests of exactly one session are in flight is that session's, on its
// newest request's stream, if no other session's request there ended
// lately. A line nobody can attribute is the server's own log, for the
// sessions that asked for it with logging/setLevel. Wherever it goes, a
// session that set a level receives only lines at least that severe, and a
// modern request only the lines its logLevel asked for.
func (g *Gateway) relayLog(src fleet.Source, m *rpc.Message) {
	sev := interest.LogSeverity(stringField(m.Params, "level"))
	levels := g.interests.LogLevels(src.Server)
	wants := func(s *Session) bool {
		lvl, ok := levels[s.Key()]
		return ok && sev >= interest.LogSeverity(lvl)
	}
	// callWants: a line that belongs to c goes to its stream unless its
	// session set a higher level — or, for a modern request, unless the
	// request asked for no lines, or for more severe ones.
	callWants := func(c *call) bool {
		mo := g.reg.modernOf(c) // a held call's later round may replace it
		if mo != nil {
			return mo.LogLevel != "" && sev >= interest.LogSeverity(mo.LogLevel)
		}
		lvl, ok := levels[c.from.key()]
		return !ok || sev >= interest.LogSeverity(lvl)
	}
	if owner := g.owner(src); owner != nil {
		if c := g.reg.newestCallOf(src.Conn, owner); c != nil {
			if callWants(c) {
				_ = c.related.Send(m)
			}
		} else if wants(owner) {
			_ = owner.Out().Send(m)
		}
		return
	}
	// A connection several sessions use. While requests of exactly one
	// session are in flight there, and no other session's ended lately,
	// the line is that session's request's (as for sampling). Otherwise
	// nobody can tell whose it is: it is the server's own log, for the
	// sessions that asked for it with logging/setLevel, each at its level.
	c, _ := g.reg.inFlight(src.Conn)
	if c != nil && g.reg.activeSessions(src.Conn) == 1 {
		if callWants(c) {
			_ = c.related.Send(m)
		}
		return
	}
	if g.filtering() && src.Identity == "" && src.Session == "" {
		// A shared instance's line no one request is known to have caused:
		// under a policy or server scopes it might tell of another
		// identity's call, on a server the reader may not even use. It
		// stays in the server's log (mcpvisor logs), for no client.
		return
	}
	for _, s := range g.audience(src) {
		if wants(s) {
			_ = s.Out().Send(m)
		}
	}
}

// owner is the session every message from src belongs to, when that is
// certain: the session of a private instance, or the only client session
// that has used the shared connection since it was made (and is still
// open). Otherwise nil: messages that belong to no request cannot be
// attributed, and none is guessed from which requests happen to be in
// flight or which sessions happen to be open (a line sent after one
// session's call ended would reach whoever called or connected next).
func (g *Gateway) owner(src fleet.Source) *Session {
	switch {
	case src.Session != "":
		return g.reg.sessionByKey(src.Session)
	case src.Sole != "":
		return g.reg.sessionByKey(src.Sole)
	}
	return nil
}

// callScoped reports whether a server sends method only while it serves a
// client's request (so the request in flight is its cause).
func callScoped(method string) bool {
	return method == "sampling/createMessage" || method == "elicitation/create"
}

// abandonedCall is a request that ended without the server's answer.
type abandonedCall struct {
	from  sender
	until time.Time
}

// Request relays a server→client request (sampling, elicitation, roots)
// to the client session it belongs to (fleet.Hooks).
//
// Over stdio a server's request carries nothing that ties it to the client
// request that caused it. It is relayed for a session's request in flight
// when the session is certain: the server is the session's private
// instance (sharing "per-session"), or a shared server that only one open
// session sees. On a server several sessions share, sampling and
// elicitation — which a server sends while it serves a call, before it
// answers it — go to the one session that has requests in flight there;
// with requests of several sessions in flight, or for anything else (a
// server asks for roots on its own), guessing could hand one user's data to
// another, so the server gets an error that names the fix (sharing
// "per-session").
//
// A request for a client capability (roots, sampling, elicitation) goes
// only to a client that declared it. When the client it is for declared
// none — or, with no request in flight and no session certain, no legacy
// client that sees the server did — the server gets Method not found at
// once, as the client's SDK would answer, instead of waiting for an answer
// that never comes.
//
// It runs on the connection's read loop, which must not wait for the
// server to read: answers given here are written from another goroutine.
func (g *Gateway) Request(src fleet.Source, m *rpc.Message) {
	conn := src.Conn
	if m.Method == "ping" {
		go func() { _ = conn.Reply(m.ID, json.RawMessage(`{}`)) }()
		return
	}
	capName := capabilityOf(m.Method)
	if capName != "" && src.Server != nil && !src.Server.Config().Declares(capName) {
		g.refuseByConfig(conn, m, capName)
		return
	}
	if capName != "" && src.Session == "" && src.Server != nil && src.Server.Private() {
		// A per-session server's listing process serves no client and
		// was declared nothing (fleet): nobody to ask.
		g.refuseUndeclared(conn, m, capName)
		return
	}
	if up, ok := relatedTask(m.Params); ok && src.Server != nil {
		// It names its task: that task's client's, or nobody's.
		g.askForTask(src, m, capName, up)
		return
	}
	c := g.attribute(src, m, capName)
	switch {
	case c == nil:
		// Refused by attribute.
	case c.from.req != nil:
		g.askModern(conn, m, c, capName)
	case capName != "" && !g.reg.declares(c.from.sess, capName):
		// A client is asked only what it declared it answers: one that
		// did not would leave the server waiting (for roots, say, which
		// some servers ask for after every start before they answer).
		g.refuseUndeclared(conn, m, capName)
	default:
		g.askLegacy(conn, m, c, m.Params)
	}
}

// attribute is the call a server's request m (for capability capName, if
// any) from src belongs to (see Request), or nil when none can be said to
// — the server has then been answered.
func (g *Gateway) attribute(src fleet.Source, m *rpc.Message, capName string) *call {
	conn := src.Conn
	var c *call
	ambiguous := false
	sessions := 0
	owner := g.owner(src)
	if owner != nil {
		c = g.reg.newestCallOf(conn, owner)
	} else {
		var only *call
		only, sessions = g.reg.inFlight(conn)
		// A modern client has roots only as a call's input (mrtr): the
		// roots a server asks for during its call are that call's —
		// unless a legacy client lately told the server its roots
		// changed, or had a request end there (legacyLately), when the
		// server may be asking on its own, for that client.
		scoped := callScoped(m.Method) || (m.Method == "roots/list" && only != nil && only.from.req != nil && !g.reg.legacyLately(conn))
		if scoped && sessions == 1 {
			c = only
		}
		ambiguous = sessions > 1 || !scoped
	}
	if c == nil && capName != "" && (owner != nil && !g.reg.declares(owner, capName) ||
		owner == nil && !g.mayDeclare(src, capName, callScoped(m.Method), sessions)) {
		// No client it could be for declared the capability — its
		// session's; the clients of the requests in flight there, for a
		// request a server sends while it serves a call; any legacy
		// client's that sees the server, for roots or with no request in
		// flight: none would answer, so the server gets at once what a
		// client's SDK says to a request it does not serve (and not the
		// error that it cannot tell which client it is for).
		g.refuseUndeclared(conn, m, capName)
		return nil
	}
	if c == nil && owner != nil && m.Method == "roots/list" {
		// Roots a server asks for on its own — right after it started,
		// say, before the request that started it is in flight there —
		// are its one client's to give: asked on that session's stream.
		c = g.reg.sessionCall(owner)
	}
	if c == nil {
		msg := fmt.Sprintf("mcpvisor cannot forward %s: no client request is in flight on server %s", m.Method, conn.Name())
		if ambiguous {
			n := max(sessions, len(g.reg.sessionsFor(src.Server)))
			g.log.Warn("server request cannot be attributed to one client session; refused", "server", conn.Name(), "method", m.Method, "sessions", n)
			msg = fmt.Sprintf("mcpvisor cannot tell which of %d client sessions %s is for: configure server %s with \"sharing\": \"per-session\"", n, m.Method, conn.Name())
		}
		g.replyError(conn, m, rpc.InternalError, msg)
		return nil
	}
	return c
}

// askModern hands a server's request m during c, a modern request's call,
// to the call's holder: a modern client takes no requests — its held
// call, if it has one, asks for the input in an input_required round
// (mrtr.go); else the server is refused.
func (g *Gateway) askModern(conn fleet.Conn, m *rpc.Message, c *call, capName string) {
	mr := c.from.req
	msg := fmt.Sprintf("mcpvisor cannot forward %s: the client speaks MCP %s, which has no server-to-client requests, outside tools/call, prompts/get and resources/read", m.Method, modernVersion)
	if h := mr.held; h != nil {
		ok, why := h.offer(conn, m, c)
		if ok {
			return
		}
		if capName != "" && !h.declared(capName) {
			// Not declared (offer recorded it for the client's
			// answer, unless the call could not be held at all).
			g.refuseUndeclared(conn, m, capName)
			return
		}
		msg = "mcpvisor cannot forward " + m.Method + ": " + why
	} else if capName != "" && !mr.mo.givesInput() {
		// Not held: the client declared no capability to give
		// input with (forward), so not this one. (Roots, which a
		// server asks for on its own, fail no call: see offer.)
		if callScoped(m.Method) {
			mr.needCap.CompareAndSwap(nil, &capName)
		}
		g.refuseUndeclared(conn, m, capName)
		return
	}
	g.log.Debug("server request during a modern client's request refused", "server", conn.Name(), "method", m.Method, "why", msg)
	g.replyError(conn, m, rpc.InternalError, msg)
}

// askLegacy sends a server's request m, with params, to the legacy client
// of c, bounded by inputWait: the server gets the client's answer, or an
// error.
func (g *Gateway) askLegacy(conn fleet.Conn, m *rpc.Message, c *call, params json.RawMessage) {
	ours := secretID("mcpv-r-")
	r := &outReq{call: c, conn: conn, backendID: m.ID, sess: c.from.sess}
	r.timer = time.AfterFunc(inputWait, func() {
		if g.reg.takeOutReq(ours) != nil {
			_ = conn.ReplyError(m.ID, rpc.RequestTimeout, fmt.Sprintf("the client did not answer %s within %v", m.Method, inputWait))
		}
	})
	if err := g.sendOutReq(c, ours, r, m.Method, params); err != nil {
		r.timer.Stop()
		msg := fmt.Sprintf("mcpvisor could not deliver %s to the client: %v", m.Method, err)
		g.replyError(conn, m, rpc.InternalError, msg)
	}
}

// mayDeclare reports whether a client that src's request for capName
// could be for declared it, when no session owns src: the client of a
// request in flight on the connection (or lately abandoned there: the
// server may still serve it); unless the request is one a server sends
// only while it serves a call (callScoped) and such requests are in
// flight (sessions of them), any legacy client that sees the server.
func (g *Gateway) mayDeclare(src fleet.Source, capName string, callScoped bool, sessions int) bool {
	if g.reg.inFlightDeclares(src.Conn, capName) {
		return true
	}
	if callScoped && sessions > 0 {
		return false
	}
	return g.reg.anyDeclares(src.Server, capName)
}

// refuseUndeclared answers a server's request for capability capName
// that no client it could be for declared, as a client's SDK answers a
// request it does not serve: Method not found, at once.
func (g *Gateway) refuseUndeclared(conn fleet.Conn, m *rpc.Message, capName string) {
	g.log.Debug("server request for a capability the client did not declare: answered Method not found", "server", conn.Name(), "method", m.Method, "capability", capName)
	msg := fmt.Sprintf("Method not found: %s (the client did not declare the %s capability)", m.Method, capName)
	g.replyError(conn, m, rpc.MethodNotFound, msg)
}

// replyError answers a server's request m with an error, on the
// server's outbox: a server that stops reading holds up nothing, and a
// flood of its requests piles up no goroutines (beyond the outbox's
// bound, the answer is dropped and logged).
func (g *Gateway) replyError(conn fleet.Conn, m *rpc.Message, code int, msg string) {
	if !g.outbox.post(conn, func() { _ = conn.ReplyError(m.ID, code, msg) }) {
		g.log.Warn("answer to a server's request dropped: the server is not reading its input", "server", conn.Name(), "method", m.Method)
	}
}

// refuseByConfig answers a server's request for capability capName that
// its config does not let mcpvisor declare to it ("clientCapabilities"):
// Method not found, at once, whatever its client declared.
func (g *Gateway) refuseByConfig(conn fleet.Conn, m *rpc.Message, capName string) {
	g.log.Debug("server request for a capability its configuration does not declare: answered Method not found", "server", conn.Name(), "method", m.Method, "capability", capName)
	msg := fmt.Sprintf("Method not found: %s (mcpvisor's configuration declares no %s capability to server %s)", m.Method, capName, conn.Name())
	g.replyError(conn, m, rpc.MethodNotFound, msg)
}

// sendOutReq registers r, under ours, as a request to the client of c —
// pending there, counted in c.waiting — and sends it on c's stream. An
// error (c's session has closed, or the send failed) means r is not
// pending any more; if the client's answer or r's timeout took it first,
// whoever took it ends it, and sendOutReq reports no error.
func (g *Gateway) sendOutReq(c *call, ours string, r *outReq, method string, params json.RawMessage) error {
	c.waiting.Add(1)
	if err := g.reg.addOutReq(c, ours, r); err != nil {
		return err
	}
	if err := c.related.Send(&rpc.Message{ID: json.RawMessage(strconv.Quote(ours)), Method: method, Params: params}); err != nil {
		if g.reg.takeOutReq(ours) == nil {
			return nil
		}
		return err
	}
	return nil
}

// clientMessage handles what every endpoint handles alike: the client's
// responses to relayed requests and its cancellations. It reports whether
// m was one of those.
func (g *Gateway) clientMessage(s *Session, m *rpc.Message) bool {
	switch {
	case m.IsResponse():
		var id string
		if json.Unmarshal(m.ID, &id) != nil {
			return true
		}
		r := g.reg.takeOutReqOf(s, id)
		if r == nil {
			// Not a request of this session's (or no longer pending):
			// refused, and a request pending for another session is left
			// as it was.
			g.log.Debug("client answer to no pending request of its session dropped", "id", id)
			return true
		}
		r.timer.Stop()
		g.deliver(r, m)
		return true
	case m.Method == "notifications/cancelled":
		id := rpc.CancelledRequestID(m.Params)
		if c := g.reg.callOf(s, id); c != nil {
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
