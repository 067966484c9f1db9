package gateway

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet/fleettest"
	"github.com/mcpvisor/mcpvisor/internal/store"
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
	first.fleet.Learn(context.Background(), 2)
	for _, name := range []string{"a", "b"} {
		if !first.fleet.Get(name).Catalog().Cached(catalog.Tools) {
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
	first.fleet.Learn(context.Background(), 2)
	if !first.fleet.Get("a").Catalog().Cached(catalog.Tools) {
		t.Fatal("not learned")
	}
	first.close()
	second := newWorldStore(t, `{"a":{"command":"$FIXTURE","args":["-stderr-lines","1"]}}`, state, first.marker)
	if second.fleet.Get("a").Catalog().Cached(catalog.Tools) {
		t.Fatal("lists cached for another launch config were used")
	}
}

// A list cached from an earlier process is replaced by what the server
// lists when it starts again, and the clients that see it are told.
func TestStartReplacesAStaleCachedList(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.db")
	first := newWorldStore(t, `{"a":{"command":"$FIXTURE"}}`, state, "")
	first.fleet.Learn(context.Background(), 1)
	hash := first.fleet.Get("a").Config().LaunchHash()
	first.close()
	// The persisted list says a has a tool it does not have.
	st, err := store.Open(state, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ghost := []json.RawMessage{json.RawMessage(`{"name":"ghost","inputSchema":{"type":"object"}}`)}
	if err := st.PutList("a", hash, store.Kind("tools"), ghost); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	second := newWorldStore(t, `{"a":{"command":"$FIXTURE"}}`, state, first.marker)
	ep := second.gw.Aggregate()
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	list := func() string {
		resp := ep.Handle(context.Background(), s, request(1, "tools/list", nil), newRecorder())
		if resp.Error != nil {
			t.Fatal(resp.Error)
		}
		return string(resp.Result)
	}
	if l := list(); !strings.Contains(l, "a__ghost") {
		t.Fatalf("the cached list was not served: %s", l)
	}
	if resp := ep.Handle(context.Background(), s, request(2, "tools/call", map[string]any{"name": "a__ghost"}), newRecorder()); resp.Error == nil && !strings.Contains(string(resp.Result), "isError") {
		t.Fatalf("a call of a tool the server does not have: %s", resp.Result)
	}
	out.next(t, "notifications/tools/list_changed", 10*time.Second)
	if l := list(); strings.Contains(l, "a__ghost") || !strings.Contains(l, "a__echo") {
		t.Fatalf("after the server started, tools/list still serves the stale list: %s", l)
	}
}

// A server the probe found legacy keeps that era across a restart of
// mcpvisor: its modern clients' calls are held on it, not probed
// again. The server here is a strict 2025 one: it exits when asked anything
// before initialize (and notes each such request in a file). It is
// initialized to start, never probed; the first modern client's request
// probes it on a process of its own, which ends on the probe, and is
// served as a held call — no failure, no restart; after mcpvisor
// restarts, a modern client's request is served so at once.
func TestPersistedEraSkipsTheProbe(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	probes := filepath.Join(dir, "probes")
	cfg := `{"c":{"command":"$FIXTURE","env":{"FIXTURE_STRICT_INIT":"1","FIXTURE_STRICT_INIT_LOG":` + mustJSONString(probes) + `}}}`
	probed := func() int {
		b, _ := os.ReadFile(probes)
		return strings.Count(string(b), "server/discover")
	}
	first := newWorldStore(t, cfg, state, "")
	sess := first.stdioClient(first.gw.Aggregate(), nil)
	if out, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "c__echo", Arguments: map[string]any{"text": "x"}}); err != nil || textOf(t, out) != "x" {
		t.Fatalf("call: %v %v", out, err)
	}
	if n := probed(); n != 0 {
		t.Fatalf("probed %d times to start", n)
	}
	modern := first.modernClient(first.gw.Aggregate(), false, nil)
	if out, err := modern.CallTool(t.Context(), &mcp.CallToolParams{Name: "c__echo", Arguments: map[string]any{"text": "m"}}); err != nil || textOf(t, out) != "m" {
		t.Fatalf("modern call: %v %v", out, err)
	}
	st := first.fleet.Get("c").Status()
	if n := probed(); n != 1 || st.Restarts != 0 || st.LastError != "" {
		t.Fatalf("probed %d times, %d restarts, last error %q: want one probe, nothing else", n, st.Restarts, st.LastError)
	}
	if in, err := fleettest.ParseInit(first.fleet.Get("c").Catalog().CachedInit()); err != nil || in.Era().String() != "legacy" {
		t.Fatalf("the era kept: %v %s", err, first.fleet.Get("c").Catalog().CachedInit())
	}
	first.close()

	second := newWorldStore(t, cfg, state, first.marker)
	modern = second.modernClient(second.gw.Aggregate(), false, nil)
	if out, err := modern.CallTool(t.Context(), &mcp.CallToolParams{Name: "c__echo", Arguments: map[string]any{"text": "y"}}); err != nil || textOf(t, out) != "y" {
		t.Fatalf("modern call after the restart: %v %v", out, err)
	}
	if n := probed(); n != 1 {
		t.Fatalf("probed %d times in all: probed again despite its persisted legacy era", n)
	}
}
