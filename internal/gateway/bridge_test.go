package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A legacy client of a modern server: the server's input_required rounds
// become ordinary requests to the client, its log lines come at the level
// the client set, and the client sees only final results. (The server's
// tools that send requests the legacy way fail in the modern era: the
// modern tools are the ones that ask for input.)
func TestLegacyClientOfModernServer(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","prefix":"","protocol":"auto"}}`)
	logs := make(chan string, 16)
	sess := w.stdioClient(w.gw.Aggregate(), &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "Paris"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada"}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			select {
			case logs <- string(r.Params.Level):
			default:
			}
		},
	})
	ctx := t.Context()
	for _, tc := range []struct {
		tool, want string
		args       map[string]any
	}{
		{"test_input_required_result_sampling", "Paris", nil},
		{"test_input_required_result_elicitation", "Hello, ada", nil},
	} {
		tool, want := tc.tool, tc.want
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: tc.args})
		if err != nil || res.IsError || !strings.Contains(textOf(t, res), want) {
			t.Fatalf("%s: %v %v %q", tool, err, res != nil && res.IsError, textOf(t, res))
		}
	}
	if in, err := fleet.ParseInit(w.fleet.Get("c").CachedInit()); err != nil || in.ProtocolVersion != modernVersion {
		t.Fatalf("the conformance server was not found modern: %v %s", err, w.fleet.Get("c").CachedInit())
	}
	if err := sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "test_tool_with_logging"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-logs:
	case <-time.After(10 * time.Second):
		t.Fatal("no log line at the level the client set")
	}
	if err := sess.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://watched-resource"}); err == nil || !strings.Contains(err.Error(), "subscriptions") {
		t.Fatalf("subscribe on a modern server: %v", err)
	}
}
