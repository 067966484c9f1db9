package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The first caller of a cold aggregated list is bounded by its own ctx
// like every other: its client going away returns it at once, while the
// build goes on for whoever still waits.
func TestAggregateBuildFirstCallerBoundedByCtx(t *testing.T) {
	w := newWorld(t, `{"slow":{"command":"$FIXTURE","args":["-slow-start","3s"]}}`)
	ep := w.gw.Aggregate()
	s := ep.Open(noSink)
	defer ep.Close(s)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan *rpc.Message, 1)
	go func() { done <- ep.Handle(ctx, s, &rpc.Message{ID: []byte("1"), Method: "tools/list"}, noSink) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the first tools/list caller waited for the whole build past its ctx")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("returned after %v", time.Since(start))
	}
	// The build went on: a later caller gets the server's tools.
	m := ep.Handle(context.Background(), s, &rpc.Message{ID: []byte("2"), Method: "tools/list"}, noSink)
	if m.Error != nil || !strings.Contains(string(m.Result), "slow__echo") {
		t.Fatalf("the build did not go on: %s", m.Encode())
	}
}

// A configured timeout of 0 means no deadline, never one already past:
// the per-server initialize, the aggregated list and a call all work.
func TestZeroTimeoutsMeanNoDeadline(t *testing.T) {
	w := newWorld(t, `{"z":{"command":"$FIXTURE","initTimeout":"0","requestTimeout":"0"}}`)
	sess := w.stdioClient(w.gw.Single("z"), nil)
	ctx := t.Context()
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatalf("call on /servers/z: %v", err)
	}
	agg := w.stdioClient(w.gw.Aggregate(), nil)
	res, err := agg.ListTools(ctx, nil)
	if err != nil || !strings.Contains(strings.Join(toolNames(res), ","), "z__echo") {
		t.Fatalf("aggregated list: %v %v", toolNames(res), err)
	}
}
