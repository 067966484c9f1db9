package backend

//lint:file-ignore SA1019 sampling and logging are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 client's sampling, elicitation and logging through mcpvisor.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// The remote servers of these tests are go-sdk servers behind
// mcp.NewStreamableHTTPHandler (or mcp.NewSSEHandler).

// seen is one HTTP request as the server received it.
type seen struct {
	method, rpcMethod        string
	session, version, bearer string
}

type fixture struct {
	t       *testing.T
	server  *mcp.Server
	srv     *httptest.Server
	url     string
	entered chan struct{} // the block tool started
	stopped chan error    // the block tool ended: nil when released, its context's error when cancelled
	release chan struct{}
	killed  atomic.Bool // set by kill: every request from then on is aborted

	mu   sync.Mutex
	seen []seen
	// wrap, if set, may answer a request instead of the MCP handler.
	wrap func(w http.ResponseWriter, r *http.Request) bool
}

var objectSchema = json.RawMessage(`{"type":"object"}`)

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func newServer(f *fixture) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "fixture", Version: "1.2.3"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: objectSchema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct{ Text string }
		_ = json.Unmarshal(req.Params.Arguments, &args)
		return text(args.Text), nil
	})
	s.AddTool(&mcp.Tool{Name: "progress", InputSchema: objectSchema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for i := 1; i <= 3; i++ {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3})
			}
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "step"})
		}
		return text("done"), nil
	})
	s.AddTool(&mcp.Tool{Name: "sample", InputSchema: objectSchema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}},
			MaxTokens: 100,
		})
		if err != nil {
			return nil, err
		}
		tc, _ := res.Content.(*mcp.TextContent)
		if tc == nil {
			return text("sampled: ?"), nil
		}
		return text("sampled: " + tc.Text), nil
	})
	s.AddTool(&mcp.Tool{Name: "block", InputSchema: objectSchema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.entered <- struct{}{}
		select {
		case <-ctx.Done():
			f.stopped <- ctx.Err()
			return nil, ctx.Err()
		case <-f.release:
			f.stopped <- nil
			return text("released"), nil
		}
	})
	return s
}

// newFixture serves a go-sdk server over Streamable HTTP, or over HTTP+SSE
// if sse is set.
func newFixture(t *testing.T, sse bool) *fixture {
	f := &fixture{t: t, entered: make(chan struct{}, 16), stopped: make(chan error, 16), release: make(chan struct{})}
	f.server = newServer(f)
	var h http.Handler
	if sse {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return f.server }, nil)
	} else {
		h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.server }, nil)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.killed.Load() {
			panic(http.ErrAbortHandler) // drops the connection, as a dead server would
		}
		s := seen{method: r.Method, session: r.Header.Get("Mcp-Session-Id"),
			version: r.Header.Get("MCP-Protocol-Version"), bearer: r.Header.Get("Authorization")}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct{ Method string }
			_ = json.Unmarshal(body, &m)
			s.rpcMethod = m.Method
		}
		f.mu.Lock()
		f.seen = append(f.seen, s)
		wrap := f.wrap
		f.mu.Unlock()
		if wrap != nil && wrap(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	f.url = f.srv.URL
	t.Cleanup(f.close)
	return f
}

func (f *fixture) setWrap(w func(http.ResponseWriter, *http.Request) bool) {
	f.mu.Lock()
	f.wrap = w
	f.mu.Unlock()
}

func (f *fixture) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.seen...)
}

var closeFixtureOnce sync.Map

func (f *fixture) close() {
	if _, done := closeFixtureOnce.LoadOrStore(f, true); done {
		return
	}
	close(f.release)
	for ss := range f.server.Sessions() {
		_ = ss.Close()
	}
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// kill makes the server go away without ending its sessions (the cleanup
// ends them). The listener closes first, so the client cannot open a new
// connection; a connection accepted just before that, which
// CloseClientConnections may not know of yet, has its requests aborted.
// httptest's Close then waits for the handlers, which may include the
// connection's DELETE racing the close and waiting for a blocked tool, so
// it does not wait here.
func (f *fixture) kill() {
	f.killed.Store(true)
	_ = f.srv.Listener.Close()
	f.srv.CloseClientConnections()
	go f.srv.Close()
}

// recorder is the Hooks of a test.
type recorder struct {
	notes chan *rpc.Message
	reqs  chan *rpc.Message
}

func newRecorder() *recorder {
	return &recorder{notes: make(chan *rpc.Message, 64), reqs: make(chan *rpc.Message, 8)}
}

func (r *recorder) Notification(_ *Conn, m *rpc.Message) {
	select {
	case r.notes <- m:
	default:
	}
}

func (r *recorder) Request(_ *Conn, m *rpc.Message) { r.reqs <- m }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func connect(t *testing.T, hc *HTTPConnector) *Conn {
	t.Helper()
	if hc.Logger == nil {
		hc.Logger = quiet()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := hc.Connect(ctx)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	c := s.(*Conn)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func call(t *testing.T, c *Conn, method, params string) *rpc.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Call(ctx, method, json.RawMessage(params))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if m.Error != nil {
		t.Fatalf("%s: %v", method, m.Error)
	}
	return m
}

func nextNote(t *testing.T, r *recorder, method string) *rpc.Message {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-r.notes:
			if m.Method == method {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s", method)
		}
	}
}

func TestHTTPStreamable(t *testing.T) {
	f := newFixture(t, false)
	hooks := newRecorder()
	var connected *Conn
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url, Hooks: hooks, OnConnect: func(_ context.Context, c *Conn) { connected = c }})
	if connected != c || c.Name() != "remote" || c.Process() != nil || !c.Alive() {
		t.Fatalf("OnConnect saw %p, Conn %p; name %q, process %v", connected, c, c.Name(), c.Process())
	}

	init := c.Init()
	if init.ProtocolVersion != ProtocolVersion || !init.Has("tools") || !init.Has("logging") {
		t.Errorf("initialize result %s", init.Raw)
	}
	var info struct{ Name, Version string }
	if err := json.Unmarshal(init.ServerInfo, &info); err != nil || info.Name != "fixture" || info.Version != "1.2.3" {
		t.Errorf("serverInfo %s", init.ServerInfo)
	}

	// The result's bytes are the server's.
	m := call(t, c, "tools/call", `{"name":"echo","arguments":{"text":"hello"}}`)
	if got, want := string(m.Result), `{"content":[{"type":"text","text":"hello"}]}`; got != want {
		t.Errorf("echo result %s, want %s", got, want)
	}

	// Progress and logging on the POST's stream, through the hooks.
	call(t, c, "logging/setLevel", `{"level":"info"}`)
	m = call(t, c, "tools/call", `{"name":"progress","arguments":{},"_meta":{"progressToken":"tok"}}`)
	if !strings.Contains(string(m.Result), `"done"`) {
		t.Errorf("progress result %s", m.Result)
	}
	var progress []string
	var logs int
	for len(progress) < 3 || logs < 3 {
		select {
		case n := <-hooks.notes:
			switch n.Method {
			case "notifications/progress":
				progress = append(progress, string(n.Params))
			case "notifications/message":
				logs++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("progress %v, %d log messages", progress, logs)
		}
	}
	if want := `{"progressToken":"tok","progress":1,"total":3}`; progress[0] != want {
		t.Errorf("progress %s, want %s", progress[0], want)
	}

	// Sampling: a request from the server, answered through Conn.Reply.
	done := make(chan *rpc.Message, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := c.Call(ctx, "tools/call", json.RawMessage(`{"name":"sample","arguments":{}}`))
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	select {
	case req := <-hooks.reqs:
		if req.Method != "sampling/createMessage" || !strings.Contains(string(req.Params), `"maxTokens":100`) {
			t.Errorf("server request %s %s", req.Method, req.Params)
		}
		if err := c.Reply(req.ID, json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"from mcpvisor"},"model":"m"}`)); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no sampling request")
	}
	if m := <-done; m == nil || !strings.Contains(string(m.Result), "sampled: from mcpvisor") {
		t.Errorf("sample result %+v", m)
	}

	// Related to no request: on the standalone GET stream.
	f.server.AddTool(&mcp.Tool{Name: "late", InputSchema: objectSchema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("late"), nil
	})
	nextNote(t, hooks, "notifications/tools/list_changed")

	// Concurrent calls, one of them held by the server meanwhile.
	blocked := make(chan *rpc.Message, 1)
	go func() {
		m, _ := c.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"block","arguments":{}}`))
		blocked <- m
	}()
	<-f.entered
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			arg, _ := json.Marshal(map[string]any{"name": "echo", "arguments": map[string]string{"text": strings.Repeat("x", i)}})
			m := call(t, c, "tools/call", string(arg))
			if !strings.Contains(string(m.Result), `"text":"`+strings.Repeat("x", i)+`"`) {
				t.Errorf("echo %d: %s", i, m.Result)
			}
		})
	}
	wg.Wait()
	f.release <- struct{}{} // not close: the fixture closes it
	if m := <-blocked; m == nil || !strings.Contains(string(m.Result), "released") {
		t.Errorf("block result %+v", m)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("Wait after Close: %v", err)
	}
	if c.Alive() {
		t.Error("alive after Close")
	}

	// Headers: the session and, after initialize, the protocol version on
	// every request; the session ended with DELETE.
	reqs := f.requests()
	if len(reqs) == 0 || reqs[0].rpcMethod != "initialize" || reqs[0].session != "" {
		t.Fatalf("first request %+v", reqs)
	}
	sid := ""
	var methods []string
	for _, r := range reqs[1:] {
		if sid == "" {
			sid = r.session
		}
		if r.session == "" || r.session != sid || r.version != ProtocolVersion {
			t.Errorf("request %+v: want session %q and version %s", r, sid, ProtocolVersion)
		}
		methods = append(methods, r.method)
	}
	joined := strings.Join(methods, " ")
	if !strings.Contains(joined, "GET") || !strings.HasSuffix(joined, "DELETE") {
		t.Errorf("methods after initialize: %s", joined)
	}
}

func TestHTTPHeadersAndAuth(t *testing.T) {
	f := newFixture(t, false)
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer x" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return true
		}
		return false
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, transport := range []string{"", "sse"} {
		for _, headers := range []map[string]string{nil, {"Authorization": "Bearer wrong"}} {
			_, err := (&HTTPConnector{Name: "remote", URL: f.url, Headers: headers, Transport: transport, Logger: quiet()}).Connect(ctx)
			if !errors.Is(err, lifecycle.ErrAuthRequired) || !lifecycle.IsPermanent(err) {
				t.Errorf("transport %q, headers %v: Connect error %v, want ErrAuthRequired", transport, headers, err)
			}
		}
	}

	n := len(f.requests())
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url, Headers: map[string]string{"Authorization": "Bearer x"}})
	call(t, c, "tools/list", `{}`)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("Wait: %v", err)
	}
	for _, r := range f.requests()[n:] {
		if r.bearer != "Bearer x" {
			t.Errorf("%s %s without the header", r.method, r.rpcMethod)
		}
	}

	// The credentials refused later (revoked): the connection ends, as
	// needing authentication.
	c = connect(t, &HTTPConnector{Name: "remote", URL: f.url, Headers: map[string]string{"Authorization": "Bearer x"}})
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return true
	})
	if m, err := c.Call(ctx, "tools/list", nil); err == nil && m.Error == nil {
		t.Errorf("call with revoked credentials: %s", m.Result)
	}
	if err := waitFor(t, c); !errors.Is(err, lifecycle.ErrAuthRequired) {
		t.Errorf("Wait: %v, want ErrAuthRequired", err)
	}
}

func waitFor(t *testing.T, c *Conn) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- c.Wait() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
		return nil
	}
}

func TestHTTPServerGone(t *testing.T) {
	f := newFixture(t, false)
	// A key in the URL must not show in errors.
	keyed := f.url + "/mcp/sekret?key=sekret"
	c := connect(t, &HTTPConnector{Name: "remote", URL: keyed})
	pending := make(chan error, 1)
	go func() {
		m, err := c.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"block","arguments":{}}`))
		if err == nil && m.Error != nil {
			err = m.Error
		}
		pending <- err
	}()
	<-f.entered

	start := time.Now()
	f.kill()
	select {
	case err := <-pending:
		if err == nil || strings.Contains(err.Error(), "sekret") {
			t.Errorf("the pending call: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pending call did not fail")
	}
	err := waitFor(t, c)
	if !lifecycle.IsTransient(err) || !(errors.Is(err, lifecycle.ErrServerUnavailable) || errors.Is(err, lifecycle.ErrTransport)) ||
		strings.Contains(err.Error(), "sekret") {
		t.Errorf("Wait: %v, want a transport failure", err)
	}
	t.Logf("noticed in %v: %v", time.Since(start), err)
	if _, err := c.Call(context.Background(), "tools/list", nil); !errors.Is(err, rpc.ErrClosed) {
		t.Errorf("call after the end: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}

	// Nothing there at all.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = (&HTTPConnector{Name: "remote", URL: keyed, Logger: quiet()}).Connect(ctx)
	if !errors.Is(err, lifecycle.ErrServerUnavailable) || strings.Contains(err.Error(), "sekret") {
		t.Errorf("Connect to a closed server: %v", err)
	}
}

// A server that goes away while nothing is in flight: the standalone
// stream notices.
func TestHTTPServerGoneIdle(t *testing.T) {
	f := newFixture(t, false)
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url})
	call(t, c, "ping", `{}`)
	start := time.Now()
	f.kill()
	err := waitFor(t, c)
	if !errors.Is(err, lifecycle.ErrServerUnavailable) && !errors.Is(err, lifecycle.ErrTransport) {
		t.Errorf("Wait: %v, want a transport failure", err)
	}
	t.Logf("noticed in %v: %v", time.Since(start), err)
}

// The server forgets the session: the standalone stream's reconnection
// gets 404, and the connection ends as session missing.
func TestHTTPSessionMissing(t *testing.T) {
	f := newFixture(t, false)
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url})
	call(t, c, "ping", `{}`)
	for ss := range f.server.Sessions() {
		_ = ss.Close()
	}
	if err := waitFor(t, c); !errors.Is(err, lifecycle.ErrSessionMissing) {
		t.Errorf("Wait: %v, want ErrSessionMissing", err)
	}
}

// A call given up on: notifications/cancelled reaches the server, whose
// handler's context ends.
func TestHTTPCancel(t *testing.T) {
	f := newFixture(t, false)
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, "tools/call", json.RawMessage(`{"name":"block","arguments":{}}`))
		errc <- err
	}()
	<-f.entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Call: %v", err)
	}
	select {
	case err := <-f.stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the tool ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not cancel the tool")
	}
	call(t, c, "ping", `{}`)
}

// Close is idempotent, safe with Wait, and bounded when the server never
// answers the DELETE.
func TestHTTPCloseBounded(t *testing.T) {
	defer func(d, g time.Duration) { closeTimeout, closeGuard = d, g }(closeTimeout, closeGuard)
	closeTimeout, closeGuard = 200*time.Millisecond, time.Second
	f := newFixture(t, false)
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodDelete {
			return false
		}
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return true
	})
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url})
	call(t, c, "ping", `{}`)

	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("Close took %v", d)
	}
	if err := <-waited; err != nil {
		t.Errorf("Wait: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

func TestHTTPLegacySSE(t *testing.T) {
	f := newFixture(t, true)
	hooks := newRecorder()
	c := connect(t, &HTTPConnector{Name: "old", URL: f.url, Transport: "sse", Hooks: hooks})
	if c.Init().ProtocolVersion != ProtocolVersion {
		t.Errorf("version %q", c.Init().ProtocolVersion)
	}
	m := call(t, c, "tools/call", `{"name":"echo","arguments":{"text":"hello"}}`)
	if got, want := string(m.Result), `{"content":[{"type":"text","text":"hello"}]}`; got != want {
		t.Errorf("echo result %s, want %s", got, want)
	}
	call(t, c, "tools/call", `{"name":"progress","arguments":{},"_meta":{"progressToken":7}}`)
	nextNote(t, hooks, "notifications/progress")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("Wait: %v", err)
	}
}

func TestHTTPUnknownTransport(t *testing.T) {
	_, err := (&HTTPConnector{Name: "x", URL: "http://127.0.0.1:1/", Transport: "websocket"}).Connect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "websocket") {
		t.Errorf("Connect: %v", err)
	}
}

// hangDelete makes the fixture hold every DELETE until the client gives up
// on it or the fixture is released; started and aborted tell when one
// arrives and when the client gave up on one.
func hangDelete(f *fixture) (started, aborted chan struct{}) {
	started, aborted = make(chan struct{}, 4), make(chan struct{}, 4)
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodDelete {
			return false
		}
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			aborted <- struct{}{}
		case <-f.release:
		}
		return true
	})
	return started, aborted
}

// CloseContext is bounded by its ctx for a remote server too: a server
// that never answers the DELETE ending its session does not hold it up.
// The session's end goes on, and Wait returns once it has.
func TestHTTPCloseContextBoundedByContext(t *testing.T) {
	f := newFixture(t, false)
	started, _ := hangDelete(f)
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url})
	call(t, c, "ping", `{}`)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := c.CloseContext(ctx)
	if d := time.Since(begin); d > time.Second {
		t.Errorf("CloseContext with a 100 ms deadline took %v", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CloseContext: %v, want its deadline", err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not ended with DELETE")
	}
	if c.Alive() {
		t.Error("alive after CloseContext")
	}

	f.close() // the DELETE ends
	if err := waitFor(t, c); err != nil {
		t.Errorf("Wait: %v", err)
	}
}

// The session's end is bounded by closeGuard even when the DELETE's own
// bound is longer: the DELETE is abandoned then, so that nothing of the
// connection outlives Wait.
func TestHTTPSessionEndBoundedByGuard(t *testing.T) {
	defer func(d, g time.Duration) { closeTimeout, closeGuard = d, g }(closeTimeout, closeGuard)
	closeTimeout, closeGuard = time.Hour, 200*time.Millisecond
	f := newFixture(t, false)
	started, aborted := hangDelete(f)
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url})
	call(t, c, "ping", `{}`)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = c.CloseContext(ctx)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not ended with DELETE")
	}
	if err := waitFor(t, c); err != nil {
		t.Errorf("Wait: %v", err)
	}
	// The go-sdk bounds its DELETE by 5 s; the guard must end it well
	// before.
	select {
	case <-aborted:
	case <-time.After(2 * time.Second):
		t.Fatal("the DELETE was still under way 2 s after Wait returned")
	}
}

// A handshake that fails (here: a protocol version mcpvisor does not
// speak) ends the session under Connect's ctx: a server that never
// answers the DELETE does not hold Connect past it.
func TestHTTPConnectFailureBoundedByContext(t *testing.T) {
	f := newFixture(t, false)
	started, _ := hangDelete(f)
	wrapDelete := f.wrap
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return wrapDelete(w, r)
		}
		var m struct {
			ID     json.RawMessage
			Method string
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &m) != nil || m.Method != "initialize" {
			w.WriteHeader(http.StatusAccepted)
			return true
		}
		w.Header().Set("Mcp-Session-Id", "s1")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"1999-01-01","capabilities":{},"serverInfo":{"name":"old","version":"0"}}}`))
		return true
	})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := (&HTTPConnector{Name: "remote", URL: f.url, Logger: quiet()}).Connect(ctx)
	if d := time.Since(begin); d > time.Second {
		t.Errorf("Connect with a 300 ms deadline took %v", d)
	}
	if !errors.Is(err, lifecycle.ErrCapabilityMissing) {
		t.Errorf("Connect: %v, want ErrCapabilityMissing", err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not ended with DELETE")
	}
	f.close() // the DELETE ends; goleak sees the connection's goroutines end
}
