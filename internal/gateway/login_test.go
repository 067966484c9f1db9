package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// loginRemote is a go-sdk MCP server over Streamable HTTP with tools echo
// and forbidden; the handler refuses forbidden's calls with 403
// insufficient_scope (scope "x") before the server sees them.
// Its tool block tells entered, then answers when the test ends.
func loginRemote(t *testing.T, entered chan<- struct{}) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1.0.0"}, nil)
	for _, name := range []string{"echo", "forbidden"} {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " done"}}}, nil
		})
	}
	release := make(chan struct{})
	s.AddTool(&mcp.Tool{Name: "block", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil
	})
	t.Cleanup(func() {
		close(release)
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) && bytes.Contains(body, []byte(`"forbidden"`)) {
				w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="x"`)
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// loginAs logs the fleet's server in through the test authorization
// server.
func loginAs(t *testing.T, s *fleet.Server, as *oauthtest.Server) {
	t.Helper()
	flow, err := s.Login(t.Context(), "http://127.0.0.1:9/callback")
	if err != nil {
		t.Fatal(err)
	}
	q, err := as.Approve(flow.AuthURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteLogin(t.Context(), flow.ID, q); err != nil {
		t.Fatal(err)
	}
}

// needsLoginData checks that err is the JSON-RPC error of a server that
// needs a login, and returns its data.
func needsLoginData(t *testing.T, what string, err error) map[string]any {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Errorf("%s: %v, want a JSON-RPC error", what, err)
		return nil
	}
	data := map[string]any{}
	if we.Code != rpc.BackendUnavailable || json.Unmarshal(we.Data, &data) != nil ||
		data["needsLogin"] != true || data["command"] != "mcpvisor login r" || data["server"] != "r" {
		t.Errorf("%s: error %d %q data %s, want %d with needsLogin and the command", what, we.Code, we.Message, we.Data, rpc.BackendUnavailable)
	}
	if !strings.HasPrefix(we.Message, "server r needs a login (") || !strings.HasSuffix(we.Message, `: run "mcpvisor login r"`) {
		t.Errorf("%s: message %q, want the needs-login error's own", what, we.Message)
	}
	return data
}

// A call to a remote server that needs a login gets code -32000 with data
// {needsLogin, command}, on /mcp and on the server's own endpoint, in
// both protocol eras; a call it refuses for want of scope gets the same
// with the scope, and its connection goes on.
func TestGatewayNeedsLogin(t *testing.T) {
	entered := make(chan struct{}, 1)
	as := oauthtest.New(t, oauthtest.Options{Handler: loginRemote(t, entered), RefreshTokens: true})
	w := newWorld(t, `{"r":{"url":"`+as.URL+`","idleTimeout":"0"}}`)
	s := w.fleet.Get("r")
	loginAs(t, s, as)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type client struct {
		name, tool string
		sess       *mcp.ClientSession
	}
	clients := []client{
		{"/mcp 2025-11-25", "r__echo", w.stdioClient(w.gw.Aggregate(), nil)},
		{"/mcp 2026-07-28", "r__echo", w.modernClient(w.gw.Aggregate(), true, nil)},
		{"/servers/r 2025-11-25", "echo", w.stdioClient(w.gw.Single("r"), nil)},
		{"/servers/r 2026-07-28", "echo", w.modernClient(w.gw.Single("r"), true, nil)},
	}
	for _, c := range clients {
		if _, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: c.tool}); err != nil {
			t.Fatalf("%s: %s while logged in: %v", c.name, c.tool, err)
		}
	}
	spawns := s.Status().Spawns

	// A step-up: the call is refused with the scope; the connection goes
	// on.
	for _, c := range clients {
		_, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: strings.Replace(c.tool, "echo", "forbidden", 1)})
		if d := needsLoginData(t, c.name+": forbidden", err); d != nil && d["scope"] != "x" {
			t.Errorf("%s: forbidden: scope %v, want x", c.name, d["scope"])
		}
		if _, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: c.tool}); err != nil {
			t.Errorf("%s: %s after the step-up refusal: %v", c.name, c.tool, err)
		}
	}
	if st := s.Status(); st.Spawns != spawns || st.State != "running" {
		t.Errorf("after the step-ups: state %q, spawns %d→%d", st.State, spawns, st.Spawns)
	}

	// The tokens revoked: the call that finds out, the one in flight when
	// the connection ends for it, and every one after.
	blocked := make(chan error, 1)
	go func() {
		_, err := clients[1].sess.CallTool(ctx, &mcp.CallToolParams{Name: "r__block"})
		blocked <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the blocking call never reached the server")
	}
	as.RevokeAll()
	_, err := clients[0].sess.CallTool(ctx, &mcp.CallToolParams{Name: "r__echo"})
	if d := needsLoginData(t, "the call after the revocation", err); d != nil && d["reason"] != "refresh token expired or revoked" {
		t.Errorf("reason %v", d["reason"])
	}
	select {
	case err := <-blocked:
		if d := needsLoginData(t, "the call in flight", err); d != nil && d["reason"] != "refresh token expired or revoked" {
			t.Errorf("the call in flight: reason %v", d["reason"])
		}
	case <-ctx.Done():
		t.Fatal("the call in flight was not answered")
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Status().State != "needs-login" {
		if time.Now().After(deadline) {
			t.Fatalf("state %q, want needs-login", s.Status().State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := as.Count("resource")
	for _, c := range clients {
		_, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: c.tool})
		needsLoginData(t, c.name, err)
	}
	if n := as.Count("resource"); n != before {
		t.Errorf("%d requests reached the server while it needs a login", n-before)
	}
}
