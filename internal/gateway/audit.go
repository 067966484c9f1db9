package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// The audit has one line for every call of a server's item (the methods
// the policy decides) and every refusal of one: a call's line is written
// where its flight is recorded (record: exactly once per flight, however
// it ends), a denial's or a rate limit's where it is decided (begin).
// Writing never waits: the audit's queue drops what it cannot take, and
// counts it. With failClosed, calls are refused while the audit cannot
// keep up.

// SetAudit makes l the audit (nil: none).
func (g *Gateway) SetAudit(l *audit.Log) { g.audit.Store(l) }

// SetLimits makes l the rate limiter (nil: none).
func (g *Gateway) SetLimits(l *ratelimit.Limiter) { g.limits.Store(l) }

// Limits is the rate limiter in force, or nil.
func (g *Gateway) Limits() *ratelimit.Limiter { return g.limits.Load() }

// endpointOf names the endpoint w's requests come on.
func endpointOf(w sender) string {
	var srv = w.endpoint()
	if srv == nil {
		return "/mcp"
	}
	return "/servers/" + srv.Name() + "/mcp"
}

// auditRecord is the line of f, with what is known when it is made.
func (f *flight) auditRecord(target string) audit.Record {
	rec := audit.Record{Time: f.start, Endpoint: endpointOf(f.from), Server: f.name, Method: f.method, Target: target}
	rec.SetIdentity(f.who)
	if s := f.from.sess; s != nil {
		rec.Session = s.Key()
	}
	return rec
}

// auditRefusal writes the line of f refused before it began: to the
// replica it was forwarded from, if any.
func (g *Gateway) auditRefusal(f *flight, target, outcome string, code int, reason string) {
	l := g.audit.Load()
	if l == nil && f.recv == nil {
		return
	}
	rec := f.auditRecord(target)
	rec.Outcome, rec.Code, rec.Reason = outcome, code, reason
	rec.Arguments = f.auditArgs
	rec.Duration = time.Since(f.start)
	addLine(f.recv, l, rec)
}

// auditCall writes the line of f's call, at its end: to the replica it
// was forwarded from, if any.
func (f *flight) auditCall(now time.Time) {
	l := f.g.audit.Load()
	if (l == nil && f.recv == nil) || !decided(f.method) || f.refused {
		return
	}
	rec := f.auditRecord(f.auditTarget)
	rec.Outcome, rec.Code, rec.Reason = f.outcome.String(), f.code, f.errMsg()
	if f.outcome == telemetry.OK {
		rec.Reason = ""
	}
	rec.Arguments = f.auditArgs
	rec.Duration = now.Sub(f.start)
	addLine(f.recv, l, rec)
}

// governed reports whether a policy, an audit or rate limits are in
// force: without them, a call is not looked at before it is forwarded.
func (g *Gateway) governed() bool {
	return g.filtering() || g.audit.Load() != nil || g.limits.Load() != nil
}

// admit checks what stands between a permitted call and its server: the
// audit's room (failClosed) and the identity's rate limits — for a call
// forwarded by the replica that received it, that replica's (allow). It
// returns the client's answer to a refused call, else nil.
func (g *Gateway) admit(f *flight) *rpc.Message {
	if !decided(f.method) {
		return nil
	}
	var a Admission
	switch {
	case f.recv != nil && (g.limits.Load() != nil || g.audit.Load().FailClosed()):
		// The receiving replica's limits govern, and its audit, if it
		// refuses calls while full, may refuse: it is asked (the
		// replicas' configurations are normally the same: what is
		// configured here is there). An audit that never refuses is not
		// asked about; it is handed the line when the call ends.
		var err error
		if a, err = g.allow(f); err != nil {
			f.refused = true
			g.receiverRefusals.Add(1) // no line: the limit was not applied
			return errorResponse(f.clientID, rpc.InternalError, "the replica that received the call could not be asked whether it may go on (its audit, its rate limits), and the call was refused: "+err.Error())
		}
	case f.recv != nil:
		return nil // no limits, no audit that refuses: nothing to ask
	default:
		a = g.Admit(f.who.Key(), f.name, f.auditTarget)
	}
	switch {
	case a.AuditFull:
		f.refused = true
		g.auditRefusals.Add(1) // no line: the audit is what cannot take one
		return errorResponse(f.clientID, rpc.LimitReached, "the audit log cannot keep up, and mcpvisor refuses calls until it does (audit.failClosed)")
	case a.OK:
		return nil
	}
	f.refused = true
	secs := ratelimit.RetryAfter(a.Wait)
	g.auditRefusal(f, f.auditTarget, "limited", rpc.RateLimited, "rate limit per "+a.Scope)
	msg := "rate limit exceeded: retry after " + secs + " s"
	return &rpc.Message{ID: f.clientID, Error: &rpc.Error{Code: rpc.RateLimited, Message: msg,
		Data: json.RawMessage(`{"retryAfter":` + secs + `}`)}}
}

// retryAfterOf is the retryAfter of a rate-limited answer, or 0.
func retryAfterOf(resp *rpc.Message) int {
	if resp == nil || resp.Error == nil || resp.Error.Code != rpc.RateLimited {
		return 0
	}
	n, _ := strconv.Atoi(string(bytes.TrimSpace(rpc.Member(resp.Error.Data, "retryAfter"))))
	return max(n, 1)
}

// Denials is how many requests the policy denied; ScopeRefusals how
// many calls through /mcp were refused for a server scope the token
// lacked; AuditRefusals how many were refused while a failClosed audit
// could not keep up; ReceiverRefusals how many calls forwarded by the
// replica that received them were refused because that replica, whose
// audit and rate limits govern them, could not be asked or its answer
// not read (Receiver.Allow failed: its link ended, the call's time ran
// out or its client went away).
func (g *Gateway) Denials() uint64          { return g.denials.Load() }
func (g *Gateway) ScopeRefusals() uint64    { return g.scopeRefusals.Load() }
func (g *Gateway) AuditRefusals() uint64    { return g.auditRefusals.Load() }
func (g *Gateway) ReceiverRefusals() uint64 { return g.receiverRefusals.Load() }

// Audit is the audit in force, or nil.
func (g *Gateway) Audit() *audit.Log { return g.audit.Load() }

// auditUnusable writes the line of a request refused on a server's own
// endpoint because who may use nothing of the server; recv is the
// replica the request was forwarded from (nil: none).
func (g *Gateway) auditUnusable(recv *Receiver, who *identity.Identity, endpoint, server, method string) {
	g.auditUnread(recv, who, audit.Record{Endpoint: endpoint, Server: server, Method: method, Outcome: "denied",
		Code: rpc.NotPermitted, Reason: "the policy allows no request of the server"})
}

// auditShed writes the line of a call the HTTP front refused over the
// identity's rate limit before reading it: what its headers say of it.
// A forwarded request is never shed (StreamableHandler.shed): its line is
// this replica's.
func (g *Gateway) auditShed(who *identity.Identity, endpoint, method, name string) {
	g.auditUnread(nil, who, audit.Record{Endpoint: endpoint, Method: method, Target: name, Outcome: "limited",
		Code: rpc.RateLimited, Reason: "rate limit per identity (refused before the request was read)"})
}

// auditUnread writes rec, of a request refused with no flight of its
// own, as who's, now: to recv, the replica the request was forwarded
// from, if any.
func (g *Gateway) auditUnread(recv *Receiver, who *identity.Identity, rec audit.Record) {
	l := g.audit.Load()
	if l == nil && recv == nil {
		return
	}
	rec.Time = time.Now()
	rec.SetIdentity(who)
	addLine(recv, l, rec)
}
