package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A method /mcp does not know is routed by the tool, prompt or resource
// its params name, in both eras: to the server that has it, under the
// server's own name; a name no server has, a tool its filter denies, and
// params that name nothing are refused, and reach no server. The
// per-server endpoint passes such a method through as it came.
func TestUnknownMethodsRoutedByWhatTheyName(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, `{"a":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"a"}},"b":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"b"},"tools":{"deny":["crash"]}}}`)
	ep := w.gw.Aggregate()
	out := newRecorder()
	s := openDeclaring(t, ep, out, `{}`)
	defer ep.Close(s)
	type reply struct {
		Method string
		Params struct{ Name, URI string }
		Tag    string
	}
	legacy := func(method string, params any) *rpc.Message {
		return ep.Handle(t.Context(), s, request(7, method, params), newRecorder())
	}
	modern := func(method string, params map[string]any) *rpc.Message {
		b, _ := json.Marshal(params)
		p := strings.TrimSuffix(string(b), "}")
		if len(params) > 0 {
			p += ","
		}
		p += modernMeta(`{}`) + "}"
		m := &rpc.Message{ID: json.RawMessage(`7`), Method: method, Params: json.RawMessage(p)}
		return ep.Stateless(t.Context(), m, mustModern(t, p), newRecorder())
	}
	routed := func(era string, resp *rpc.Message, method, server, name string) {
		t.Helper()
		var r reply
		if resp == nil || resp.Error != nil || json.Unmarshal(resp.Result, &r) != nil {
			t.Fatalf("%s %s for %s: %+v", era, method, name, resp)
		}
		if r.Method != method || r.Params.Name != name || r.Tag != server {
			t.Errorf("%s %s: reached %q with %+v; want %s, named %q", era, method, r.Tag, r, server, name)
		}
	}
	for _, era := range []string{"2025-11-25", "2026-07-28"} {
		call := func(method string, params map[string]any) *rpc.Message {
			if era == "2026-07-28" {
				return modern(method, params)
			}
			return legacy(method, params)
		}
		routed(era, call("fixture/describe", map[string]any{"name": "a__echo"}), "fixture/describe", "a", "echo")
		routed(era, call("fixture/describe", map[string]any{"name": "b__echo"}), "fixture/describe", "b", "echo")
		routed(era, call("tools/describe", map[string]any{"name": "a__sleep"}), "tools/describe", "a", "sleep")
		refused := func(resp *rpc.Message, code int, words string) {
			t.Helper()
			if resp == nil || resp.Error == nil || resp.Error.Code != code || !strings.Contains(resp.Error.Message, words) {
				t.Errorf("%s: %+v, want error %d saying %q", era, resp, code, words)
			}
		}
		// b denies its crash tool: the name is not b's on /mcp.
		refused(call("fixture/describe", map[string]any{"name": "b__crash"}), rpc.InvalidParams, "no tool or prompt is named b__crash")
		refused(call("fixture/describe", map[string]any{"name": "zz__echo"}), rpc.InvalidParams, "no tool or prompt is named zz__echo")
		refused(call("tools/describe", map[string]any{"name": "zz__echo"}), rpc.InvalidParams, "tools/describe: no tool is named zz__echo")
		refused(call("fixture/describe", map[string]any{"uri": "nowhere://x"}), -32002, "Resource not found")
		refused(call("fixture/describe", map[string]any{"id": "t-1"}), rpc.MethodNotFound, "method not found: fixture/describe (the aggregated endpoint routes")
		refused(call("fixture/describe", map[string]any{}), rpc.MethodNotFound, "these name none")
	}
	// The per-server endpoint: any method, as it came.
	single := w.gw.Single("a")
	sa := openDeclaring(t, single, newRecorder(), `{}`)
	defer single.Close(sa)
	resp := single.Handle(t.Context(), sa, request(8, "fixture/describe", map[string]any{"name": "a__echo"}), newRecorder())
	routed("per-server", resp, "fixture/describe", "a", "a__echo")
}

// A tool a pinned server holds back is called by no method until it is
// approved: a method /mcp does not know that names it is refused, as a
// tools/call of it is; the server's other tools are routed.
func TestUnknownMethodNamingAHeldToolIsRefused(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	variant := filepath.Join(t.TempDir(), "variant")
	w := newWorld(t, fmt.Sprintf(`{"x":{"command":"$FIXTURE","pin":true,"env":{"FIXTURE_TOOLS_VARIANT_FILE":%q,"FIXTURE_TAG":"x"}}}`, variant))
	w.fleet.Learn(t.Context(), 1)
	if err := os.WriteFile(variant, []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.fleet.Get("x").Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.waitEvent("x", "definitions_changed", 1, 10*time.Second)
	agg := w.gw.Aggregate()
	s := agg.Open(newRecorder())
	defer agg.Close(s)
	m := agg.Handle(t.Context(), s, request(2, "tools/describe", map[string]any{"name": "x__echo"}), newRecorder())
	if m.Error == nil || m.Error.Code != rpc.InvalidParams || !strings.Contains(m.Error.Message, "no tool is named x__echo") {
		t.Errorf("a method naming the held echo: %s, want it refused", m.Encode())
	}
	m = agg.Handle(t.Context(), s, request(3, "tools/describe", map[string]any{"name": "x__sleep"}), newRecorder())
	if m.Error != nil || !strings.Contains(string(m.Result), `"tag":"x"`) {
		t.Errorf("a method naming x's unchanged sleep: %s, want it routed", m.Encode())
	}
}
