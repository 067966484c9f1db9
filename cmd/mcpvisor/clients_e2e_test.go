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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// connectAs connects the go-sdk client named name (version version) to
// url: a legacy session (2025-11-25) if legacy, else at its modern
// default, with no session and its identity in each request's _meta.
func connectAs(t *testing.T, url, name, version string, legacy bool) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: name, Version: version}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if legacy {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	}
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, opts)
	if err != nil {
		t.Fatalf("connect %s as %s: %v", url, name, err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

func echoN(t *testing.T, sess *mcp.ClientSession, n int) {
	t.Helper()
	for range n {
		if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
}

// Which client drives which server, on the real binary: two legacy
// sessions and a modern client on server a, one of them on b too. Each
// client's requests are counted under its own name — never another's —
// in /api/servers, mcpvisor ps (CLIENTS: the names when they fit, else
// how many), mcpvisor inspect (the full list) and /metrics
// (mcpvisor_server_client_requests_total); c, which no client used,
// shows none anywhere.
func TestClientsShownEverywhere(t *testing.T) {
	fixture := testserver.Build(t)
	base := serve(t, fmt.Sprintf(`{"mcpServers":{"a":{"command":%[1]q},"b":{"command":%[1]q},"c":{"command":%[1]q}}}`, fixture))
	claude := connectAs(t, base+"/servers/a/mcp", "Claude Desktop", "0.14.1", true)
	cursor := connectAs(t, base+"/servers/a/mcp", "cursor-vscode", "1.0.0", true)
	zed := connectAs(t, base+"/servers/a/mcp", "Zed", "0.190.0", false)
	cursorB := connectAs(t, base+"/servers/b/mcp", "cursor-vscode", "1.0.0", true)
	echoN(t, claude, 3)
	echoN(t, cursor, 2)
	echoN(t, zed, 1)
	echoN(t, cursorB, 4)

	want := map[string]map[string]uint64{
		"a": {"claude-desktop": 3, "cursor-vscode": 2, "zed": 1},
		"b": {"cursor-vscode": 4},
		"c": {},
	}
	addr := strings.TrimPrefix(base, "http://")

	t.Run("api", func(t *testing.T) {
		code, out, stderr := runBin(t, "ps", "--addr", addr, "--json")
		if code != 0 {
			t.Fatalf("ps --json: exit %d %s", code, stderr)
		}
		var st admin.Servers
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("ps --json printed %s", out)
		}
		for _, s := range st.Servers {
			got := map[string]uint64{}
			for _, c := range s.Clients {
				got[c.Name] = c.Requests
				if c.LastUsed.IsZero() || c.Name == "claude-desktop" && c.Version != "0.14.1" {
					t.Errorf("%s: client %+v", s.Name, c)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want[s.Name]) {
				t.Errorf("%s: clients %v, want %v", s.Name, got, want[s.Name])
			}
		}
	})

	t.Run("ps", func(t *testing.T) {
		code, out, stderr := runBin(t, "ps", "--addr", addr)
		if code != 0 {
			t.Fatalf("ps: exit %d %s", code, stderr)
		}
		cells := map[string]string{}
		lines := strings.Split(out, "\n")
		col := strings.Index(lines[0], "CLIENTS")
		if col < 0 {
			t.Fatalf("no CLIENTS column:\n%s", out)
		}
		for _, l := range lines[1:4] {
			cells[strings.Fields(l)[0]] = strings.TrimSpace(l[col:])
		}
		// "claude-desktop,cursor-vscode,zed" is wider than the cell (24).
		for name, want := range map[string]string{"a": "3 clients", "b": "cursor-vscode", "c": "-"} {
			if cells[name] != want {
				t.Errorf("ps's CLIENTS of %s: %q, want %q\n%s", name, cells[name], want, out)
			}
		}
	})

	t.Run("inspect", func(t *testing.T) {
		code, out, stderr := runBin(t, "inspect", "a", "--addr", addr)
		if code != 0 {
			t.Fatalf("inspect: exit %d %s", code, stderr)
		}
		_, list, ok := strings.Cut(out, "\nClients:\n")
		if !ok {
			t.Fatalf("inspect a has no client list:\n%s", out)
		}
		for _, w := range [][]string{{"claude-desktop", "0.14.1", "3"}, {"cursor-vscode", "1.0.0", "2"}, {"zed", "0.190.0", "1"}} {
			found := false
			for _, l := range strings.Split(list, "\n") {
				if f := strings.Fields(l); len(f) >= 3 && f[0] == w[0] && f[1] == w[1] && f[2] == w[2] {
					found = true
				}
			}
			if !found {
				t.Errorf("inspect a: no line %v in\n%s", w, list)
			}
		}
		if _, out, _ := runBin(t, "inspect", "c", "--addr", addr); !strings.Contains(out, "Clients: none yet") {
			t.Errorf("inspect c:\n%s", out)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := map[string]string{}
		for _, l := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(l, "mcpvisor_server_client_requests_total{"); ok {
				k, v, _ := strings.Cut(rest, "} ")
				got[k] = v
			}
		}
		wantM := map[string]string{
			`server="a",client="claude-desktop"`: "3",
			`server="a",client="cursor-vscode"`:  "2",
			`server="a",client="zed"`:            "1",
			`server="b",client="cursor-vscode"`:  "4",
		}
		if fmt.Sprint(got) != fmt.Sprint(wantM) {
			t.Errorf("series %v, want %v", got, wantM)
		}
	})
}
