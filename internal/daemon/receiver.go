package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/link"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
)

// The replica that received a request governs it: a request forwarded to
// its session's owner is limited by the receiving replica's rate limits
// and written in its audit, while the owner, which holds the session,
// decides it by the policy and serves it. The owner asks over the link
// the request came by (kindLimit, one round trip, only for a call the
// limits count) and tells the audit line (kindAudit, no wait); the
// receiving replica answers from its own limiter and writes the line in
// its own audit. Limits therefore add up per replica a client's
// requests land on, whoever owns their sessions (docs/kubernetes.md).

// The kinds of what an owner asks or tells the replica a request came
// from.
const (
	kindLimit byte = 1
	kindAudit byte = 2
)

// limitQuestion and limitAnswer are a rate limit check over the link.
type limitQuestion struct {
	Key    string `json:"key"`
	Server string `json:"server"`
	Target string `json:"target"`
}

type limitAnswer struct {
	OK    bool          `json:"ok"`
	Wait  time.Duration `json:"wait,omitempty"`
	Scope string        `json:"scope,omitempty"`
}

// answer answers an owner's question about a request this replica
// forwarded: its rate limit.
func (rs *replicaSet) answer(kind byte, q []byte) []byte {
	if kind != kindLimit {
		return nil
	}
	var lq limitQuestion
	if err := json.Unmarshal(q, &lq); err != nil {
		return nil // the owner refuses the call: no answer it can read
	}
	var lim *ratelimit.Limiter
	if rs.limiter != nil {
		lim = rs.limiter()
	}
	ok, wait, scope := lim.Allow(lq.Key, lq.Server, lq.Target)
	b, _ := json.Marshal(limitAnswer{OK: ok, Wait: wait, Scope: scope})
	return b
}

// heard writes the audit line an owner sent of a request this replica
// forwarded.
func (rs *replicaSet) heard(kind byte, msg []byte) {
	if kind != kindAudit {
		return
	}
	var l *audit.Log
	if rs.audit != nil {
		l = rs.audit()
	}
	if l == nil {
		return // this replica audits nothing (its config differs)
	}
	var rec audit.Record
	if err := json.Unmarshal(msg, &rec); err != nil {
		rs.log.Warn("replicas: a peer sent an audit line that does not decode", "err", err)
		return
	}
	if bytes.Equal(rec.Arguments, []byte("null")) {
		rec.Arguments = nil
	}
	l.Add(rec)
}

// linkReceiver is, at the owner, the replica a request came from over a
// link (gateway.Receiver).
type linkReceiver struct{ p *link.Peer }

func (lr linkReceiver) Allow(ctx context.Context, key, server, target string) (bool, time.Duration, string, error) {
	q, _ := json.Marshal(limitQuestion{Key: key, Server: server, Target: target})
	b, err := lr.p.Ask(ctx, kindLimit, q)
	if err != nil {
		return false, 0, "", err
	}
	var a limitAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return false, 0, "", fmt.Errorf("the replica's answer does not decode: %w", err)
	}
	return a.OK, a.Wait, a.Scope, nil
}

func (lr linkReceiver) Audit(rec audit.Record) bool {
	b, err := json.Marshal(rec)
	if err != nil {
		return false
	}
	return lr.p.Tell(kindAudit, b)
}
