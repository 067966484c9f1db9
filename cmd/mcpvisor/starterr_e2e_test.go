package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A server whose start hangs (it writes why to stderr, then never
// answers initialize — as an npx whose package manager hangs) gives the
// client the reason in its own words: the JSON-RPC error's data carries
// the stage and its last stderr lines, and so do the server's last error
// in ps and inspect, its history and the failed event — with a secret of
// its configuration redacted wherever the server printed it.
func TestStartFailureSaysWhy(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"hang":{"command":%q,"args":["-never-answer","-stderr-lines","3"],
		"initTimeout":"1s","env":{"SECRET_TOKEN":"stderr line 2"}}}}`, fixture), "--no-learn")
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")

	req, _ := http.NewRequest(http.MethodPost, base+"/servers/hang/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Error struct {
			Message string
			Data    struct {
				Server, Stage string
				Stderr        []string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatalf("answer: %v", err)
	}
	resp.Body.Close()
	d := msg.Error.Data
	if d.Stage != "handshake" || d.Server != "hang" || len(d.Stderr) < 3 || !strings.Contains(strings.Join(d.Stderr, "\n"), "stderr line 3") {
		t.Fatalf("the error's data: %+v (message %q)", d, msg.Error.Message)
	}
	all := strings.Join(d.Stderr, "\n") + msg.Error.Message
	if strings.Contains(all, "stderr line 2") || !strings.Contains(all, "[redacted]") {
		t.Fatalf("the secret was not redacted: %q", all)
	}
	// One sentence that names the server once, says why and quotes
	// what it wrote.
	if !strings.HasPrefix(msg.Error.Message, "server hang did not finish its handshake within 1s; stderr: ") ||
		strings.Count(msg.Error.Message, "hang") != 1 || !strings.Contains(msg.Error.Message, "stderr line 3") {
		t.Fatalf("the message: %q", msg.Error.Message)
	}

	code, out, stderr := runBin(t, "inspect", "hang", "--addr", addr, "--json")
	if code != 0 {
		t.Fatalf("inspect: %d %s", code, stderr)
	}
	var det admin.Detail
	if err := json.Unmarshal([]byte(out), &det); err != nil {
		t.Fatal(err)
	}
	// The last error quotes the last lines; the server may have written
	// more after "stderr line 3" by then (what it did not answer, its
	// exit), so the history entry is where every line is checked.
	// The same sentence everywhere: ps and inspect, the history and the
	// failed event say what the client was told.
	if det.LastError != msg.Error.Message {
		t.Fatalf("last error %q, the client was told %q", det.LastError, msg.Error.Message)
	}
	if n := len(det.History); n != 1 || det.History[0].Stage != "handshake" || !strings.Contains(strings.Join(det.History[0].Stderr, "\n"), "stderr line 3") {
		t.Fatalf("history: %+v", det.History)
	}
	for _, l := range det.Stderr {
		if strings.Contains(l.Line, "stderr line 2") {
			t.Fatalf("inspect's stderr shows the secret: %+v", det.Stderr)
		}
	}
	// The history's entry: the sentence, its stderr lines beside it.
	if h := det.History[0]; !strings.HasPrefix(msg.Error.Message, h.Error+"; stderr: ") || strings.Contains(h.Error, "stderr") {
		t.Fatalf("history: %q, the client was told %q", h.Error, msg.Error.Message)
	}
	code, out, _ = runBin(t, "inspect", "hang", "--addr", addr)
	if code != 0 || !strings.Contains(out, "handshake: ") || !strings.Contains(out, "| stderr line 3") || !strings.Contains(out, "Last error:   "+msg.Error.Message+"\n") {
		t.Fatalf("inspect: %d\n%s", code, out)
	}
	code, out, _ = runBin(t, "ps", "--addr", addr, "--json")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%q", msg.Error.Message)[1:]) {
		t.Fatalf("ps: %d\n%s", code, out)
	}
	ev := waitEvent(t, base, "failed", 1)
	if ev.Details["stage"] != "handshake" || !strings.Contains(fmt.Sprint(ev.Details["stderr"]), "stderr line 3") || strings.Contains(fmt.Sprint(ev.Details), "stderr line 2") {
		t.Fatalf("failed event: %v", ev.Details)
	}
	if ev.Details["error"] != msg.Error.Message {
		t.Fatalf("failed event's error %q, the client was told %q", ev.Details["error"], msg.Error.Message)
	}
}

// A server whose command does not exist says so in one sentence naming
// it once — to the client, in ps and in the failed event — and, its
// second failure in a row a crash loop, the next request is told that at
// once, with the same cause; so is mcpvisor call.
func TestSpawnFailureSaidOnce(t *testing.T) {
	s := startServe(t, `{"mcpServers":{"broken":{"command":"/nonexistent/server"}}}`, "--no-learn")
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	const want = "server broken could not be started: /nonexistent/server: no such file or directory"
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	for i := range 2 {
		got, err := rawRPC(base+"/servers/broken/mcp", init)
		if err != nil || !strings.Contains(got, `"message":"`+want+`"`) {
			t.Fatalf("request %d: %v %s", i+1, err, got)
		}
	}
	got, err := rawRPC(base+"/servers/broken/mcp", init)
	if err != nil || !strings.Contains(got, `"message":"server broken is in a crash loop: 2 starts in a row failed; next attempt at `) ||
		!strings.Contains(got, "; the last could not be started: /nonexistent/server: no such file or directory") ||
		!strings.Contains(got, `"crashLoop":{"failures":2,"nextAttempt":`) || strings.Count(got, "broken") != 2 { // the message and data.server
		t.Fatalf("in the crash loop: %v %s", err, got)
	}
	code, out, _ := runBin(t, "ps", "--addr", addr)
	if code != 0 || !strings.Contains(out, "server broken could not be started") || strings.Count(out, "broken") != 2 { // NAME and LAST ERROR
		t.Fatalf("ps: %d\n%s", code, out)
	}
	if ev := waitEvent(t, base, "failed", 2); ev.Details["error"] != want {
		t.Fatalf("failed event: %v", ev.Details)
	}
	code, _, stderr := runBin(t, "call", "broken", "echo", "--addr", addr)
	if code == 0 || !strings.Contains(stderr, "server broken is in a crash loop") || strings.Count(stderr, "broken") != 1 {
		t.Fatalf("mcpvisor call: %d %q", code, stderr)
	}
}

// rawRPC posts one JSON-RPC message to url and returns the response body
// (JSON, or an SSE reply as it came), or an error for an HTTP failure.
func rawRPC(url, body string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	version := "2025-11-25"
	if strings.Contains(body, `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`) {
		version = "2026-07-28"
	}
	req.Header.Set("MCP-Protocol-Version", version)
	if version == "2026-07-28" {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "echo")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
