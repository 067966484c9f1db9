package call

//lint:file-ignore SA1019 sampling and roots are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 server asking call for them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

func TestCallArguments(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{
		"s":{"type":"string"},
		"n":{"type":"integer"},
		"b":{"type":"boolean"},
		"o":{"type":"object"},
		"sn":{"type":["string","null"]},
		"any":{"anyOf":[{"type":"string"},{"type":"null"}]},
		"mixed":{"anyOf":[{"type":"string"},{"type":"number"}]},
		"ref":{"$ref":"#/$defs/x"}}}`)
	props := func(args ...string) string {
		out, err := callArguments(`{"s":"from json","keep":1}`, args, schema)
		if err != nil {
			return "error: " + err.Error()
		}
		b, _ := json.Marshal(out)
		return string(b)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"s=42"}, `{"keep":1,"s":"42"}`},                         // --arg wins over --json, text stays text
		{[]string{"n=42"}, `{"keep":1,"n":42,"s":"from json"}`},           // a number
		{[]string{"b=true"}, `{"b":true,"keep":1,"s":"from json"}`},       // a boolean
		{[]string{`o={"k":1}`}, `{"keep":1,"o":{"k":1},"s":"from json"}`}, // an object
		{[]string{"sn=42"}, `{"keep":1,"s":"from json","sn":"42"}`},       // ["string","null"] is text
		{[]string{"any=true"}, `{"any":"true","keep":1,"s":"from json"}`}, // anyOf string|null is text
		{[]string{"mixed=7"}, `{"keep":1,"mixed":7,"s":"from json"}`},     // several types: JSON if it parses
		{[]string{"mixed=seven"}, `{"keep":1,"mixed":"seven","s":"from json"}`},
		{[]string{"ref=8"}, `{"keep":1,"ref":8,"s":"from json"}`},       // nothing said: JSON if it parses
		{[]string{"new=a=b"}, `{"keep":1,"new":"a=b","s":"from json"}`}, // the first = splits
		{[]string{"n=many"}, `error: --arg n: the tool's schema says integer, and "many" is not JSON`},
		{[]string{"=1"}, `error: --arg "=1": want key=value`},
	}
	for _, c := range cases {
		if got := props(c.args...); got != c.want {
			t.Errorf("%v: %s, want %s", c.args, got, c.want)
		}
	}
	if _, err := callArguments(`[1]`, nil, nil); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("--json [1]: %v", err)
	}
	if _, err := callArguments(`null`, nil, nil); err == nil {
		t.Errorf("--json null accepted")
	}
}

// call's flags and arguments reach its options through runF.
func TestFlagsReachTheOptions(t *testing.T) {
	streams := cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)}
	var got *Options
	cmd := NewCmdCall(streams, func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"github", "search", "--arg", "q=mcp", "--arg", "n=3", "--json", `{"x":1}`, "--output-json", "--timeout", "9s", "--addr", "h:4"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Server != "github" || got.Tool != "search" || strings.Join(got.Args, ",") != "q=mcp,n=3" || got.ArgsJSON != `{"x":1}` ||
		!got.OutputJSON || got.Timeout != 9*time.Second || got.API.Addr != "h:4" {
		t.Errorf("call options: %+v", got)
	}
}

// fakeServe is a serve with one server, x, behind a bearer token: its own
// endpoint (a go-sdk server) and the admin API routes call reads.
type fakeServe struct {
	addr    string
	deletes atomic.Int32 // DELETEs of x's endpoint: sessions ended
	// release, closed by the DELETE of the block tool's session, ends the
	// tool's call as serve's stopping a per-session instance would (the
	// go-sdk server would leave it running, and the DELETE waiting on it).
	release chan struct{}

	mu      sync.Mutex
	init    *mcp.InitializeParams // what the last session declared
	blocked string                // the block tool's session
	eras    map[string]bool       // the MCP-Protocol-Version headers of requests to x
}

func newFakeServe(t *testing.T) *fakeServe {
	f := &fakeServe{release: make(chan struct{}), eras: map[string]bool{}}
	srv := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	text := func(s string) []mcp.Content { return []mcp.Content{&mcp.TextContent{Text: s}} }
	type echoIn struct {
		Text string `json:"text"`
		N    int    `json:"n,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		f.mu.Lock()
		f.init = req.Session.InitializeParams()
		f.mu.Unlock()
		return &mcp.CallToolResult{Content: text(in.Text)}, nil, nil
	})
	srv.AddTool(&mcp.Tool{Name: "fail", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: text("it failed"), IsError: true}, nil
	})
	srv.AddTool(&mcp.Tool{Name: "rich", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Meta: mcp.Meta{"k": "v"}, Content: []mcp.Content{&mcp.ImageContent{Data: []byte("png"), MIMEType: "image/png"}},
			StructuredContent: map[string]any{"n": 1}}, nil
	})
	// ask asks the client for sampling, then roots, and says how each
	// went: the call goes on whatever the client answers.
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_, serr := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 9, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
		_, rerr := req.Session.ListRoots(ctx, nil)
		return &mcp.CallToolResult{Content: text(fmt.Sprintf("sampling: %v\nroots: %v", serr, rerr)), IsError: true}, nil
	})
	srv.AddTool(&mcp.Tool{Name: "block", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.mu.Lock()
		f.blocked = req.Session.ID()
		f.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-f.release:
		}
		return nil, errors.New("ended")
	})
	endpoint := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/servers/x/mcp", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.eras[r.Header.Get("MCP-Protocol-Version")] = true
		f.mu.Unlock()
		if r.Method == http.MethodDelete {
			f.deletes.Add(1)
			f.mu.Lock()
			if f.blocked != "" && f.blocked == r.Header.Get("Mcp-Session-Id") {
				close(f.release)
			}
			f.mu.Unlock()
		}
		endpoint.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /api/servers/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != "x" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no server named \"` + r.PathValue("name") + `\"; configured: x"}`))
			return
		}
		_, _ = w.Write([]byte(`{"name":"x"}`))
	})
	mux.HandleFunc("GET /api/servers/x/tools", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"server":"x","learned":true,"tools":[],"held":["pinned"]}`))
	})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"a bearer token is required"}`))
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	f.addr = strings.TrimPrefix(hs.URL, "http://")
	return f
}

// run runs call with args (server, tool, then --arg values) and returns
// its stdout and error.
func (f *fakeServe) run(t *testing.T, timeout time.Duration, outputJSON bool, server, tool string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	o := &Options{IO: cmdutil.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: new(bytes.Buffer)},
		Server: server, Tool: tool, API: adminclient.Client{Addr: f.addr}, Args: args, OutputJSON: outputJSON, Timeout: timeout}
	err := RunCall(t.Context(), o)
	return out.String(), err
}

// call is an MCP client of the server's own endpoint, with the admin
// API's token: it prints what the tool says, says isError in its exit
// code, declares no client capability (what a server asks of one is
// refused, and the call goes on), names a tool it cannot call and an
// unknown server as serve does, and ends its session whatever happened,
// a timeout included.
func TestRunCall(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "s3cret")
	f := newFakeServe(t)
	calls := int32(0)
	ended := func(what string) {
		t.Helper()
		if calls++; f.deletes.Load() != calls {
			t.Errorf("%s: %d sessions ended after %d calls", what, f.deletes.Load(), calls)
		}
	}

	out, err := f.run(t, time.Minute, false, "x", "echo", "text=42", "n=7")
	if err != nil || out != "42\n" {
		t.Errorf("echo: %q, %v", out, err)
	}
	ended("echo")
	f.mu.Lock()
	init := f.init
	if delete(f.eras, ""); len(f.eras) != 1 || !f.eras[legacyVersion] { // "": initialize's
		t.Errorf("protocol versions asked for: %v, want %s alone", f.eras, legacyVersion)
	}
	f.mu.Unlock()
	if init == nil || init.ClientInfo.Name != "mcpvisor-cli" || init.ClientInfo.Version != gateway.Version || init.ProtocolVersion != legacyVersion ||
		init.Capabilities == nil || init.Capabilities.Sampling != nil || init.Capabilities.RootsV2 != nil || init.Capabilities.Elicitation != nil {
		t.Errorf("the session's initialize: %+v", init)
	}

	out, err = f.run(t, time.Minute, false, "x", "fail")
	if code, ok := err.(shutdown.ExitCode); !ok || code != ExitToolError || out != "it failed\n" {
		t.Errorf("fail: %q, %v", out, err)
	}
	ended("fail")

	out, err = f.run(t, time.Minute, false, "x", "ask")
	if code, ok := err.(shutdown.ExitCode); !ok || code != ExitToolError ||
		!strings.Contains(out, `sampling: calling "sampling/createMessage": method not found: "sampling/createMessage"`) ||
		!strings.Contains(out, `roots: calling "roots/list": method not found: "roots/list"`) {
		t.Errorf("ask: %q, %v", out, err)
	}
	ended("ask")

	out, err = f.run(t, time.Minute, true, "x", "rich")
	var r map[string]any
	if err != nil || json.Unmarshal([]byte(out), &r) != nil || r["_meta"] == nil || r["structuredContent"] == nil || !strings.Contains(out, `"mimeType": "image/png"`) {
		t.Errorf("rich --output-json: %q, %v", out, err)
	}
	ended("rich")
	if out, err = f.run(t, time.Minute, false, "x", "rich"); err != nil || out != `{"type":"image","mimeType":"image/png","data":"cG5n"}`+"\n" {
		t.Errorf("rich: %q, %v", out, err) // content other than text: a line of JSON
	}
	ended("rich")

	for _, c := range []struct{ tool, want string }{
		{"nope", `server x has no tool "nope" (mcpvisor tools x lists them)`},
		{"pinned", "tool pinned of server x is held back"},
	} {
		if _, err := f.run(t, time.Minute, false, "x", c.tool); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.tool, err, c.want)
		}
		ended(c.tool)
	}

	if _, err := f.run(t, time.Minute, false, "zz", "echo"); err == nil || err.Error() != `no server named "zz"; configured: x` {
		t.Errorf("zz: %v", err)
	}
	calls-- // no session was opened
	ended("zz")

	// A call the tool does not answer ends at the timeout, and its
	// session with it.
	start := time.Now()
	if _, err := f.run(t, 300*time.Millisecond, false, "x", "block"); err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("block: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("block returned after %v", d) // the session's end waited on something
	}
	ended("block")
}
