package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// While a server waits for its client — an elicitation the user takes
// longer than the request timeout to answer — the call's timeout does not
// run: the call completes with the server's answer.
func TestRequestTimeoutPausedWhileTheClientAnswers(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","requestTimeout":"300ms"}}`)
	// Started first: the timeout covers a start too, and a loaded
	// machine may take longer than 300 ms to start a Node server.
	if err := w.fleet.Get("c").Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sess := w.stdioClient(w.gw.Single("c"), &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			select {
			case <-time.After(time.Second): // three request timeouts
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "u", "email": "u@example.com"}}, nil
		},
	})
	res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_elicitation", Arguments: map[string]any{"message": "who?"}})
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if text := textOf(t, res); res.IsError || !strings.Contains(text, "accept") {
		t.Fatalf("result %q (error %v)", text, res.IsError)
	}
}
