package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// fakeReceiver is the replica that received a request forwarded here: it
// answers Allow as told and keeps the lines it is handed.
type fakeReceiver struct {
	// What Allow answers, and whether Audit takes the lines.
	ok        bool
	wait      time.Duration
	scope     string
	err       error
	refuse    bool
	auditFull bool

	mu     sync.Mutex
	allows []string // "key server target" of each Allow
	lines  []audit.Record
	tried  int // Audit calls, refused ones too
}

func (r *fakeReceiver) Allow(ctx context.Context, key, server, target string) (Admission, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allows = append(r.allows, key+" "+server+" "+target)
	return Admission{AuditFull: r.auditFull, OK: r.ok, Wait: r.wait, Scope: r.scope}, r.err
}

func (r *fakeReceiver) Audit(rec audit.Record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tried++
	if r.refuse {
		return false
	}
	r.lines = append(r.lines, rec)
	return true
}

func (r *fakeReceiver) seen() (allows []string, lines []audit.Record, tried int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.allows...), append([]audit.Record(nil), r.lines...), r.tried
}

// viaReceiver serves h to id's requests as forwarded from r (nil: as
// received here), and returns its URL.
func viaReceiver(t *testing.T, h http.Handler, id *identity.Identity, r Receiver) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := identity.NewContext(req.Context(), id)
		if r != nil {
			ctx = WithReceiver(ctx, r)
		}
		h.ServeHTTP(w, req.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// receiverWorld serves server a on /mcp and on its own endpoint, with an
// audit log here and a rate limiter here that has nothing left for alice:
// whatever asks it of her calls is refused (and counted).
type receiverWorld struct {
	*world
	agg, one  *StreamableHandler
	lim       *ratelimit.Limiter
	log       *audit.Log
	auditFile string
}

func newReceiverWorld(t *testing.T) *receiverWorld {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	rw := &receiverWorld{world: w, auditFile: filepath.Join(t.TempDir(), "audit.jsonl")}
	log, err := audit.Open(audit.Options{File: rw.auditFile})
	if err != nil {
		t.Fatal(err)
	}
	rw.log = log
	w.gw.SetAudit(log)
	rw.lim = ratelimit.New(ratelimit.Limits{PerIdentity: ratelimit.Rate{PerSecond: 0.001, Burst: 1}})
	if ok, _, _ := rw.lim.Allow(testUsers["alice"].Key(), "a", "echo"); !ok {
		t.Fatal("alice's first token")
	}
	w.gw.SetLimits(rw.lim)
	rw.agg = NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	rw.one = NewStreamableHandler(w.gw.Single("a"), HTTPOptions{})
	t.Cleanup(func() {
		rw.agg.Close()
		rw.one.Close()
		w.gw.SetAudit(nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = log.Close(ctx)
	})
	return rw
}

// calls is how many calls server a has had.
func (w *receiverWorld) calls() (n uint64) {
	for _, c := range w.fleet.Get("a").Telemetry().Calls() {
		n += c
	}
	return n
}

// limiterUntouched fails the test if the limiter here was asked anything
// of alice since newReceiverWorld (a call of hers it is asked about is
// refused, and counted).
func (w *receiverWorld) limiterUntouched() {
	w.t.Helper()
	if st := w.lim.Stats(); st.LimitedIdentity != 0 || st.Identities != 1 {
		w.t.Errorf("the limiter here was consulted: %+v", st)
	}
}

// auditLine is what the tests read of a line the audit here wrote.
type auditLine struct {
	Identity, Endpoint, Server, Method, Target, Outcome, Reason string
	Code                                                        int
}

// localLines closes the audit log here and returns the lines it wrote.
func (w *receiverWorld) localLines() []auditLine {
	w.t.Helper()
	w.gw.SetAudit(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.log.Close(ctx); err != nil {
		w.t.Fatal(err)
	}
	raw, err := os.ReadFile(w.auditFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		w.t.Fatal(err)
	}
	var recs []auditLine
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var rec auditLine
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			w.t.Fatalf("audit line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// modernCall posts alice's modern tools/call of tool to url and returns
// the reply's status and message.
func modernCall(t *testing.T, url, tool string) (int, *rpc.Message) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":` + mustJSONString(tool) + `,"arguments":{"text":"xyzzy"},` + modernMeta(`{}`) + `}}`
	resp, b := postModern(t, url, body, "tools/call", tool)
	ms := replyMessages(t, resp, b)
	if len(ms) == 0 {
		t.Fatalf("reply %q: no message", b)
	}
	return resp.StatusCode, ms[len(ms)-1]
}

// A call forwarded by the replica that received it is limited by that
// replica (asked once, by the identity, server and tool; the limiter here,
// which would refuse it, is not asked) and served here, and its line goes
// to that replica, not to the audit here — on /mcp as a modern request
// and in a legacy session, and on the server's own endpoint. A modern
// call whose identity has nothing left here is not shed.
func TestReceiverLimitsAndAuditsAForwardedCall(t *testing.T) {
	w := newReceiverWorld(t)
	alice := testUsers["alice"]
	client := httptest.NewServer(http.NotFoundHandler()) // its Client only
	defer client.Close()
	cases := []struct {
		name, endpoint, tool string
		call                 func(url string) (int, *rpc.Message)
		session              bool
	}{
		{"modern on /mcp", "/mcp", "a__echo", func(url string) (int, *rpc.Message) { return modernCall(t, url, "a__echo") }, false},
		{"modern on /servers/a/mcp", "/servers/a/mcp", "echo", func(url string) (int, *rpc.Message) { return modernCall(t, url, "echo") }, false},
		{"legacy session on /mcp", "/mcp", "a__echo", func(url string) (int, *rpc.Message) {
			s := &httpTestServer{t: t, url: url, srv: client}
			sid := s.initialize()
			resp := s.do("POST", sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"xyzzy"}}}`, map[string]string{"MCP-Protocol-Version": "2025-11-25"})
			return resp.StatusCode, decodeBody(t, resp)
		}, true},
	}
	for _, c := range cases {
		r := &fakeReceiver{ok: true}
		h := w.agg
		if c.endpoint != "/mcp" {
			h = w.one
		}
		before := w.calls()
		status, m := c.call(viaReceiver(t, h, alice, r))
		if status != http.StatusOK || m.Error != nil || !strings.Contains(string(m.Result), "xyzzy") {
			t.Fatalf("%s: %d %s, want the call served", c.name, status, m.Encode())
		}
		if n := w.calls() - before; n != 1 {
			t.Errorf("%s: a had %d calls, want 1", c.name, n)
		}
		allows, lines, _ := r.seen()
		if want := alice.Key() + " a echo"; len(allows) != 1 || allows[0] != want {
			t.Errorf("%s: the receiver was asked %q, want once %q", c.name, allows, want)
		}
		if len(lines) != 1 {
			t.Fatalf("%s: the receiver got %d lines, want 1: %+v", c.name, len(lines), lines)
		}
		l := lines[0]
		if l.Outcome != "ok" || l.Target != "echo" || l.Server != "a" || l.Method != "tools/call" || l.Identity != "alice" ||
			l.Endpoint != c.endpoint || (l.Session != "") != c.session || l.Arguments == nil {
			t.Errorf("%s: the receiver's line %+v", c.name, l)
		}
	}
	w.limiterUntouched()
	if lines := w.localLines(); len(lines) != 0 {
		t.Errorf("the audit here wrote %+v, want nothing", lines)
	}
}

// A call the receiving replica's limits refuse gets the answer a refusal
// here gets (429, -32013, retryAfter) and reaches no server; its
// "limited" line goes to that replica.
func TestReceiverRefusesAForwardedCall(t *testing.T) {
	w := newReceiverWorld(t)
	r := &fakeReceiver{ok: false, wait: 2500 * time.Millisecond, scope: ratelimit.ScopeTool}
	before := w.calls()
	status, m := modernCall(t, viaReceiver(t, w.agg, testUsers["alice"], r), "a__echo")
	if status != http.StatusTooManyRequests || m.Error == nil || m.Error.Code != rpc.RateLimited ||
		m.Error.Message != "rate limit exceeded: retry after 3 s" || string(m.Error.Data) != `{"retryAfter":3}` {
		t.Fatalf("the refused call: %d %s", status, m.Encode())
	}
	if n := w.calls() - before; n != 0 {
		t.Errorf("a had %d calls, want none", n)
	}
	_, lines, _ := r.seen()
	if len(lines) != 1 {
		t.Fatalf("the receiver got %+v, want one line", lines)
	}
	if l := lines[0]; l.Outcome != "limited" || l.Code != rpc.RateLimited || l.Reason != "rate limit per "+ratelimit.ScopeTool ||
		l.Target != "echo" || l.Identity != "alice" {
		t.Errorf("the receiver's line %+v", l)
	}
	w.limiterUntouched()
	if lines := w.localLines(); len(lines) != 0 {
		t.Errorf("the audit here wrote %+v, want nothing", lines)
	}
}

// A call whose receiving replica cannot be asked about its limits is
// refused, saying so, reaches no server, and is counted; no "limited"
// line is written anywhere.
func TestReceiverThatCannotBeAskedRefusesTheCall(t *testing.T) {
	w := newReceiverWorld(t)
	r := &fakeReceiver{err: errors.New("peer link closed")}
	before := w.calls()
	_, m := modernCall(t, viaReceiver(t, w.agg, testUsers["alice"], r), "a__echo")
	if m.Error == nil || m.Error.Code != rpc.InternalError || !strings.Contains(m.Error.Message, "could not be asked whether it may go on") ||
		!strings.Contains(m.Error.Message, "peer link closed") {
		t.Fatalf("the call: %s", m.Encode())
	}
	if n := w.calls() - before; n != 0 {
		t.Errorf("a had %d calls, want none", n)
	}
	if n := w.gw.ReceiverRefusals(); n != 1 {
		t.Errorf("ReceiverRefusals %d, want 1", n)
	}
	if _, lines, _ := r.seen(); len(lines) != 0 {
		t.Errorf("the receiver got %+v, want no line", lines)
	}
	w.limiterUntouched()
	if lines := w.localLines(); len(lines) != 0 {
		t.Errorf("the audit here wrote %+v, want nothing", lines)
	}
}

// A line the receiving replica cannot take (its link is gone) is written
// in the audit here: none is lost.
func TestReceiverThatCannotTakeTheLine(t *testing.T) {
	w := newReceiverWorld(t)
	r := &fakeReceiver{ok: true, refuse: true}
	if status, m := modernCall(t, viaReceiver(t, w.agg, testUsers["alice"], r), "a__echo"); status != http.StatusOK || m.Error != nil {
		t.Fatalf("the call: %d %s", status, m.Encode())
	}
	if _, _, tried := r.seen(); tried != 1 {
		t.Errorf("the receiver was offered %d lines, want 1", tried)
	}
	lines := w.localLines()
	if len(lines) != 1 || lines[0].Outcome != "ok" || lines[0].Target != "echo" || lines[0].Identity != "alice" {
		t.Errorf("the audit here wrote %+v, want the call's line", lines)
	}
	w.limiterUntouched()
}

// A call the policy denies, and a request of a server's endpoint by who
// may use nothing of it, are denied here; their lines go to the
// receiving replica.
func TestReceiverTakesDeniedLines(t *testing.T) {
	w := newReceiverWorld(t)
	w.gw.SetPolicy(mustPolicy(t,
		policy.Rule{Name: "alice", Effect: policy.Allow, When: `identity.sub == "alice"`},
		policy.Rule{Name: "no crash", Effect: policy.Deny, When: `tool == "crash"`},
	))
	alice, bob := testUsers["alice"], testUsers["bob"]
	before := w.calls()

	r := &fakeReceiver{ok: true}
	if _, m := modernCall(t, viaReceiver(t, w.agg, alice, r), "a__crash"); m.Error == nil || m.Error.Code != rpc.NotPermitted {
		t.Fatalf("alice's call of crash: %s, want not permitted", m.Encode())
	}
	_, lines, _ := r.seen()
	if len(lines) != 1 || lines[0].Outcome != "denied" || lines[0].Code != rpc.NotPermitted || lines[0].Target != "crash" ||
		!strings.Contains(lines[0].Reason, "no crash") || lines[0].Identity != "alice" {
		t.Errorf("the receiver's lines %+v, want the denial", lines)
	}

	rb := &fakeReceiver{ok: true}
	if _, m := modernCall(t, viaReceiver(t, w.one, bob, rb), "echo"); m.Error == nil || m.Error.Code != rpc.NotPermitted {
		t.Fatalf("bob's call on /servers/a/mcp: %s, want not permitted", m.Encode())
	}
	_, lines, _ = rb.seen()
	if len(lines) != 1 || lines[0].Outcome != "denied" || lines[0].Endpoint != "/servers/a/mcp" || lines[0].Identity != "bob" {
		t.Errorf("the receiver's lines %+v, want bob's denial", lines)
	}
	if n := w.calls() - before; n != 0 {
		t.Errorf("a had %d calls, want none", n)
	}
	if lines := w.localLines(); len(lines) != 0 {
		t.Errorf("the audit here wrote %+v, want nothing", lines)
	}
}

// A modern call whose identity has nothing left in the limiter here is
// shed with 429 before its body is read when it was received here, and
// is not when it was forwarded: the receiving replica's limits govern it,
// asked by the call itself.
func TestForwardedModernCallIsNotShed(t *testing.T) {
	w := newReceiverWorld(t)
	alice := testUsers["alice"]
	r := &fakeReceiver{ok: true}
	if status, m := modernCall(t, viaReceiver(t, w.agg, alice, r), "a__echo"); status != http.StatusOK || m.Error != nil {
		t.Fatalf("the forwarded call: %d %s, want it served", status, m.Encode())
	}
	if allows, _, _ := r.seen(); len(allows) != 1 {
		t.Errorf("the receiver was asked %q, want once", allows)
	}
	w.limiterUntouched()

	// Received here: shed, by the limiter here, its line here.
	status, m := modernCall(t, viaReceiver(t, w.agg, alice, nil), "a__echo")
	if status != http.StatusTooManyRequests || m.Error == nil || m.Error.Code != rpc.RateLimited {
		t.Fatalf("the call received here: %d %s, want 429", status, m.Encode())
	}
	lines := w.localLines()
	if len(lines) != 1 || !strings.Contains(lines[0].Reason, "before the request was read") {
		t.Errorf("the audit here wrote %+v, want the shed call's line", lines)
	}
}

// A modern client's call held across input_required rounds is limited
// once by the replica that received it and its one line, written when it
// ends after the client's retry, goes to that replica.
func TestReceiverTakesAHeldCallsLine(t *testing.T) {
	w := newMRTRWorld(t)
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	// failClosed: the receiver's audit may refuse, so it is asked.
	log, err := audit.Open(audit.Options{File: file, FailClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	w.gw.SetAudit(log)
	r := &fakeReceiver{ok: true}
	alice := testUsers["alice"]
	via := &mrtrWorld{world: w.world, h: w.h, url: viaReceiver(t, w.h, alice, r)}
	key, _, state := inputRequired(t, via.call("1", "", `{"elicitation":{}}`))
	w.heldCalls(1)
	// The retry comes straight here: the call is the first request's.
	retry := &mrtrWorld{world: w.world, h: w.h, url: viaReceiver(t, w.h, alice, nil)}
	m := retry.call("2", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("the retry: %s", m.Encode())
	}
	w.heldCalls(0)
	allows, lines, _ := r.seen()
	if len(allows) != 1 || !strings.HasSuffix(allows[0], " c test_elicitation") {
		t.Errorf("the receiver was asked %q, want once of c's test_elicitation", allows)
	}
	if len(lines) != 1 || lines[0].Outcome != "ok" || lines[0].Target != "test_elicitation" || lines[0].Identity != "alice" {
		t.Errorf("the receiver's lines %+v, want the held call's", lines)
	}
	w.gw.SetAudit(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := log.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(file); len(strings.TrimSpace(string(raw))) != 0 {
		t.Errorf("the audit here wrote %s, want nothing", raw)
	}
}

// A receiving replica whose audit, failClosed, cannot take a line
// refuses the call as it would one it served itself: the call reaches no
// server, no token of a limit is spent, and it is counted.
func TestReceiverWhoseAuditIsFullRefusesTheCall(t *testing.T) {
	w := newReceiverWorld(t)
	r := &fakeReceiver{ok: true, auditFull: true}
	before := w.calls()
	_, m := modernCall(t, viaReceiver(t, w.agg, testUsers["alice"], r), "a__echo")
	if m.Error == nil || m.Error.Code != rpc.LimitReached || !strings.Contains(m.Error.Message, "failClosed") {
		t.Fatalf("the call: %s", m.Encode())
	}
	if n := w.calls() - before; n != 0 {
		t.Errorf("a had %d calls, want none", n)
	}
	if n := w.gw.AuditRefusals(); n != 1 {
		t.Errorf("AuditRefusals %d, want 1", n)
	}
	if allows, lines, _ := r.seen(); len(allows) != 1 || len(lines) != 0 {
		t.Errorf("the receiver was asked %v and got %+v, want one question and no line", allows, lines)
	}
	w.limiterUntouched()
}

// With neither rate limits nor an audit here (only a policy), there is
// nothing to ask the receiving replica: a call costs no round trip to it.
func TestReceiverIsNotAskedWhenNothingLimitsOrAudits(t *testing.T) {
	w := newReceiverWorld(t)
	w.gw.SetLimits(nil)
	w.gw.SetAudit(nil)
	w.gw.SetPolicy(mustPolicy(t, policy.Rule{Name: "all", Effect: policy.Allow, When: `true`}))
	r := &fakeReceiver{ok: false}
	if status, m := modernCall(t, viaReceiver(t, w.agg, testUsers["alice"], r), "a__echo"); status != http.StatusOK || m.Error != nil {
		t.Fatalf("the call: %d %s", status, m.Encode())
	}
	if allows, _, _ := r.seen(); len(allows) != 0 {
		t.Errorf("the receiver was asked %v, want nothing", allows)
	}
}

// An audit that does not refuse calls (not failClosed) and no rate limits:
// the receiving replica's answer could not refuse the call, so it is not
// asked (no round trip before the call); it still takes the line.
func TestReceiverIsOnlyHandedTheLineOfAnAuditThatNeverRefuses(t *testing.T) {
	w := newReceiverWorld(t)
	w.gw.SetLimits(nil)
	r := &fakeReceiver{ok: false, auditFull: true}
	if status, m := modernCall(t, viaReceiver(t, w.agg, testUsers["alice"], r), "a__echo"); status != http.StatusOK || m.Error != nil {
		t.Fatalf("the call: %d %s", status, m.Encode())
	}
	allows, lines, _ := r.seen()
	if len(allows) != 0 {
		t.Errorf("the receiver was asked %v, want nothing", allows)
	}
	if len(lines) != 1 || lines[0].Outcome != "ok" {
		t.Errorf("the receiver got the lines %+v, want the call's", lines)
	}
}
