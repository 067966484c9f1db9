package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// countingServer is a script that notes each start of the conformance
// server in a file, then runs it; and a function counting the starts.
func countingServer(t *testing.T) (command string, starts func() int) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "starts")
	command = filepath.Join(dir, "server.sh")
	script := "#!/bin/sh\necho start >> " + mustJSONString(log) + "\nexec " + mustJSONString(conformanceServer(t)) + "\n"
	if err := os.WriteFile(command, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return command, func() int {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "start")
	}
}

// A dual-era server shared by all (the default) runs a second process
// only once a modern client asks, and one for all of them; a per-session
// one gives each client session a process in its own era: a legacy
// session's initialized, a modern request's probed as modern — one
// process each, never two.
func TestDualServerProcessesPerEra(t *testing.T) {
	ctx := t.Context()
	elicit := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada", "username": "ada"}}, nil
	}}
	call := func(s *mcp.ClientSession, tool string, args map[string]any) {
		t.Helper()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError || !strings.Contains(textOf(t, res), "ada") {
			t.Fatalf("%s: %v %v", tool, err, res)
		}
	}
	for _, sharing := range []string{"shared", "per-session"} {
		t.Run(sharing, func(t *testing.T) {
			command, starts := countingServer(t)
			w := newWorld(t, `{"c":{"command":`+mustJSONString(command)+`,"prefix":"","sharing":"`+sharing+`"}}`)
			legacy := w.stdioClient(w.gw.Aggregate(), elicit)
			call(legacy, "test_elicitation", map[string]any{"message": "who?"})
			base, want := 1, 1 // shared: one process; then a second, once
			if sharing == "per-session" {
				// The shared instance, which learns the lists, and the
				// session's; then a process per modern request: two per
				// call, its input_required round and its retry.
				base, want = 2, 4
			}
			if n := starts(); n != base {
				t.Fatalf("%d starts for a legacy session, want %d", n, base)
			}
			modern := w.modernClient(w.gw.Aggregate(), false, elicit)
			call(modern, "test_input_required_result_elicitation", nil)
			call(modern, "test_input_required_result_elicitation", nil)
			if n := starts() - base; n != want {
				t.Fatalf("%d starts for two modern requests, want %d", n, want)
			}
			if n := len(w.fleet.Get("c").Roots()); sharing == "shared" && n != 2 {
				t.Errorf("%d process trees counted, want both processes", n)
			}
		})
	}
}

// A server that refuses initialize and answers server/discover is served
// as modern-only by the default config: its legacy clients through
// mcpvisor's translation, its modern clients on the same process — no
// second one starts.
func TestModernOnlyServerDefault(t *testing.T) {
	w := newWorld(t, `{"m":{"command":"$FIXTURE","env":{"FIXTURE_MODERN_ONLY":"1"}}}`)
	for name, s := range map[string]*mcp.ClientSession{
		"legacy": w.stdioClient(w.gw.Aggregate(), nil),
		"modern": w.modernClient(w.gw.Aggregate(), false, nil),
	} {
		res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "m__echo", Arguments: map[string]any{"text": name}})
		if err != nil || textOf(t, res) != name {
			t.Fatalf("%s client: %v %v", name, err, res)
		}
	}
	srv := w.fleet.Get("m")
	if era := srv.Catalog().Era(); era != modernVersion {
		t.Errorf("era %q, want %s", era, modernVersion)
	}
	if n := len(srv.Roots()); n != 1 {
		t.Errorf("%d processes, want 1", n)
	}
}

// A pinned dual-era server serves its modern clients on the process its
// tools are checked and watched on: no second process starts for them
// (its list would be neither), and their calls are checked and held.
func TestPinnedDualServerHasNoModernProcess(t *testing.T) {
	command, starts := countingServer(t)
	w := newWorld(t, `{"c":{"command":`+mustJSONString(command)+`,"prefix":"","pin":true}}`)
	w.fleet.Learn(t.Context(), 1)
	if !w.fleet.Get("c").Catalog().Cached(kindTools) {
		t.Fatal("the first list was not learned and trusted")
	}
	legacy := w.stdioClient(w.gw.Aggregate(), nil)
	if res, err := legacy.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_simple_text"}); err != nil || res.IsError {
		t.Fatalf("a legacy call: %v %v", err, res) // the primary runs
	}
	base := starts()
	modern := w.modernClient(w.gw.Aggregate(), false, nil)
	res, err := modern.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_simple_text"})
	if err != nil || res.IsError {
		t.Fatalf("a modern call: %v %v", err, res)
	}
	if n := starts() - base; n != 0 {
		t.Fatalf("%d processes started for a modern client of a pinned server", n)
	}
}
