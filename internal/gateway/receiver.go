package gateway

import (
	"context"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
)

// A request that reached another replica first (the receiver) and was
// forwarded here, to the replica whose session it belongs to, is decided
// and served here, but limited and audited there: the receiver's rate
// limits govern it and the receiver's audit takes its line (or, when the
// receiver cannot, this replica's does: each line is written at least
// once, and twice only if the link ends between the receiver's write and
// its acknowledgment).
// The request's context carries the Receiver (WithReceiver); a flight
// reads it once, as it begins, and only if the call is governed (a
// decided method, under a policy, an audit or rate limits here: the
// replicas' configurations are normally the same, so what governs a call
// here governs it there). What is not forwarded is limited and audited
// here, as before.

// Receiver is the replica that received a request forwarded here: its
// rate limits govern the request and its audit takes the request's line.
type Receiver interface {
	// Allow asks the receiving replica to admit a call by the identity
	// whose Key() is key, of server's target (tool, prompt or resource,
	// as the limiter is asked today): whether its audit can take the
	// call's line (failClosed), then its rate limits. It is bounded by
	// ctx; an error means the receiver could not be asked.
	Allow(ctx context.Context, key, server, target string) (Admission, error)
	// Audit hands the receiving replica the request's audit line. It
	// never blocks; true means the Receiver answers for the line from
	// now (it is written there, or here if it cannot be); false that the
	// receiver cannot take it (its link is gone), and the line is
	// written here.
	Audit(rec audit.Record) bool
}

// Admit is this replica's own admission of a call by the identity whose
// Key() is key, of server's target: its audit's room (failClosed), then
// its rate limits (consumed when they allow the call). It decides a call
// received here, and a replica answers a peer's Allow with it.
func (g *Gateway) Admit(key, server, target string) Admission {
	if !g.audit.Load().Accepting() {
		return Admission{AuditFull: true}
	}
	ok, wait, scope := g.limits.Load().Allow(key, server, target)
	return Admission{OK: ok, Wait: wait, Scope: scope}
}

// Admission is a replica's admission of a call (Admit), or a receiving
// replica's answer to Allow.
type Admission struct {
	// AuditFull: its audit, failClosed, cannot take a line now; the call
	// is refused as one received there would be.
	AuditFull bool
	// OK: its rate limits allow the call; else Wait is how long until
	// they would, and Scope which limit refused it.
	OK    bool
	Wait  time.Duration
	Scope string
}

// receiverKey is the context key of a request's Receiver. The value is a
// *Receiver: asserting a pointer type is a compare of the type word, not
// an interface conversion, and a flight keeps one word of it.
type receiverKey struct{}

// WithReceiver marks ctx (a request's) as forwarded from r.
func WithReceiver(ctx context.Context, r Receiver) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, receiverKey{}, &r)
}

// receiverOf is the Receiver ctx's request was forwarded from, or nil.
func receiverOf(ctx context.Context) *Receiver {
	r, _ := ctx.Value(receiverKey{}).(*Receiver)
	return r
}

// allow asks f's receiver whether f may go on (Receiver.Allow), as
// admit asks the audit and the limiter here of a call received here: by
// f's identity, server and target. The wait is bounded by the request's
// (f's parent's) end and by what is left of its timeout, which counts
// from its arrival: its timer is not armed yet.
func (g *Gateway) allow(f *flight) (Admission, error) {
	ctx := f.valueCtx()
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, f.start.Add(f.timeout))
		defer cancel()
	}
	return (*f.recv).Allow(ctx, f.who.Key(), f.name, f.auditTarget)
}

// addLine hands rec to recv, the replica the request was forwarded from,
// if there is one and it takes it; else (no receiver, or its link is
// gone: nothing is lost) it writes rec in l, the audit here, if there is
// one.
func addLine(recv *Receiver, l *audit.Log, rec audit.Record) {
	if recv != nil && (*recv).Audit(rec) {
		return
	}
	if l != nil {
		l.Add(rec)
	}
}
