package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// legacyOffences lists what, in m, a legacy client must not get: the
// members the modern era's schema gives m's kind of message and the
// legacy era's does not (revision.Members). method is the request m
// answers ("" for a notification).
func legacyOffences(m *rpc.Message, method string) []string {
	var bad []string
	if m.Result != nil {
		var top map[string]json.RawMessage
		_ = json.Unmarshal(m.Result, &top)
		for _, name := range revision.Names(revision.Modern, revision.InResult, method) {
			if _, ok := top[name]; ok {
				bad = append(bad, name)
			}
		}
		var meta map[string]json.RawMessage
		_ = json.Unmarshal(top["_meta"], &meta)
		for _, key := range revision.Names(revision.Modern, revision.InResultMeta, method) {
			if _, ok := meta[key]; ok {
				bad = append(bad, "_meta."+key)
			}
		}
		if meta != nil && len(meta) == 0 {
			bad = append(bad, "an empty _meta")
		}
	}
	if m.Method != "" {
		var meta map[string]json.RawMessage
		_ = json.Unmarshal(rpc.Member(m.Params, "_meta"), &meta)
		for _, key := range revision.Names(revision.Modern, revision.InNotificationMeta, m.Method) {
			if _, ok := meta[key]; ok {
				bad = append(bad, m.Method+" _meta."+key)
			}
		}
	}
	return bad
}

// A 2025-11-25 client of a server mcpvisor speaks 2026-07-28 with (the
// fixture, modern-only, found so with the default config) gets results,
// errors and notifications as a server of its own era would send them:
// none of the members only the modern era has — the fixture puts every
// one of the table's in what it sends — and everything else as the server
// sent it. On both endpoints, before and after a wake.
func TestModernResultsReachLegacyClientsInTheirEra(t *testing.T) {
	for _, single := range []bool{false, true} {
		name := "/mcp"
		if single {
			name = "/servers/x/mcp"
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, `{"x":{"command":"$FIXTURE","env":{"FIXTURE_MODERN_ONLY":"1"}}}`)
			ep, prefix := Endpoint(w.gw.Aggregate()), "x__"
			if single {
				ep, prefix = w.gw.Single("x"), ""
			}
			out := newRecorder()
			s := openDeclaring(t, ep, out, `{}`)
			defer ep.Close(s)
			check := func(t *testing.T, m *rpc.Message, method string) {
				t.Helper()
				if bad := legacyOffences(m, method); len(bad) > 0 {
					t.Errorf("a legacy client got %v, which only the modern era has: %s", bad, m.Encode())
				}
			}
			for round := range 2 {
				if round == 1 {
					ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
					err := w.fleet.Get("x").Sleep(ctx)
					cancel()
					if err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				rel := newRecorder()
				resp := ep.Handle(ctx, s, request(1, "tools/call", map[string]any{"name": prefix + "echo", "arguments": map[string]any{"text": "a"}}), rel)
				if resp == nil || resp.Error != nil || !jsonEqual(resp.Result, `{"content":[{"type":"text","text":"a"}]}`) {
					t.Fatalf("round %d: echo: %s, want the server's result without the modern members", round, resp.Encode())
				}
				check(t, resp, "tools/call")

				// Progress and log lines, during a call.
				resp = ep.Handle(ctx, s, request(2, "tools/call", map[string]any{"name": prefix + "progress",
					"arguments": map[string]any{"steps": 2, "intervalMs": 1}, "_meta": map[string]any{"progressToken": "p"}}), rel)
				if resp == nil || resp.Error != nil {
					t.Fatalf("round %d: progress: %v", round, resp)
				}
				check(t, resp, "tools/call")
				resp = ep.Handle(ctx, s, request(3, "tools/call", map[string]any{"name": prefix + "log", "arguments": map[string]any{"text": "hi"}}), rel)
				if resp == nil || resp.Error != nil {
					t.Fatalf("round %d: log: %v", round, resp)
				}
				if rel.count("notifications/progress") != 2 || rel.count("notifications/message") != 1 {
					t.Errorf("round %d: notifications %v, want 2 progress and 1 log line", round, rel.methods())
				}
				rel.mu.Lock()
				for _, m := range rel.msgs {
					check(t, m, "")
					if m.Method == "notifications/progress" && string(rpc.ProgressToken(m.Params)) != `"p"` {
						t.Errorf("round %d: progress for token %s, want the client's", round, rpc.ProgressToken(m.Params))
					}
				}
				rel.mu.Unlock()

				// A list: forwarded on /servers/x/mcp, made by mcpvisor on /mcp.
				resp = ep.Handle(ctx, s, request(4, "tools/list", map[string]any{}), rel)
				if resp == nil || resp.Error != nil || !strings.Contains(string(resp.Result), `"name":"`+prefix+`echo"`) {
					t.Fatalf("round %d: tools/list: %v", round, resp)
				}
				check(t, resp, "tools/list")

				// An error passes as the server sent it (the members of an
				// error are the same in both eras).
				if single {
					resp = ep.Handle(ctx, s, request(5, "tools/call", map[string]any{"name": "nope"}), rel)
					if resp == nil || resp.Error == nil || resp.Error.Code != rpc.InvalidParams || resp.Error.Message != `Unknown tool: "nope"` {
						t.Errorf("round %d: an unknown tool: %v, want the server's own error", round, resp)
					}
				}
				cancel()
			}
			out.mu.Lock()
			for _, m := range out.msgs {
				check(t, m, "")
			}
			out.mu.Unlock()
		})
	}
}

// jsonEqual reports whether got is the JSON value want, members in any order.
func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// A 2026-07-28 client of a legacy server gets results as a modern server
// would send them: with every member the modern era requires of the
// result of its method (revision.Members) — on both endpoints, for a
// result the server made and for one mcpvisor made.
func TestLegacyResultsReachModernClientsInTheirEra(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
	meta := `{` + modernMeta(`{}`) + `}`
	for _, tc := range []struct {
		name   string
		ep     Endpoint
		prefix string
	}{
		{"/mcp", w.gw.Aggregate(), "x__"},
		{"/servers/x/mcp", w.gw.Single("x"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, m := range []*rpc.Message{
				{Method: "tools/call", Params: json.RawMessage(`{"name":"` + tc.prefix + `echo","arguments":{"text":"a"},` + modernMeta(`{}`) + `}`)},
				{Method: "tools/list", Params: json.RawMessage(meta)},
			} {
				m.ID = json.RawMessage(`1`)
				resp := tc.ep.Stateless(t.Context(), m, mustModern(t, string(m.Params)), newRecorder())
				if resp == nil || resp.Error != nil {
					t.Fatalf("%s: %v", m.Method, resp)
				}
				var top map[string]json.RawMessage
				if err := json.Unmarshal(resp.Result, &top); err != nil {
					t.Fatalf("%s: %v", m.Method, err)
				}
				n := 0
				for _, mem := range revision.Members {
					if mem.Era != revision.Modern || mem.Place != revision.InResult || !mem.Required || !mem.For(m.Method) {
						continue
					}
					n++
					if _, ok := top[mem.Name]; !ok {
						t.Errorf("%d %s: the result lacks %s, which the modern era requires (%s): %s", i, m.Method, mem.Name, mem.Def, resp.Result)
					}
				}
				if n == 0 {
					t.Fatalf("the table requires nothing of %s", m.Method)
				}
			}
		})
	}
}

// A legacy client's request reaches a server mcpvisor speaks 2026-07-28
// with as that era has it: the client's capabilities in _meta, narrowed
// by the server's config; no member only the legacy era has (a task
// augmentation); and no legacy-only notification (roots/list_changed)
// reaches the server.
func TestLegacyRequestsReachModernServersInTheirEra(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","env":{"FIXTURE_MODERN_ONLY":"1"},"clientCapabilities":["roots"]}}`)
	for _, tc := range []struct {
		name   string
		ep     Endpoint
		prefix string
	}{{"/mcp", w.gw.Aggregate(), "x__"}, {"/servers/x/mcp", w.gw.Single("x"), ""}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openDeclaring(t, tc.ep, newRecorder(), `{"roots":{"listChanged":true},"sampling":{},"experimental":{"e":{}}}`)
			defer tc.ep.Close(s)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			resp := tc.ep.Handle(ctx, s, request(1, "tools/call", map[string]any{"name": tc.prefix + "params", "arguments": map[string]any{}, "task": map[string]any{"ttl": 1000}}), newRecorder())
			if resp == nil || resp.Error != nil {
				t.Fatalf("params: %v", resp)
			}
			var res struct {
				Content []struct{ Text string } `json:"content"`
			}
			_ = json.Unmarshal(resp.Result, &res)
			if len(res.Content) != 1 {
				t.Fatalf("params: %s", resp.Result)
			}
			first, _, _ := strings.Cut(res.Content[0].Text, "\n")
			var got struct {
				Task json.RawMessage            `json:"task"`
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			if err := json.Unmarshal([]byte(first), &got); err != nil {
				t.Fatalf("params: %s: %v", first, err)
			}
			if got.Task != nil {
				t.Errorf("the server got the legacy-only task member: %s", first)
			}
			if caps := string(got.Meta[revision.MetaClientCaps]); !jsonEqual(json.RawMessage(caps), `{"roots":{"listChanged":true},"experimental":{"e":{}}}`) {
				t.Errorf("the server was declared %s, want the client's narrowed to roots by the config", caps)
			}
			tc.ep.Handle(ctx, s, &rpc.Message{Method: "notifications/roots/list_changed"}, newRecorder())
			resp = tc.ep.Handle(ctx, s, request(2, "tools/call", map[string]any{"name": tc.prefix + "params", "arguments": map[string]any{}}), newRecorder())
			if resp == nil || resp.Error != nil || strings.Contains(string(resp.Result), "roots/list_changed") {
				t.Errorf("after roots/list_changed: %v, want the server told nothing", resp)
			}
		})
	}
}
