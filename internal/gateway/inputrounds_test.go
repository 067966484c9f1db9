package gateway

//lint:file-ignore SA1019 sampling and logging are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 client's sampling, elicitation and logging through mcpvisor.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/fleet/fleettest"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// A legacy client of a modern server (the conformance server, served as
// modern-only: "protocol" "modern"): the server's input_required rounds
// become ordinary requests to the client, its log lines come at the level
// the client set, and the client sees only final results. (The server's
// tools that send requests the legacy way fail in the modern era: the
// modern tools are the ones that ask for input.)
func TestLegacyClientOfModernServer(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","prefix":"","protocol":"modern"}}`)
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
	if in, err := fleettest.ParseInit(w.fleet.Get("c").Catalog().CachedInit()); err != nil || in.ProtocolVersion != modernVersion {
		t.Fatalf("the conformance server was not found modern: %v %s", err, w.fleet.Get("c").Catalog().CachedInit())
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
}

// A legacy client's resource subscriptions reach a modern server — which
// has no resources/subscribe — as mcpvisor's subscriptions/listen naming
// them, and the server's updates come back to the subscribed client as
// notifications/resources/updated. Unsubscribed, they stop being asked
// for.
func TestLegacyClientSubscribesOnModernServer(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","prefix":"","protocol":"modern"}}`)
	updated := make(chan string, 16)
	sess := w.stdioClient(w.gw.Aggregate(), &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case updated <- r.Params.URI:
			default:
			}
		},
	})
	ctx := t.Context()
	const uri = "test://watched-resource"
	if err := sess.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	select {
	case got := <-updated:
		if got != uri {
			t.Fatalf("update of %q", got)
		}
	case <-time.After(15 * time.Second): // the server updates it every 3 s
		t.Fatal("no notifications/resources/updated for the subscribed resource")
	}
	// A new process of the server is told the subscription again, in its
	// listen.
	pid := w.pid("c")
	if err := killPID(pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server's restart", func() bool { p := w.pid("c"); return p != 0 && p != pid })
	for len(updated) > 0 {
		<-updated
	}
	select {
	case <-updated:
	case <-time.After(15 * time.Second):
		t.Fatal("no update after the server restarted: the subscription was not replayed")
	}
	if err := sess.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatalf("resources/unsubscribe: %v", err)
	}
	if got := w.gw.interests.InstanceSubscriptions(w.fleet.Get("c"), sess.ID()); len(got) != 0 {
		t.Fatalf("still subscribed to %v", got)
	}
}

// A legacy client of a modern server that cancels its call while mcpvisor
// asks it for the input the server's input_required result names: the
// call ends cancelled — in its server's count and for the client — not as
// a protocol error of mcpvisor's making.
func TestInputRoundCancelledCountedAsCancelled(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","prefix":"","protocol":"modern"}}`)
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	sess := w.stdioClient(w.gw.Aggregate(), &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			select {
			case asked <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
			case <-release:
			}
			return nil, context.Canceled
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "test_input_required_result_elicitation"})
		done <- err
	}()
	select {
	case <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("the client was not asked for the server's input")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call succeeded")
	}
	tel := w.fleet.Get("c").Telemetry()
	waitFor(t, "the call counted", func() bool { c := tel.Calls(); return c[telemetry.Cancelled]+c[telemetry.ProtocolError] > 0 })
	if got := tel.CallCounts(); got != (telemetry.CallCounts{Cancelled: 1}) {
		t.Fatalf("counted %+v, want one cancelled", got)
	}
}
