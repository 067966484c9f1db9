package main

//lint:file-ignore SA1019 sampling and logging are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 client's sampling, elicitation and logging through mcpvisor.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// eraClient connects a go-sdk client to url in an era — "2025-11-25", or
// "" for the SDK's default, 2026-07-28 — with handlers that answer
// sampling and elicitation naming who answered.
func eraClient(t *testing.T, url, version, who string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-" + who, Version: "0"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "e2e", Content: &mcp.TextContent{Text: who}}, nil
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			field := "name"
			if s, ok := r.Params.RequestedSchema.(map[string]any); ok {
				for k := range s["properties"].(map[string]any) {
					field = k
				}
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{field: who}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, opts)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { sess.Close() })
	want := version
	if want == "" {
		want = "2026-07-28"
	}
	if v := sess.InitializeResult().ProtocolVersion; v != want {
		t.Fatalf("the go-sdk client negotiated %q with %s, want %q", v, url, want)
	}
	return sess
}

// modernPost sends one 2026-07-28 tools/call of tool to url and returns
// the JSON-RPC result.
func modernPost(t *testing.T, url, tool string) json.RawMessage {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{},"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"}}}}`
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	messages := func(yield func([]byte, error) bool) { yield(b, nil) } // a JSON reply's one
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		messages = sseData(bytes.NewReader(b))
	}
	for data, err := range messages {
		if err != nil {
			t.Fatalf("the modern tools/call of %s: %v: %s", tool, err, b)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(data, &m) == nil && string(m.ID) == "1" {
			return m.Result
		}
	}
	t.Fatalf("no answer to the modern tools/call of %s: %d %s", tool, resp.StatusCode, b)
	return nil
}

// serverEra is the era /api/servers/NAME reports.
func serverEra(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/api/servers/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Era string `json:"era"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.Era
}

// TestDualEraServer serves one dual-era server (the go-sdk conformance
// server) with the default config to go-sdk and TypeScript SDK v2
// clients of both eras at once: each gets sampling and elicitation in its
// own era — a legacy client the server's own requests, a modern client
// the server's own input_required rounds (its own input keys, which
// mcpvisor's held calls would not have) — the server's resource updates reach
// a legacy subscriber and a modern listener once each, and the era learned
// ("dual") is kept with the server's lists across a restart of mcpvisor.
func TestDualEraServer(t *testing.T) {
	_, everything := binaries(t)
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"mcpServers":{"everything":{"command":%q}}}`, everything), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	s := startServeFile(t, cfg, "", "--state-dir", state)
	base := s.base
	single, agg := base+"/servers/everything/mcp", base+"/mcp"

	// The server updates test://watched-resource every 3 s: a legacy
	// subscriber and a modern listener each get each update once (the
	// next notification after one is the next update, not a copy),
	// whatever the clients below do meanwhile.
	legacy := make(chan time.Time, 16)
	ls := mcp.NewClient(&mcp.Implementation{Name: "sub", Version: "0"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(context.Context, *mcp.ResourceUpdatedNotificationRequest) { legacy <- time.Now() },
	})
	sub, err := ls.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: single, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "test://watched-resource"}); err != nil {
		t.Fatal(err)
	}
	modern := listenUpdates(t, single, "test://watched-resource")

	// A modern client's request: the server's own input_required result.
	if res := modernPost(t, single, "test_input_required_result_elicitation"); !strings.Contains(string(res), `"resultType":"input_required"`) || !strings.Contains(string(res), `"user_name"`) {
		t.Fatalf("modern tools/call: %s", res)
	}
	if era := serverEra(t, base, "everything"); era != "2025-11-25+2026-07-28" {
		t.Errorf("era %q, want 2025-11-25+2026-07-28", era)
	}

	// One at a time: the server's requests during a legacy call are
	// attributed to the one session with a call in flight there.
	t.Run("clients", func(t *testing.T) {
		for _, c := range []struct{ url, version, prefix string }{
			{single, "2025-11-25", ""}, {single, "", ""}, {agg, "2025-11-25", "everything__"}, {agg, "", "everything__"},
		} {
			who := "go-" + c.version + "-" + c.prefix
			t.Run(who, func(t *testing.T) {
				sess := eraClient(t, c.url, c.version, who)
				sampling, elicitation, wantS, wantE := "test_sampling", "test_elicitation", "LLM response: "+who, "username:"+who
				if c.version == "" {
					sampling, elicitation, wantS, wantE = "test_input_required_result_sampling", "test_input_required_result_elicitation", "Sampling response: "+who, "Hello, "+who+"!"
				}
				for tool, want := range map[string]string{sampling: wantS, elicitation: wantE} {
					args := map[string]any{}
					switch tool {
					case "test_sampling":
						args["prompt"] = "p"
					case "test_elicitation":
						args["message"] = "m"
					}
					res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: c.prefix + tool, Arguments: args})
					if err != nil || res.IsError || !strings.Contains(text(res), want) {
						t.Errorf("%s: %v %v %s", tool, err, res, text(res))
					}
				}
			})
		}
		for _, mode := range []string{"legacy", "pin"} {
			t.Run("ts-"+mode, func(t *testing.T) {
				r := runTSClientEnv(t, []string{"TS_SERVER=conformance", "TS_TOOL_PREFIX=everything__"}, mode, agg)
				wantS, wantE := "LLM response: ts answer to capital?", "username:ts"
				if mode == "pin" {
					wantS, wantE = "Sampling response: ts answer to What is the capital of France?", "Hello, ts!"
				}
				if !strings.Contains(r.Sampled, wantS) || !strings.Contains(r.Elicited, wantE) {
					t.Errorf("%+v", r)
				}
			})
		}
	})

	// The updates since the subscriptions: each came once.
	for name, ch := range map[string]<-chan time.Time{"legacy subscriber": legacy, "modern listener": modern} {
		first := waitUpdate(t, name, ch)
		if gap := waitUpdate(t, name, ch).Sub(first); gap < 2*time.Second {
			t.Errorf("%s: two updates %v apart: one was a copy", name, gap)
		}
	}

	// mcpvisor restarted on the same state: the era kept says dual, and
	// so does inspect, before the server runs.
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := s.exit(t, time.Now(), 10*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	testserver.WaitGone(t, s.marker, 2*time.Second) // both of its processes
	s2 := startServeFile(t, cfg, "", "--state-dir", state)
	stopAtCleanup(t, s2)
	if era := serverEra(t, s2.base, "everything"); era != "2025-11-25+2026-07-28" {
		t.Errorf("after a restart: era %q", era)
	}
	if code, out, stderr := runBin(t, "inspect", "everything", "--addr", strings.TrimPrefix(s2.base, "http://")); code != 0 || !strings.Contains(out, "speaks 2025-11-25 and 2026-07-28 (dual-era") {
		t.Errorf("inspect: %d\n%s%s", code, out, stderr)
	}
}

// listenUpdates opens a 2026-07-28 subscriptions/listen on url for the
// updates of uri and sends the time of each on the channel returned.
func listenUpdates(t *testing.T, url, uri string) <-chan time.Time {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":"l","method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["` + uri + `"]},"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"l","version":"0"}}}}`
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out := make(chan time.Time, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for data, err := range sseData(resp.Body) {
			if err != nil {
				return
			}
			var m struct{ Method string }
			if json.Unmarshal(data, &m) == nil && m.Method == "notifications/resources/updated" {
				out <- time.Now()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return out
}

// waitUpdate waits for the next update on ch, at most 10 s.
func waitUpdate(t *testing.T, name string, ch <-chan time.Time) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no resource update within 10 s", name)
	}
	return time.Time{}
}
