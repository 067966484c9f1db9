package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const twoFixtures = `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE","tools":{"deny":["crash"]}}}`

func TestAggregatedToolsArePrefixedAndRouted(t *testing.T) {
	w := newWorld(t, twoFixtures)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(res)
	for _, want := range []string{"a__echo", "a__crash", "b__echo", "b__pid"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	if slices.Contains(names, "b__crash") {
		t.Errorf("b's denied tool crash is listed: %v", names)
	}
	out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil || textOf(t, out) != "hello" {
		t.Fatalf("a__echo: %v %v", out, err)
	}
	// Each prefix reaches its own process (host pids: inside pid
	// namespaces the servers may see the same pid).
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "b__pid"}); err != nil {
		t.Fatal(err)
	}
	if pa, pb := w.pid("a"), w.pid("b"); pa == 0 || pa == pb {
		t.Errorf("a and b run as pids %d and %d", pa, pb)
	}
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "b__crash"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("denied tool callable: %v", err)
	}
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "nobody__echo"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("unknown tool: %v", err)
	}
}

func TestProgressIsRelayedToItsRequest(t *testing.T) {
	w := newWorld(t, twoFixtures)
	var got atomic.Int32
	var wrongToken atomic.Bool
	sess := w.stdioClient(w.gw.Aggregate(), &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if r.Params.ProgressToken != "tok-1" {
				wrongToken.Store(true)
			}
			got.Add(1)
		},
	})
	params := &mcp.CallToolParams{Name: "a__progress", Arguments: map[string]any{"steps": 3, "intervalMs": 1}}
	params.SetProgressToken("tok-1")
	if _, err := sess.CallTool(t.Context(), params); err != nil {
		t.Fatal(err)
	}
	// mcpvisor writes the notifications before the response (often in the
	// same write), but the go-sdk client runs notification handlers apart
	// from returning responses, so the last one may still be on its way.
	waitFor(t, "3 progress notifications", func() bool { return got.Load() >= 3 })
	time.Sleep(20 * time.Millisecond) // and no fourth
	if got.Load() != 3 || wrongToken.Load() {
		t.Fatalf("progress notifications: %d (want 3), wrong token: %v", got.Load(), wrongToken.Load())
	}
}

func TestCrashThenCallGetsAFreshProcess(t *testing.T) {
	w := newWorld(t, twoFixtures)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__pid"}); err != nil {
		t.Fatal(err)
	}
	before := w.pid("a")
	// The crash tool exits without answering: the call fails, naming a.
	_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__crash", Arguments: map[string]any{"code": 5}})
	if err == nil || !strings.Contains(err.Error(), "server a") {
		t.Fatalf("call that crashed the server: %v, want an error naming server a", err)
	}
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__pid"}); err != nil {
		t.Fatalf("call after the crash: %v", err)
	}
	if after := w.pid("a"); after == before || after == 0 {
		t.Fatalf("pid %d before the crash, %d after", before, after)
	}
}

func TestCancellationReachesTheServer(t *testing.T) {
	w := newWorld(t, twoFixtures)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__sleep", Arguments: map[string]any{"ms": 30000}})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond) // let the call reach the server
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled call did not return")
	}
	// The gateway forgot the call, and the server is still serving.
	deadline := time.Now().Add(2 * time.Second)
	for {
		w.gw.reg.mu.Lock()
		n := len(w.gw.reg.calls)
		w.gw.reg.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still tracked after cancellation", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
}

func TestDeadAndGarbageBackends(t *testing.T) {
	w := newWorld(t, `{"ok":{"command":"$FIXTURE"},"dead":{"command":"/nonexistent/server"},"noisy":{"command":"$FIXTURE","env":{"FIXTURE_GARBAGE":"1"}},"silent":{"command":"$FIXTURE","env":{"FIXTURE_NEVER_ANSWER":"1"},"initTimeout":"300ms"}}`)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(res)
	if !slices.Contains(names, "ok__echo") || !slices.Contains(names, "noisy__echo") {
		t.Fatalf("working servers missing from the list: %v", names)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "dead__") || strings.HasPrefix(n, "silent__") {
			t.Errorf("broken server listed: %s", n)
		}
	}
	out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "noisy__echo", Arguments: map[string]any{"text": "through the noise"}})
	if err != nil || textOf(t, out) != "through the noise" {
		t.Fatalf("server writing garbage lines: %v %v", out, err)
	}
	// The per-server endpoint of a dead server answers with an error
	// naming it, not a hang.
	start := time.Now()
	dead := w.stdioClientErr(w.gw.Single("dead"))
	if dead == nil || !strings.Contains(dead.Error(), "server dead could not be started") || strings.Count(dead.Error(), "dead") != 1 {
		t.Fatalf("initialize on a dead server: %v", dead)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("dead server took %v to report", time.Since(start))
	}
}

func TestSingleEndpointForwardsEverything(t *testing.T) {
	w := newWorld(t, twoFixtures)
	sess := w.stdioClient(w.gw.Single("a"), nil)
	ctx := t.Context()
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(toolNames(res), "echo") {
		t.Fatalf("per-server tools are not unprefixed: %v", toolNames(res))
	}
	if sess.InitializeResult().ServerInfo.Name != "mcp-fixture" {
		t.Errorf("serverInfo is not the server's: %+v", sess.InitializeResult().ServerInfo)
	}
	// A method mcpvisor does not know reaches the server, whose answer
	// (method not found) comes back.
	_, err = sess.ListPrompts(ctx, nil)
	if err == nil {
		t.Fatal("prompts/list on a server without prompts succeeded")
	}
	out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "direct"}})
	if err != nil || textOf(t, out) != "direct" {
		t.Fatalf("echo: %v %v", out, err)
	}
}

// With a page size, the aggregated lists come in pages whose cursors lead
// through the whole list once; a cursor survives the list being rebuilt,
// and a foreign or stale one gets -32602.
func TestAggregatedPages(t *testing.T) {
	w := newWorld(t, twoFixtures)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	whole, err := sess.ListTools(ctx, nil)
	if err != nil || whole.NextCursor != "" || len(whole.Tools) < 7 {
		t.Fatalf("whole list: %d tools, cursor %q, %v", len(whole.Tools), whole.NextCursor, err)
	}
	if _, err := sess.ListTools(ctx, &mcp.ListToolsParams{Cursor: "x"}); err == nil || !strings.Contains(err.Error(), "invalid cursor") {
		t.Errorf("a cursor without paging: %v", err)
	}

	w.gw.SetPageSize(3)
	var paged []string
	var second string
	cursor := ""
	for pages := 0; ; pages++ {
		res, err := sess.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tools) > 3 || (res.NextCursor != "" && len(res.Tools) != 3) {
			t.Fatalf("page %d: %d tools, next %q", pages, len(res.Tools), res.NextCursor)
		}
		paged = append(paged, toolNames(res)...)
		if pages == 0 {
			second = res.NextCursor
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
		if pages > 10 {
			t.Fatal("cursors do not end")
		}
	}
	if !slices.Equal(paged, toolNames(whole)) {
		t.Fatalf("pages gave %v, the whole list is %v", paged, toolNames(whole))
	}

	w.gw.agg.invalidate() // as after a list_changed
	res, err := sess.ListTools(ctx, &mcp.ListToolsParams{Cursor: second})
	if err != nil || !slices.Equal(toolNames(res), paged[3:6]) {
		t.Errorf("second page after a rebuild: %v %v, want %v", toolNames(res), err, paged[3:6])
	}
	for _, bad := range []string{"not-base64!", pageCursor(3, "gone__tool"), pageCursor(0, "")} {
		if _, err := sess.ListTools(ctx, &mcp.ListToolsParams{Cursor: bad}); err == nil || !strings.Contains(err.Error(), "-32602") && !strings.Contains(err.Error(), "invalid cursor") {
			t.Errorf("cursor %q: %v, want invalid params", bad, err)
		}
	}
}

func TestMergeCollisionsReplacesOneList(t *testing.T) {
	old := []string{`prompts "p": served by a, also exported by b (hidden)`, `tools "x": served by a, also exported by b (hidden)`}
	got := mergeCollisions(old, "tools", []string{`tools "y": served by a, also exported by c (hidden)`})
	want := []string{`prompts "p": served by a, also exported by b (hidden)`, `tools "y": served by a, also exported by c (hidden)`}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := mergeCollisions(want, "prompts", nil); !slices.Equal(got, want[1:]) {
		t.Fatalf("a resolved collision stays reported: %q", got)
	}
}

// On the wire of the stdio front, a request's progress notifications come
// before its response, however the writes are combined.
func TestProgressPrecedesResponseOnTheWire(t *testing.T) {
	w := newWorld(t, twoFixtures)
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = StdioOptions{Logger: slog.New(slog.DiscardHandler)}.Serve(context.Background(), w.gw.Aggregate(), c2sR, s2cW)
		s2cW.Close()
	}()
	defer func() { c2sW.Close(); <-done }()
	lines := bufio.NewScanner(s2cR)
	send := func(s string) {
		if _, err := io.WriteString(c2sW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"id":1`) {
		t.Fatalf("initialize: %q", lines.Text())
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for round := range 20 {
		id := 100 + round
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"a__progress","arguments":{"steps":3,"intervalMs":0},"_meta":{"progressToken":"t%d"}}}`, id, round))
		progress := 0
		for lines.Scan() {
			l := lines.Text()
			if strings.Contains(l, `"notifications/progress"`) && strings.Contains(l, fmt.Sprintf(`"t%d"`, round)) {
				progress++
			}
			if strings.Contains(l, fmt.Sprintf(`"id":%d,`, id)) {
				break
			}
		}
		if progress != 3 {
			t.Fatalf("round %d: %d progress notifications before the response, want 3", round, progress)
		}
	}
}
