package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/link"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
)

// The replica that received a request governs it: a request forwarded to
// its session's owner is limited by the receiving replica's rate limits
// and written in its audit, while the owner, which holds the session,
// decides it by the policy and serves it. The owner asks over the link
// the request came by (kindLimit, one round trip, only for a call the
// limits or the audit count): the receiving replica answers from its own
// audit (failClosed) and limiter. When the call ends the owner hands it
// the line (kindAudit), acknowledged: a line the receiving replica did
// not take — its link ended, its audit is full or gone — is written by
// the owner, so none is lost (one is written twice only if the link ends
// between the receiver's write and its answer, or the answer takes longer
// than ownerTimeout). Limits therefore add up
// per replica a client's requests land on, whoever owns their sessions
// (docs/kubernetes.md).

// The kinds of what an owner asks the replica a request came from.
const (
	kindLimit byte = 1
	kindAudit byte = 2
)

// limitQuestion and limitAnswer are an admission over the link.
type limitQuestion struct {
	Key    string `json:"key"`
	Server string `json:"server"`
	Target string `json:"target"`
}

type limitAnswer struct {
	AuditFull bool          `json:"auditFull,omitempty"`
	OK        bool          `json:"ok"`
	Wait      time.Duration `json:"wait,omitempty"`
	Scope     string        `json:"scope,omitempty"`
}

// answer answers an owner's question about a request this replica
// forwarded: may the call go on (its audit's room, then its rate
// limit), and did it take the call's audit line.
func (rs *replicaSet) answer(kind byte, q []byte) []byte {
	switch kind {
	case kindLimit:
		var lq limitQuestion
		if err := json.Unmarshal(q, &lq); err != nil {
			return nil // the owner refuses the call: no answer it can read
		}
		if l := rs.auditLog(); l != nil && !l.Accepting() {
			b, _ := json.Marshal(limitAnswer{AuditFull: true})
			return b
		}
		var lim *ratelimit.Limiter
		if rs.limiter != nil {
			lim = rs.limiter()
		}
		ok, wait, scope := lim.Allow(lq.Key, lq.Server, lq.Target)
		b, _ := json.Marshal(limitAnswer{OK: ok, Wait: wait, Scope: scope})
		return b
	case kindAudit:
		l := rs.auditLog()
		var rec audit.Record
		if l == nil || json.Unmarshal(q, &rec) != nil {
			return []byte{0} // not taken: the owner writes it
		}
		if bytes.Equal(rec.Arguments, []byte("null")) {
			rec.Arguments = nil
		}
		if !l.Offer(rec) {
			return []byte{0} // full or closed: the owner writes it
		}
		return []byte{1}
	}
	return nil
}

// auditLog is this replica's audit in force, or nil.
func (rs *replicaSet) auditLog() *audit.Log {
	if rs.audit == nil {
		return nil
	}
	return rs.audit()
}

// linkReceiver is, at the owner, the replica a request came from over a
// link (gateway.Receiver).
type linkReceiver struct {
	rs *replicaSet
	p  *link.Peer
}

func (lr linkReceiver) Allow(ctx context.Context, key, server, target string) (gateway.Admission, error) {
	q, _ := json.Marshal(limitQuestion{Key: key, Server: server, Target: target})
	b, err := lr.p.Ask(ctx, kindLimit, q)
	if err != nil {
		return gateway.Admission{}, err
	}
	var a limitAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return gateway.Admission{}, fmt.Errorf("the replica's answer does not decode: %w", err)
	}
	return gateway.Admission{AuditFull: a.AuditFull, OK: a.OK, Wait: a.Wait, Scope: a.Scope}, nil
}

// Audit hands rec to the receiving replica and waits for its answer in a
// goroutine of its own (the replica set's, waited for as it closes),
// within ownerTimeout: a line not taken there is written here.
func (lr linkReceiver) Audit(rec audit.Record) bool {
	rs := lr.rs
	b, err := json.Marshal(rec)
	if err != nil || !lr.p.Alive() || !rs.lines.start() {
		return false
	}
	go func() {
		defer rs.lines.done()
		ctx, cancel := context.WithTimeout(context.Background(), rs.cfg.Load().OwnerTimeout)
		defer cancel()
		if a, err := lr.p.Ask(ctx, kindAudit, b); err == nil && len(a) == 1 && a[0] == 1 {
			return
		}
		if l := rs.auditLog(); l != nil && l.Add(rec) {
			rs.linesHere.Add(1)
		}
	}()
	return true
}
