package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
)

// The replica that received a request governs it: a request forwarded to
// its session's owner is limited by the receiving replica's rate limits
// and written in its audit, while the owner, which holds the session,
// decides it by the policy and serves it. The owner asks over the link
// the request came by (kindLimit, one round trip, only for a call the
// limits or the audit count, and only when rate limits or a failClosed
// audit could refuse it): the receiving replica answers from its own
// audit (failClosed) and limiter. When the call ends the owner hands it
// the line (kindAudits), acknowledged line by line: a line the receiving
// replica did not take — its link ended, its audit is full or gone, the
// owner stopped first — is written by the owner, so none is lost (a
// question's lines are written twice only if the link ends between the
// receiver's write and its answer, or the answer takes longer than
// ownerTimeout). The lines for one link go together: one question
// carries those that gathered since the one before. Limits therefore add
// up per replica a client's requests land on, whoever owns their
// sessions (docs/kubernetes.md).

// The kinds of what an owner asks the replica a request came from. Kind
// 2, a single audit line, is not used again: a replica answers a kind it
// does not know with nothing, which the asker takes as "not taken".
const (
	kindLimit  byte = 1
	kindAudits byte = 3 // a JSON array of audit lines; answered by a byte per line, 1 if taken
)

// A question of kindAudits carries at most maxBatchLines lines, and more
// than one only while they add up to at most maxBatchBytes: the replica
// asked decodes it on its link's read loop, which the link's other
// streams wait for meanwhile (a frame holds 1 MiB; a line too large for
// one is written here). A link's queue holds at most maxQueuedLines
// beside the batch being asked: a line beyond them is written here at
// once. (The lines a failed question writes here come at once, up to
// both: the local audit's queue, 4,096 by default, takes them.)
const (
	maxBatchLines  = 256
	maxBatchBytes  = 64 << 10
	maxQueuedLines = maxBatchLines
)

// lineGather is how long a sender lets lines gather before each
// question, when fewer than a full batch are queued (lines queued while
// a question is answered wait for it too): the lines are handed over after
// their calls ended, so no client waits for it, and under load one
// question then carries many lines instead of each line costing a round
// trip of its own.
const lineGather = 2 * time.Millisecond

// limitQuestion and limitAnswer are an admission over the link; a
// limitAnswer is a gateway.Admission as it travels.
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
		a := gateway.Admission{OK: true} // nothing here to refuse it
		if rs.admit != nil {
			a = rs.admit(lq.Key, lq.Server, lq.Target)
		}
		b, _ := json.Marshal(limitAnswer(a))
		return b
	case kindAudits:
		var recs []audit.Record
		if json.Unmarshal(q, &recs) != nil {
			return nil // none taken: the owner writes them
		}
		l := rs.auditLog()
		taken := make([]byte, len(recs)) // 0: not taken, the owner writes it
		for i, rec := range recs {
			if l != nil && l.Offer(rec) {
				taken[i] = 1
			}
		}
		return taken
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
	p  asker
}

// asker is the link a request came over, as a receiver asks it (a
// *link.Peer: one per connection).
type asker interface {
	Ask(ctx context.Context, kind byte, question []byte) ([]byte, error)
	Alive() bool
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
	return gateway.Admission(a), nil
}

// Audit queues rec for the receiving replica. The link's queue has one
// sender (a goroutine of the replica set's, waited for as it closes),
// started by the first line and ended when the queue is empty: it hands
// the replica the lines queued since its last question, in one, and
// waits for the answer within ownerTimeout; a line not taken there is
// written here. A question that fails (the link ended, no answer in
// time) has its lines and every line queued behind it written here.
// False — the gateway writes the line here — when the link is gone, its
// queue full, or the replica set closing.
func (lr linkReceiver) Audit(rec audit.Record) bool {
	if lr.queue(rec) {
		return true
	}
	if lr.rs.auditLog() != nil {
		lr.rs.linesHere.Add(1) // the gateway writes it here
	}
	return false
}

func (lr linkReceiver) queue(rec audit.Record) bool {
	rs := lr.rs
	if !lr.p.Alive() {
		return false
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return false
	}
	rs.queueMu.Lock()
	defer rs.queueMu.Unlock()
	if rs.queuesClosed {
		return false
	}
	q := rs.queues[lr.p]
	if q != nil && len(q.lines) >= maxQueuedLines {
		return false
	}
	if q == nil {
		// No sender for this link: one starts, unless the set is
		// closing (then the gateway writes the line here).
		if !rs.lines.start() {
			return false
		}
		q = &lineQueue{}
		if rs.queues == nil {
			rs.queues = map[asker]*lineQueue{}
		}
		rs.queues[lr.p] = q
		go rs.sendLines(lr.p, q)
	}
	q.lines = append(q.lines, queuedLine{rec, b})
	return true
}

// lineQueue is the audit lines on their way to one link's replica.
type lineQueue struct{ lines []queuedLine }

type queuedLine struct {
	rec audit.Record
	b   []byte // rec, encoded
}

// sendLines is p's sender: it asks p to take what is queued, a batch at
// a time, and writes here what p did not take, until the queue is empty.
func (rs *replicaSet) sendLines(p asker, q *lineQueue) {
	defer rs.lines.done()
	var buf []byte
	for {
		rs.queueMu.Lock()
		full := len(q.lines) >= maxBatchLines
		rs.queueMu.Unlock()
		if !full {
			time.Sleep(lineGather)
		}
		rs.queueMu.Lock()
		n, size := 0, 0
		for n < len(q.lines) && n < maxBatchLines && (n == 0 || size+len(q.lines[n].b) <= maxBatchBytes) {
			size += len(q.lines[n].b) + 1
			n++
		}
		if n == 0 {
			delete(rs.queues, p) // the next line starts a sender anew
			rs.queueMu.Unlock()
			return
		}
		batch := q.lines[:n:n]
		q.lines = q.lines[n:]
		rs.queueMu.Unlock()

		buf = append(buf[:0], '[')
		for i, l := range batch {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, l.b...)
		}
		buf = append(buf, ']')
		ctx, cancel := context.WithTimeout(context.Background(), rs.cfg.Load().OwnerTimeout)
		a, err := p.Ask(ctx, kindAudits, buf)
		cancel()
		if err != nil {
			// The lines behind it would wait out the same failure:
			// written here, with the batch.
			rs.queueMu.Lock()
			batch = append(batch, q.lines...)
			q.lines = nil
			rs.queueMu.Unlock()
		}
		var here []queuedLine
		for i, l := range batch {
			if err != nil || i >= len(a) || a[i] != 1 {
				here = append(here, l)
			}
		}
		rs.writeHere(here)
	}
}

// writeHere writes lines a peer did not take in this replica's audit.
func (rs *replicaSet) writeHere(lines []queuedLine) {
	own := rs.auditLog()
	for _, l := range lines {
		if own != nil && own.Add(l.rec) {
			rs.linesHere.Add(1)
		}
	}
}

// closeLines stops the lines' hand-over as the replica set closes: the
// set takes no more line (the gateway writes a later one here), the
// senders hand over what is queued within ctx (while the links are up,
// so that no line whose answer a closing link lost is written twice),
// and what is still queued then is written here. A sender still waiting
// for an answer ends once the links are closed: waitLines.
func (rs *replicaSet) closeLines(ctx context.Context) {
	rs.queueMu.Lock()
	rs.queuesClosed = true // first: peers forward calls meanwhile
	rs.queueMu.Unlock()
	rs.lines.closeAndWait(ctx)
	rs.queueMu.Lock()
	var left []queuedLine
	for _, q := range rs.queues {
		left = append(left, q.lines...)
		q.lines = nil
	}
	rs.queueMu.Unlock()
	rs.writeHere(left)
}

// waitLines waits for the senders still asking, after closeLines and the
// links' close, which ends their questions; each writes its batch here
// and ends.
func (rs *replicaSet) waitLines() {
	rs.lines.closeAndWait(context.Background())
}
