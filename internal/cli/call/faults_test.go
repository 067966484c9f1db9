//lint:file-ignore SA1019 the fake server asks for sampling, deprecated as of 2026-07-28, to test call's refusal of it

package call

// Faults of serve and of the network around a call: each failed before
// the fix that its name says.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
)

// runBounded runs call on server x at addr; d < 0 if it did not return in 20 s.
func runBounded(addr string, timeout time.Duration, tool string) (d time.Duration, err error) {
	o := &Options{IO: cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)},
		Server: "x", Tool: tool, API: adminclient.Client{Addr: addr}, Timeout: timeout}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- RunCall(context.Background(), o) }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(20 * time.Second):
		return -1, nil
	}
}

func knownServer(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/servers/{name}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"name":"x"}`)) })
}

// serve refuses the session at maxSessions: 503 with a JSON-RPC error
// (gateway http_post.go initialize); the old call printed its message.
func TestServesRefusalIsSaid(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "")
	mux := http.NewServeMux()
	knownServer(mux)
	mux.HandleFunc("/servers/x/mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32030,"message":"too many sessions: maxSessions is 1"}}`))
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	if _, err := runBounded(strings.TrimPrefix(hs.URL, "http://"), 5*time.Second, "echo"); err == nil || !strings.Contains(err.Error(), "too many sessions") {
		t.Errorf("503 at initialize: %v", err)
	}
}

// serve goes away between the admin check and initialize.
func TestDroppedConnectionIsSaid(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "")
	mux := http.NewServeMux()
	knownServer(mux)
	mux.HandleFunc("/servers/x/mcp", func(w http.ResponseWriter, _ *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	if _, err := runBounded(strings.TrimPrefix(hs.URL, "http://"), 5*time.Second, "echo"); err == nil || err.Error() == "server x: rejected by transport" {
		t.Errorf("dropped connection: %v", err)
	}
}

// A redirect to another host must not carry the bearer token (adminclient.Do's doesn't).
func TestRedirectDoesNotCarryTheToken(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "s3cret")
	got := make(chan string, 100)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.Header.Get("Authorization")
		w.WriteHeader(http.StatusNotFound)
	}))
	defer other.Close()
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	mux := http.NewServeMux()
	knownServer(mux)
	mux.HandleFunc("/servers/x/mcp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, otherURL+"/elsewhere", http.StatusTemporaryRedirect)
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	runBounded(strings.TrimPrefix(hs.URL, "http://"), 5*time.Second, "echo")
	for len(got) > 0 {
		if g := <-got; strings.Contains(g, "s3cret") {
			t.Errorf("another host got the token: %q", g)
		}
	}
}

// serve stops answering the POST that carries call's refusal of a
// sampling request: call must still end by --timeout (plus the DELETE's 5 s).
func TestStalledAnswerPostIsBounded(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "")
	srv := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_, _ = req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 9, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	})
	endpoint := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	stall := make(chan struct{})
	mux := http.NewServeMux()
	knownServer(mux)
	mux.HandleFunc("/servers/x/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if !bytes.Contains(b, []byte(`"method"`)) { // a response of the client's
				<-stall
				return
			}
		}
		endpoint.ServeHTTP(w, r)
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	defer close(stall)
	if d, _ := runBounded(strings.TrimPrefix(hs.URL, "http://"), time.Second, "ask"); d < 0 || d > 8*time.Second {
		t.Errorf("call --timeout 1s returned after %v (-1: not in 20 s)", d)
	}
}
