package gateway

//lint:file-ignore SA1019 sampling and logging are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 client's sampling, elicitation and logging through mcpvisor.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The official go-sdk client is the referee of the Streamable HTTP front.

func sdkText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("result %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return tc.Text
}

func TestStreamableSDKClient(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	progress := make(chan float64, 8)
	listChanged := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "referee", Version: "1.0.0"}, &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Content: &mcp.TextContent{Text: "from the client"}, Model: "m", Role: "assistant"}, nil
		},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Progress
		},
		ToolListChangedHandler: func(ctx context.Context, req *mcp.ToolListChangedRequest) {
			listChanged <- struct{}{}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: s.srv.Client()},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if cs.ID() == "" || s.h.Sessions() != 1 {
		t.Fatalf("session %q, Sessions() = %d", cs.ID(), s.h.Sessions())
	}
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Errorf("protocol version %q", v)
	}

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{"echo", "progress", "sample", "block"}) {
		t.Errorf("tools %v", names)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := sdkText(t, res); got != "hello" {
		t.Errorf("echo: %q", got)
	}

	params := &mcp.CallToolParams{Name: "progress"}
	params.SetProgressToken("tok")
	if res, err = cs.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	if got := sdkText(t, res); got != "done" {
		t.Errorf("progress: %q", got)
	}
	for want := 1.0; want <= 3; want++ {
		select {
		case p := <-progress:
			if p != want {
				t.Errorf("progress %v, want %v", p, want)
			}
		case <-ctx.Done():
			t.Fatal("progress notifications did not arrive")
		}
	}

	if res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "sample"}); err != nil {
		t.Fatal(err)
	}
	if got := sdkText(t, res); got != "sampled: from the client" {
		t.Errorf("sample: %q", got)
	}

	// Related to no request: the GET stream carries it.
	s.push(cs.ID(), "notifications/tools/list_changed")
	select {
	case <-listChanged:
	case <-ctx.Done():
		t.Fatal("tools/list_changed did not arrive")
	}

	// Concurrent calls on one session.
	errc := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
			errc <- err
		}()
	}
	for range 8 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}

	sid := cs.ID()
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	if got := <-s.fake.closedCh; got.ID != sid {
		t.Errorf("endpoint closed %q, want %q", got.ID, sid)
	}
	if n := s.h.Sessions(); n != 0 {
		t.Errorf("Sessions() = %d after the client closed", n)
	}
}

// The go-sdk client's default tries the modern protocol first
// (server/discover with MCP-Protocol-Version 2026-07-28), and stays with it.
func TestStreamableSDKClientDefaultVersion(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	client := mcp.NewClient(&mcp.Implementation{Name: "referee", Version: "1.0.0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: s.srv.Client()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("protocol version %q", v)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := s.h.Sessions(); n != 0 {
		t.Errorf("%d sessions open for a modern client", n)
	}
}

// A session that expired or was deleted on the server side: the client's
// next call fails instead of hanging.
func TestStreamableSDKClientSessionGone(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	client := mcp.NewClient(&mcp.Implementation{Name: "referee", Version: "1.0.0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: s.srv.Client(), MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if st := s.status("DELETE", cs.ID(), "", nil); st != 204 {
		t.Fatalf("DELETE: %d", st)
	}
	if _, err := cs.ListTools(ctx, nil); err == nil {
		t.Fatal("a call on a deleted session succeeded")
	}
}
