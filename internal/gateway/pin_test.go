package gateway

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A pinned server whose tools change between two starts holds the changed
// and the new tool back on every endpoint and in both eras — not listed,
// and a call gets an error naming the approval command — while its
// unchanged tools serve on; once approved they are listed and callable,
// and the sessions that see the server are told the list changed.
func TestPinnedToolHeldUntilApproved(t *testing.T) {
	variant := filepath.Join(t.TempDir(), "variant")
	w := newWorld(t, fmt.Sprintf(`{"x":{"command":"$FIXTURE","pin":true,"env":{"FIXTURE_TOOLS_VARIANT_FILE":%q}}}`, variant))
	srv := w.fleet.Get("x")
	w.fleet.Learn(t.Context(), 1)
	if !srv.Catalog().Cached(kindTools) || srv.Catalog().ToolHeld("echo") {
		t.Fatal("the first list was not learned and trusted")
	}
	if err := os.WriteFile(variant, []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.waitEvent("x", "definitions_changed", 1, 10*time.Second)
	if d := w.last("x", "definitions_changed").Details; !strings.Contains(mustJSONString(d), `"held":["echo","reverse"]`) {
		t.Fatalf("event details %s, want echo and reverse held", mustJSONString(d))
	}

	agg, single := w.gw.Aggregate(), w.gw.Single("x")
	aggOut, singleOut := newRecorder(), newRecorder()
	as, ss := agg.Open(aggOut), single.Open(singleOut)
	defer agg.Close(as)
	defer single.Close(ss)
	legacyList := func(ep Endpoint, s *Session) string {
		t.Helper()
		resp := ep.Handle(t.Context(), s, request(1, "tools/list", nil), newRecorder())
		if resp.Error != nil {
			t.Fatal(resp.Error)
		}
		return string(resp.Result)
	}
	legacyCall := func(ep Endpoint, s *Session, name string) *rpc.Message {
		t.Helper()
		return ep.Handle(t.Context(), s, request(2, "tools/call", map[string]any{"name": name, "arguments": map[string]any{"text": "abc", "upper": true}}), newRecorder())
	}
	h := NewStreamableHandler(single, HTTPOptions{})
	hs := httptest.NewServer(h)
	ha := NewStreamableHandler(agg, HTTPOptions{})
	hsa := httptest.NewServer(ha)
	t.Cleanup(func() { h.Close(); hs.Close(); ha.Close(); hsa.Close() })
	modern := func(url, method, name string) *rpc.Message {
		t.Helper()
		params := `{` + modernMeta(`{}`) + `}`
		if name != "" {
			params = `{"name":"` + name + `","arguments":{"text":"abc","upper":true},` + modernMeta(`{}`) + `}`
		}
		_, b := postModern(t, url, `{"jsonrpc":"2.0","id":3,"method":"`+method+`","params":`+params+`}`, method, name)
		m, err := rpc.Decode(bytes.TrimSpace(b))
		if err != nil {
			t.Fatalf("%s %s: %v: %s", method, name, err, b)
		}
		return m
	}
	held := func(where string, m *rpc.Message, tool string) {
		t.Helper()
		if m.Error == nil || m.Error.Code != rpc.InvalidParams || !strings.Contains(m.Error.Message, "mcpvisor tools approve x "+tool) {
			t.Fatalf("%s: call of held %s answered %s, want an error naming the approval", where, tool, m.Encode())
		}
	}
	served := func(where string, m *rpc.Message, want string) {
		t.Helper()
		if m.Error != nil || !strings.Contains(string(m.Result), want) {
			t.Fatalf("%s: %s, want a result with %s", where, m.Encode(), want)
		}
	}

	for _, c := range []struct{ where, list, echo, reverse, pid string }{
		{"aggregate legacy", legacyList(agg, as), "x__echo", "x__reverse", "x__pid"},
		{"single legacy", legacyList(single, ss), `"echo"`, `"reverse"`, `"pid"`},
		{"single modern", string(modern(hs.URL, "tools/list", "").Result), `"echo"`, `"reverse"`, `"pid"`},
		{"aggregate modern", string(modern(hsa.URL, "tools/list", "").Result), "x__echo", "x__reverse", "x__pid"},
	} {
		if strings.Contains(c.list, c.echo) || strings.Contains(c.list, c.reverse) || !strings.Contains(c.list, c.pid) {
			t.Fatalf("%s lists %s: want pid, and neither the changed echo nor the new reverse", c.where, c.list)
		}
	}
	held("aggregate legacy", legacyCall(agg, as, "x__echo"), "echo")
	held("aggregate legacy", legacyCall(agg, as, "x__reverse"), "reverse")
	held("single legacy", legacyCall(single, ss, "echo"), "echo")
	held("single modern", modern(hs.URL, "tools/call", "echo"), "echo")
	held("aggregate modern", modern(hsa.URL, "tools/call", "x__reverse"), "reverse")
	served("single legacy pid", legacyCall(single, ss, "pid"), "text")

	told := aggOut.count("notifications/tools/list_changed") + singleOut.count("notifications/tools/list_changed")
	approved, _, err := srv.Catalog().Approve([]string{"echo", "reverse"}, nil)
	if err != nil || len(approved) != 2 {
		t.Fatalf("Approve: %v %v", approved, err)
	}
	if got := aggOut.count("notifications/tools/list_changed") + singleOut.count("notifications/tools/list_changed"); got != told+2 {
		t.Fatalf("%d list_changed sent on approval, want one to each session", got-told)
	}
	if l := legacyList(agg, as); !strings.Contains(l, "x__echo") || !strings.Contains(l, "x__reverse") {
		t.Fatalf("aggregate after approval lists %s", l)
	}
	if l := legacyList(single, ss); !strings.Contains(l, `"upper"`) {
		t.Fatalf("single after approval lists %s", l)
	}
	served("aggregate legacy", legacyCall(agg, as, "x__echo"), "ABC")
	served("single legacy", legacyCall(single, ss, "echo"), "ABC")
	served("single modern", modern(hs.URL, "tools/call", "echo"), "ABC")
	served("aggregate modern", modern(hsa.URL, "tools/call", "x__reverse"), "cba")
}

// A pinned server whose package changes while it sleeps: the first calls
// after the wake — of the changed echo, and of reverse, which the new
// process serves and no list learned before had — are checked against
// what the woken process lists, on both endpoints, not against the list
// cached before it slept. The same holds for a per-session server, each
// session's process checked against its own list.
func TestPinnedToolCheckedOnTheWokenProcess(t *testing.T) {
	for _, sharing := range []string{"shared", "per-session"} {
		t.Run(sharing, func(t *testing.T) {
			variant := filepath.Join(t.TempDir(), "variant")
			w := newWorld(t, fmt.Sprintf(`{"x":{"command":"$FIXTURE","pin":true,"sharing":%q,"env":{"FIXTURE_TOOLS_VARIANT_FILE":%q}}}`, sharing, variant))
			srv := w.fleet.Get("x")
			w.fleet.Learn(t.Context(), 1)
			if !srv.Catalog().Cached(kindTools) {
				t.Fatal("the first list was not learned")
			}
			if sharing == "shared" {
				if err := srv.Sleep(t.Context()); err != nil && !strings.Contains(err.Error(), "dormant") {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(variant, []byte("1"), 0o600); err != nil {
				t.Fatal(err)
			}
			call := func(ep Endpoint, name string) *rpc.Message {
				t.Helper()
				s := ep.Open(newRecorder())
				defer ep.Close(s)
				return ep.Handle(t.Context(), s, request(2, "tools/call", map[string]any{"name": name, "arguments": map[string]any{"text": "abc", "upper": true}}), newRecorder())
			}
			for _, c := range []struct {
				ep         Endpoint
				name, tool string
			}{
				{w.gw.Single("x"), "echo", "echo"},
				{w.gw.Single("x"), "reverse", "reverse"},
				{w.gw.Aggregate(), "x__echo", "echo"},
			} {
				m := call(c.ep, c.name)
				if m.Error == nil || m.Error.Code != rpc.InvalidParams || !strings.Contains(m.Error.Message, "tools approve x "+c.tool) {
					t.Fatalf("call of %s after the change: %s, want it held", c.name, m.Encode())
				}
			}
			w.waitEvent("x", "definitions_changed", 1, 10*time.Second)
		})
	}
}

// With no prefix, a pinned server's held tool keeps its name on the
// aggregate: a call of it is refused as held, not handed to another
// server that lists a tool of the same name.
func TestHeldToolKeepsItsNameOnTheAggregate(t *testing.T) {
	variant := filepath.Join(t.TempDir(), "variant")
	w := newWorld(t, fmt.Sprintf(`{"a":{"command":"$FIXTURE","prefix":"","pin":true,"env":{"FIXTURE_TOOLS_VARIANT_FILE":%q}},"b":{"command":"$FIXTURE","prefix":""}}`, variant))
	w.fleet.Learn(t.Context(), 2)
	if err := os.WriteFile(variant, []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.fleet.Get("a").Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.waitEvent("a", "definitions_changed", 1, 10*time.Second)
	agg := w.gw.Aggregate()
	s := agg.Open(newRecorder())
	defer agg.Close(s)
	m := agg.Handle(t.Context(), s, request(2, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "abc"}}), newRecorder())
	if m.Error == nil || !strings.Contains(m.Error.Message, "tools approve a echo") {
		t.Fatalf("call of a's held echo with b also listing echo: %s, want it held (a's)", m.Encode())
	}
}
