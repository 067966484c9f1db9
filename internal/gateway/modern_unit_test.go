package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// completeResult adds resultType (and, for cacheable methods, ttlMs and
// cacheScope) to a legacy result by splicing, keeps what is there, and
// leaves alone what is not a complete result object.
func TestCompleteResult(t *testing.T) {
	for _, tc := range []struct {
		method, in, want string
	}{
		{"tools/call", `{"content":[]}`, `{"resultType":"complete","content":[]}`},
		{"tools/call", `{}`, `{"resultType":"complete"}`},
		{"tools/call", "{ \n }", "{\"resultType\":\"complete\" \n }"},
		{"tools/call", `{"resultType":"complete","x":1}`, `{"resultType":"complete","x":1}`},
		{"tools/call", `{"resultType":"input_required","requestState":"s"}`, `{"resultType":"input_required","requestState":"s"}`},
		{"tools/list", `{"tools":[]}`, `{"resultType":"complete","ttlMs":0,"cacheScope":"private","tools":[]}`},
		{"tools/list", `{"tools":[],"ttlMs":5000,"cacheScope":"public"}`, `{"resultType":"complete","tools":[],"ttlMs":5000,"cacheScope":"public"}`},
		{"resources/read", `{}`, `{"resultType":"complete","ttlMs":0,"cacheScope":"private"}`},
		{"tools/call", `[1,2]`, `[1,2]`},
		{"tools/call", `"x"`, `"x"`},
	} {
		resp := &rpc.Message{ID: json.RawMessage("1"), Result: json.RawMessage(tc.in)}
		completeResultTTL(tc.method, resp, scopePrivate, 0)
		if string(resp.Result) != tc.want {
			t.Errorf("%s %s: got %s, want %s", tc.method, tc.in, resp.Result, tc.want)
		}
		if !json.Valid(resp.Result) {
			t.Errorf("%s %s: invalid JSON %s", tc.method, tc.in, resp.Result)
		}
	}
	// An error response is left as it is.
	resp := &rpc.Message{ID: json.RawMessage("1"), Error: &rpc.Error{Code: 1, Message: "x"}}
	completeResultTTL("tools/list", resp, scopePublic, 0)
	if resp.Result != nil {
		t.Fatalf("an error got a result: %s", resp.Encode())
	}
}

// nopConn is a fleet.Conn that answers nothing, a map key for bookkeeping
// tests.
type nopConn struct{ fleet.Conn }

func (*nopConn) Name() string                                  { return "nop" }
func (*nopConn) Reply(json.RawMessage, json.RawMessage) error  { return nil }
func (*nopConn) ReplyError(json.RawMessage, int, string) error { return nil }
func (*nopConn) Init() *fleet.InitResult                       { return nil }

// However many sessions' requests end on a connection, it keeps two
// records of recent requesters — enough to tell one from several — and
// counts the sessions as active as long as two were within the linger.
func TestRecentRequestersBounded(t *testing.T) {
	g := New(nil)
	conn := &nopConn{}
	first := NewSession(noSink)
	g.reg.mu.Lock()
	g.reg.noteRecentAtLocked(conn, legacySender(first), time.Now())
	g.reg.noteRecentAtLocked(conn, legacySender(first), time.Now())
	g.reg.mu.Unlock()
	if n := g.reg.activeSessions(conn); n != 1 {
		t.Fatalf("one session's requests: %d active", n)
	}
	for range 1000 {
		g.reg.mu.Lock()
		g.reg.noteRecentAtLocked(conn, legacySender(NewSession(noSink)), time.Now())
		g.reg.mu.Unlock()
	}
	g.reg.mu.Lock()
	n := len(g.reg.recent[conn])
	g.reg.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d records kept for 1001 sessions, want 2", n)
	}
	if n := g.reg.activeSessions(conn); n != 2 {
		t.Fatalf("%d sessions active after many, want 2 (several)", n)
	}
}

// A list's ttlMs is listTTL only when every server of it announces its
// changes (or has no such list); else 0.
func TestListTTLWhenChangesAreAnnounced(t *testing.T) {
	for _, tc := range []struct {
		init string
		kind string
		want bool
	}{
		{`{"capabilities":{"tools":{"listChanged":true}}}`, "tools", true},
		{`{"capabilities":{"tools":{}}}`, "tools", false},
		{`{"capabilities":{"tools":{}}}`, "prompts", true},
		{``, "tools", false},
	} {
		var init json.RawMessage
		if tc.init != "" {
			init = json.RawMessage(tc.init)
		}
		if got := catalog.AnnouncesChanges(init, tc.kind); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.init, tc.kind, got, tc.want)
		}
	}
	resp := &rpc.Message{ID: json.RawMessage("1"), Result: json.RawMessage(`{"tools":[]}`)}
	completeResultTTL("tools/list", resp, scopePublic, listTTL)
	if !strings.Contains(string(resp.Result), `"ttlMs":60000`) {
		t.Fatalf("result %s", resp.Result)
	}
}

// No call of a modern request's session begins once the session closed
// (a late forward of it is refused before it reaches the fleet), and no
// per-session instance is made for it.
func TestClosedStatelessSessionBeginsNoCall(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","sharing":"per-session"}}`)
	srv := w.fleet.Get("x")
	s := w.gw.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
	w.gw.endModernReq(s)
	resp := w.gw.forward(t.Context(), sender{req: s}, srv, "tools/call", json.RawMessage(`{"name":"echo","arguments":{"text":"late"}}`), json.RawMessage(`1`), noSink)
	if resp.Error == nil || !strings.Contains(resp.Error.Message, "session closed") {
		t.Fatalf("a call of a closed session: %s", resp.Encode())
	}
	if n, st := srv.Status().Sessions, srv.Status().State; n != 0 || st == "running" {
		t.Fatalf("after a closed session's call: %d instances, state %s", n, st)
	}
}
