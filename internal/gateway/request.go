package gateway

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A client request comes from one of two senders (DESIGN decision 11: the
// request is the unit; a session is a legacy layer on top):
//   - a legacy (2025) client's Session, which lives from its initialize to
//     its close, in the gateway's session table;
//   - a 2026-07-28 request, which has no session: modernReq holds what it
//     carries for its life (its _meta, the key its own instances run
//     under, a held call's rounds), in no table — nothing outside the
//     request reaches it.
//
// What each request carries while it is forwarded — its stream, its
// lease, its timer, its span — is its flight (forward.go).

// sender is who sent a request: exactly one of its two is set. A value,
// two words: passing one allocates nothing.
type sender struct {
	sess *Session   // a legacy client's session (or a listener's)
	req  *modernReq // a 2026-07-28 request
}

// legacySender is s as a sender.
func legacySender(s *Session) sender { return sender{sess: s} }

// key names the sender in the fleet (its per-session instances, its
// leases) and in the interest book.
func (w sender) key() string {
	if w.req != nil {
		return w.req.key
	}
	return w.sess.key
}

// identity is who w's requests come from, as verified (nil: anonymous).
func (w sender) identity() *identity.Identity {
	if w.req != nil {
		return w.req.user
	}
	return w.sess.Identity()
}

// endpoint is the server whose own endpoint w's requests come on; nil
// for the aggregated one.
func (w sender) endpoint() *fleet.Server {
	if w.req != nil {
		return w.req.srv
	}
	return w.sess.endpoint
}

// legacyClient reports whether w is a legacy client's session (not a
// modern request, nor a session mcpvisor holds for a listener).
func (w sender) legacyClient() bool { return w.sess != nil && !w.sess.listener }

// requester is who w's requests come from, as far as attributing a
// server's log lines goes: w itself, or, for a modern request over stdio,
// the connection's session — the requests of one stdio client are one
// requester, while each modern request over HTTP is its own (nothing
// there says two come from one client).
func (w sender) requester() sender {
	if w.req != nil && w.req.client != nil {
		return sender{sess: w.req.client}
	}
	return w
}

// modernReq is one 2026-07-28 request on an endpoint, from its arrival to
// its answer — or, for a call held for the client's retry, to the held
// call's end. It is in none of the gateway's tables: nothing outside the
// request finds it. Its key is its own: a modern client has no session,
// so a per-session server serves each of its requests — a held call's
// rounds included — from an instance of its own, ended with the request
// (which is what makes the server's requests certainly that request's).
type modernReq struct {
	key    string
	srv    *fleet.Server      // the endpoint's server; nil for the aggregated one
	msg    *rpc.Message       // the request as the client sent it
	client *Session           // the stdio connection's session it came on; nil over HTTP
	user   *identity.Identity // who sent it, as verified (nil: anonymous)

	// mo is the request's _meta. A held call's later rounds replace it
	// (each retry's own logLevel, token, …): written under the
	// registry's lock (nextRound), and read under it by anyone but the
	// request's own goroutine, which reads it before its first round is
	// answered (no retry exists until begin has returned).
	mo *Modern
	// held is the call held for the client's retry (forwardHeld), if
	// any: it ends the request, not its first round's answer.
	held *heldCall
	// rename is the name its server knows the requested tool or prompt
	// by, put in the params by its forward with the rest of their edit
	// (one copy: begin). Only the request's own goroutine touches it.
	rename json.RawMessage
	// needCap: the server asked for input needing a capability the
	// client did not declare (Request), for the request's answer.
	needCap atomic.Pointer[string]

	// The registry's: closed, no call of it begins; private, it leased a
	// per-session server's instance of its own (ended with it).
	closed, private bool
}

// modern is w's _meta, nil for a legacy session. The registry's lock is
// held, or w's call is not held (only a held call's rounds replace it).
func (w sender) modern() *Modern {
	if w.req != nil {
		return w.req.mo
	}
	return nil
}

// newModernReq opens modern request m (its _meta mo) from who on the
// endpoint of server (nil: the aggregated one).
func (g *Gateway) newModernReq(server *fleet.Server, m *rpc.Message, mo *Modern, who *identity.Identity) *modernReq {
	return &modernReq{key: g.nextID(modernKeyPrefix), srv: server, msg: m, mo: mo, client: mo.client, user: who}
}

// endModernReq ends r: no call of it begins after, the per-session
// instances it used leave their servers' count at once (the client's next
// request may take the place), and stop, bounded, on a goroutine of their
// own.
func (g *Gateway) endModernReq(r *modernReq) {
	if g.reg.endModern(r) {
		stop := g.fleet.DetachSession(r.key) // and forgets what it asked (interest.Book.End)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), sessionEndBound)
			defer cancel()
			stop(ctx)
		}()
	}
}

// bookInstance is the key, in the interest book, of the instance of srv
// that serves w: "" for a shared server's one instance, w's own for a
// per-session server, w's identity's for a per-identity server — what
// the fleet keys the instance by (fleet.Server.InstanceKey), so that an
// instance is told, and kept awake by, only what its own sessions asked.
func bookInstance(srv *fleet.Server, w sender) string {
	if !srv.Private() {
		return ""
	}
	return srv.InstanceKey(w.key(), w.identity())
}
