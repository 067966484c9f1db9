package gateway

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// TestRestartListsFromThePersistedCache: a first mcpvisor learns two
// servers' tools and puts them back to sleep; a second one, on the same
// state file, lists them without starting anything, and starts a server
// only when one of its tools is called.
func TestRestartListsFromThePersistedCache(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.db")
	const servers = `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE"}}`

	first := newWorldStore(t, servers, state, "")
	first.gw.Learn(context.Background(), 2)
	for _, name := range []string{"a", "b"} {
		if !first.gw.Cached(name) {
			t.Fatalf("server %s not learned", name)
		}
		first.waitEvent(name, "dormant", 1, 5*time.Second)
	}
	first.close()

	second := newWorldStore(t, servers, state, first.marker)
	sess := second.stdioClient(second.gw.Aggregate(), nil)
	res, err := sess.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(res)
	if !slices.Contains(names, "a__echo") || !slices.Contains(names, "b__echo") {
		t.Fatalf("tools of never-started servers not listed from the cache: %v", names)
	}
	if n := second.count("a", "started") + second.count("b", "started"); n != 0 {
		t.Fatalf("listing started %d servers", n)
	}
	if left := testserver.LiveProcesses(second.marker); len(left) > 0 {
		t.Fatalf("listing spawned processes: %v", left)
	}
	// The per-server endpoint answers initialize from the cache too.
	single := second.stdioClient(second.gw.Single("b"), nil)
	if single.InitializeResult().ServerInfo.Name != "mcp-fixture" || second.count("b", "started") != 0 {
		t.Fatalf("initialize of a dormant server: %+v, started %d", single.InitializeResult().ServerInfo, second.count("b", "started"))
	}
	out, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "woken"}})
	if err != nil || textOf(t, out) != "woken" {
		t.Fatalf("call: %v %v", out, err)
	}
	if second.count("a", "started") != 1 || second.count("b", "started") != 0 {
		t.Fatalf("a call to a must start a alone: a %d, b %d", second.count("a", "started"), second.count("b", "started"))
	}
}

// TestConfigChangeInvalidatesTheCache: the cache is keyed by the launch
// config; another command line means the lists are learned again.
func TestConfigChangeInvalidatesTheCache(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.db")
	first := newWorldStore(t, `{"a":{"command":"$FIXTURE"}}`, state, "")
	first.gw.Learn(context.Background(), 2)
	if !first.gw.Cached("a") {
		t.Fatal("not learned")
	}
	first.close()
	second := newWorldStore(t, `{"a":{"command":"$FIXTURE","args":["-stderr-lines","1"]}}`, state, first.marker)
	if second.gw.Cached("a") {
		t.Fatal("lists cached for another launch config were used")
	}
}
