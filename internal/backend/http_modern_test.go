package backend

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// post is one POST a test server received.
type post struct {
	method string // the JSON-RPC method of the body
	id     json.RawMessage
	params json.RawMessage
	header http.Header
}

// posts records what a test server receives: every HTTP request's method,
// and the POSTs in full.
type posts struct {
	mu    sync.Mutex
	all   []post
	verbs []string
}

func (p *posts) record(r *http.Request) post {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m struct {
		ID     json.RawMessage
		Method string
		Params json.RawMessage
	}
	_ = json.Unmarshal(body, &m)
	x := post{method: m.Method, id: m.ID, params: m.Params, header: r.Header.Clone()}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.verbs = append(p.verbs, r.Method)
	if r.Method == http.MethodPost {
		p.all = append(p.all, x)
	}
	return x
}

func (p *posts) list() ([]post, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]post(nil), p.all...), append([]string(nil), p.verbs...)
}

func (p *posts) count(method string) int {
	all, _ := p.list()
	n := 0
	for _, x := range all {
		if x.method == method {
			n++
		}
	}
	return n
}

// startEverythingHTTP runs the go-sdk conformance server on HTTP
// (stateless: it serves both eras) behind a proxy that records what
// mcpvisor sends; it returns the proxy's URL.
func startEverythingHTTP(t *testing.T) (string, *posts) {
	t.Helper()
	addr := testserver.StartHTTP(t, everythingServer(t))
	target, _ := url.Parse("http://" + addr)
	rec := &posts{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	proxy.Transport = tr
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv.URL + "/", rec
}

func connectErr(hc *HTTPConnector) (*Conn, error) {
	if hc.Logger == nil {
		hc.Logger = quiet()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := hc.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return s.(*Conn), nil
}

// "auto" finds the dual-era conformance server modern: no initialize and
// no session; every POST carries the version, method and name headers and
// the _meta; list changes come through mcpvisor's subscriptions/listen.
func TestHTTPModernAuto(t *testing.T) {
	u, rec := startEverythingHTTP(t)
	hooks := newRecorder()
	c := connect(t, &HTTPConnector{Name: "remote", URL: u, Protocol: ProtocolAuto, Hooks: hooks})
	init := c.Init()
	if !c.Modern() || init.ProtocolVersion != ModernVersion || !init.Has("tools") || !strings.Contains(string(init.ServerInfo), "mcp-conformance-test-server") {
		t.Fatalf("modern %v, init %s", c.Modern(), init.Raw)
	}

	m := call(t, c, "tools/call", `{"name":"test_simple_text","arguments":{}}`)
	if !strings.Contains(string(m.Result), `"type":"text"`) {
		t.Errorf("tools/call result %s", m.Result)
	}
	call(t, c, "prompts/get", `{"name":"test_simple_prompt"}`)
	m = call(t, c, "resources/read", `{"uri":"test://static-text"}`)
	if !strings.Contains(string(m.Result), "static text resource") {
		t.Errorf("resources/read result %s", m.Result)
	}
	call(t, c, "tools/list", ``)
	// A list change reaches the hooks on mcpvisor's listen.
	call(t, c, "tools/call", `{"name":"test_trigger_tool_change","arguments":{}}`)
	nextNote(t, hooks, "notifications/tools/list_changed")

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("Wait after Close: %v", err)
	}

	all, verbs := rec.list()
	if len(all) == 0 || all[0].method != "server/discover" {
		t.Fatalf("first POST %+v", all)
	}
	names := map[string]string{}
	for _, p := range all {
		if p.method == "initialize" || p.method == "notifications/initialized" {
			t.Errorf("%s sent to a modern server", p.method)
		}
		if len(p.id) == 0 {
			t.Errorf("a notification POSTed to a modern server: %s", p.method)
		}
		h := p.header
		if h.Get("Mcp-Session-Id") != "" || h.Get("MCP-Protocol-Version") != ModernVersion || h.Get("Mcp-Method") != p.method {
			t.Errorf("%s: headers %v", p.method, h)
		}
		if v, _ := rpc.StringMember(rpc.Member(p.params, "_meta"), metaProtocolVersion); v != ModernVersion {
			t.Errorf("%s: params %s", p.method, p.params)
		}
		if meta := rpc.Member(p.params, "_meta"); rpc.Member(meta, metaClientCaps) == nil || rpc.Member(meta, metaClientInfo) == nil {
			t.Errorf("%s: _meta %s", p.method, rpc.Member(p.params, "_meta"))
		}
		if n := h.Get("Mcp-Name"); n != "" {
			names[p.method+" "+n] = n
		}
	}
	for _, want := range []string{"tools/call test_simple_text", "prompts/get test_simple_prompt", "resources/read test://static-text"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no POST %s with its Mcp-Name; seen %v", want, names)
		}
	}
	if rec.count("subscriptions/listen") == 0 {
		t.Error("no subscriptions/listen")
	}
	for _, v := range verbs {
		if v != http.MethodPost {
			t.Errorf("%s sent to a modern server", v)
		}
	}
}

// "legacy", and no setting at all, initialize the dual-era server as
// before: no probe.
func TestHTTPModernLegacySetting(t *testing.T) {
	u, rec := startEverythingHTTP(t)
	for _, protocol := range []string{ProtocolLegacy, ""} {
		before, _ := rec.list()
		n := len(before)
		c := connect(t, &HTTPConnector{Name: "remote", URL: u, Protocol: protocol})
		if c.Modern() || c.Init().ProtocolVersion != ProtocolVersion {
			t.Errorf("protocol %q: modern %v, version %q", protocol, c.Modern(), c.Init().ProtocolVersion)
		}
		call(t, c, "tools/call", `{"name":"test_simple_text","arguments":{}}`)
		all, _ := rec.list()
		if all[n].method != "initialize" {
			t.Errorf("protocol %q: first POST %s", protocol, all[n].method)
		}
		for _, p := range all[n:] {
			if p.method == "server/discover" {
				t.Errorf("protocol %q: probed", protocol)
			}
		}
		_ = c.Close()
	}
}

// legacyOnly makes the go-sdk fixture answer a modern POST as a server of
// 2025 would, in the way refuse does.
func legacyOnly(f *fixture, refuse func(w http.ResponseWriter)) {
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || r.Header.Get("MCP-Protocol-Version") != ModernVersion {
			return false
		}
		refuse(w)
		return true
	})
}

func jsonAnswer(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

// A legacy server refuses the probe in one of the ways a 2025 server
// does: "auto" falls back to initialize, and remembers it; "modern" fails
// naming the server and the setting.
func TestHTTPModernFallsBackToLegacy(t *testing.T) {
	for name, refuse := range map[string]func(http.ResponseWriter){
		"400 text": func(w http.ResponseWriter) {
			http.Error(w, "Bad Request: Unsupported protocol version", http.StatusBadRequest)
		},
		"404": func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) },
		"405": func(w http.ResponseWriter) { w.WriteHeader(http.StatusMethodNotAllowed) },
		"400 legacy error": func(w http.ResponseWriter) {
			jsonAnswer(w, 400, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request: session ID required"}}`)
		},
		"method not found": func(w http.ResponseWriter) {
			jsonAnswer(w, 200, `{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"method not found"}}`)
		},
		"no discover result": func(w http.ResponseWriter) {
			jsonAnswer(w, 200, `{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2025-11-25"]}}`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, false)
			legacyOnly(f, refuse)
			hc := &HTTPConnector{Name: "remote", URL: f.url, Protocol: ProtocolAuto}
			c := connect(t, hc)
			if c.Modern() || c.Init().ProtocolVersion != ProtocolVersion {
				t.Fatalf("modern %v, version %q", c.Modern(), c.Init().ProtocolVersion)
			}
			m := call(t, c, "tools/call", `{"name":"echo","arguments":{"text":"hi"}}`)
			if !strings.Contains(string(m.Result), `"hi"`) {
				t.Errorf("echo %s", m.Result)
			}
			var methods []string
			for _, r := range f.requests() {
				if r.rpcMethod != "" {
					methods = append(methods, r.rpcMethod)
				}
			}
			if len(methods) < 2 || methods[0] != "server/discover" || methods[1] != "initialize" {
				t.Errorf("methods %v", methods)
			}
			_ = c.Close()

			// Known legacy now: not probed again.
			c = connect(t, hc)
			discovers := 0
			for _, r := range f.requests() {
				if r.rpcMethod == "server/discover" {
					discovers++
				}
			}
			if c.Modern() || discovers != 1 {
				t.Errorf("reconnect: modern %v, %d probes", c.Modern(), discovers)
			}

			_, err := connectErr(&HTTPConnector{Name: "remote", URL: f.url, Protocol: ProtocolModern})
			if !errors.Is(err, lifecycle.ErrCapabilityMissing) || !lifecycle.IsPermanent(err) ||
				!strings.Contains(err.Error(), "server remote") || !strings.Contains(err.Error(), `"protocol": "modern"`) {
				t.Errorf("modern-only connect to a legacy server: %v", err)
			}
		})
	}
}

// An "auto" server known legacy from its last run (EraHint) is not
// probed; one last seen modern, or unknown, is.
func TestHTTPModernEraHint(t *testing.T) {
	f := newFixture(t, false)
	legacyOnly(f, func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) })
	for hint, probes := range map[string]int{"2025-06-18": 0, ModernVersion: 1, "": 1} {
		before := 0
		for _, r := range f.requests() {
			if r.rpcMethod == "server/discover" {
				before++
			}
		}
		c := connect(t, &HTTPConnector{Name: "remote", URL: f.url, Protocol: ProtocolAuto, EraHint: func() string { return hint }})
		after := 0
		for _, r := range f.requests() {
			if r.rpcMethod == "server/discover" {
				after++
			}
		}
		if c.Modern() || after-before != probes {
			t.Errorf("hint %q: modern %v, %d probes, want %d", hint, c.Modern(), after-before, probes)
		}
		_ = c.Close()
	}
}

// A server that never answers the probe: "auto" gives it up after the
// probe bound and initializes.
func TestHTTPModernProbeTimeout(t *testing.T) {
	defer func(d time.Duration) { probeTimeout = d }(probeTimeout)
	probeTimeout = 200 * time.Millisecond
	f := newFixture(t, false)
	abandoned := make(chan struct{}, 1)
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("MCP-Protocol-Version") != ModernVersion {
			return false
		}
		select {
		case <-r.Context().Done():
			abandoned <- struct{}{}
		case <-f.release:
		}
		return true
	})
	hc := &HTTPConnector{Name: "remote", URL: f.url, Protocol: ProtocolAuto}
	c := connect(t, hc)
	if c.Modern() || c.Init().ProtocolVersion != ProtocolVersion {
		t.Fatalf("modern %v, version %q", c.Modern(), c.Init().ProtocolVersion)
	}
	select {
	case <-abandoned:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe was not given up")
	}
	call(t, c, "ping", `{}`)
	if !hc.era.knownLegacy(nil) {
		t.Error("the fallback is not remembered")
	}

	// "modern" waits for the answer as long as Connect's ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := (&HTTPConnector{Name: "remote", URL: f.url, Protocol: ProtocolModern, Logger: quiet()}).Connect(ctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, lifecycle.ErrInitTimeout) {
		t.Errorf("modern-only connect to a server that never answers: %v", err)
	}
	select {
	case <-abandoned:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe was not given up")
	}
}

// A modern server slow to answer the probe, which then refuses the
// initialize that followed: the failure is not remembered as legacy, and
// the next connection probes again (and finds it modern).
func TestHTTPModernSlowProbeNotRememberedLegacy(t *testing.T) {
	defer func(d time.Duration) { probeTimeout = d }(probeTimeout)
	probeTimeout = 200 * time.Millisecond
	u, _ := startEverythingHTTP(t)
	target, _ := url.Parse(u)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var slow atomic.Bool
	slow.Store(true)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("MCP-Protocol-Version") != ModernVersion {
			// A modern-only server refuses a legacy initialize.
			http.Error(w, "Missing MCP-Protocol-Version header", http.StatusBadRequest)
			return
		}
		if slow.Load() {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(release); srv.CloseClientConnections(); srv.Close() })
	hc := &HTTPConnector{Name: "remote", URL: srv.URL + "/", Protocol: ProtocolAuto, Logger: quiet()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := hc.Connect(ctx); err == nil {
		t.Fatal("the legacy initialize of a modern-only server worked")
	}
	if hc.era.knownLegacy(nil) {
		t.Fatal("a probe that went unanswered, then a refused initialize, was remembered as legacy")
	}
	slow.Store(false)
	c := connect(t, hc)
	if !c.Modern() {
		t.Error("the next connection did not probe again")
	}
}

// A modern server's refusal of the probe is no legacy answer: Connect
// fails, without initialize; a server failure (5xx) fails it as transient,
// and is not remembered as legacy.
func TestHTTPModernProbeRefused(t *testing.T) {
	f := newFixture(t, false)
	for _, tc := range []struct {
		status    int
		body      string
		permanent bool
	}{
		{400, `{"jsonrpc":"2.0","id":0,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2099-01-01"],"requested":"2026-07-28"}}}`, true},
		{400, `{"jsonrpc":"2.0","id":null,"error":{"code":-32020,"message":"Header mismatch"}}`, true},
		{503, ``, false},
		{500, `{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"internal error"}}`, false},
	} {
		legacyOnly(f, func(w http.ResponseWriter) { jsonAnswer(w, tc.status, tc.body) })
		n := len(f.requests())
		hc := &HTTPConnector{Name: "remote", URL: f.url, Protocol: ProtocolAuto}
		_, err := connectErr(hc)
		if err == nil || lifecycle.IsPermanent(err) != tc.permanent || !tc.permanent && !lifecycle.IsTransient(err) {
			t.Errorf("HTTP %d %s: Connect %v", tc.status, tc.body, err)
		}
		for _, r := range f.requests()[n:] {
			if r.rpcMethod == "initialize" {
				t.Errorf("HTTP %d %s: initialize sent", tc.status, tc.body)
			}
		}
		if hc.era.knownLegacy(nil) {
			t.Errorf("HTTP %d: remembered as legacy", tc.status)
		}
	}
}

func TestHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"get_weather":                        "get_weather",
		"file:///projects/myapp/config.json": "file:///projects/myapp/config.json",
		"with inner space":                   "with inner space",
		"Hello, 世界":                          "=?base64?SGVsbG8sIOS4lueVjA==?=",
		" padded ":                           "=?base64?IHBhZGRlZCA=?=",
		"line1\nline2":                       "=?base64?bGluZTEKbGluZTI=?=",
		"=?base64?literal?=":                 "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=",
		"del\x7f":                            "=?base64?ZGVsfw==?=",
	} {
		if got := headerValue(in); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// stub is a small modern server: it answers server/discover, tools/call
// (echoing the Mcp-Name it got) and subscriptions/listen, and records
// what it receives.
type stub struct {
	posts
	srv     *httptest.Server
	deny    atomic.Bool   // answer everything with 401
	listens chan struct{} // a listen began; the first one ends without its response
	entered chan struct{} // the "block" tool began
	left    chan struct{} // its POST was closed
	nListen atomic.Int32
}

func newStub(t *testing.T) *stub {
	s := &stub{listens: make(chan struct{}, 8), entered: make(chan struct{}, 1), left: make(chan struct{}, 1)}
	s.srv = httptest.NewServer(s)
	t.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

func writeSSE(w http.ResponseWriter, msgs ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, m := range msgs {
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", m)
	}
	w.(http.Flusher).Flush()
}

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := s.record(r)
	if s.deny.Load() {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if len(p.id) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	id := string(p.id)
	switch p.method {
	case "server/discover":
		jsonAnswer(w, 200, `{"jsonrpc":"2.0","id":`+id+`,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"stub","version":"1"}}}}`)
	case "subscriptions/listen":
		writeSSE(w, `{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":`+id+`},"notifications":{"toolsListChanged":true}}}`,
			`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":`+id+`}}}`)
		select {
		case s.listens <- struct{}{}:
		default:
		}
		if s.nListen.Add(1) == 1 {
			return // ends without the response, as a dropped stream does
		}
		<-r.Context().Done()
	case "tools/list":
		jsonAnswer(w, 200, `{"jsonrpc":"2.0","id":`+id+`,"result":{"tools":[
			{"name":"region","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}},
			{"name":"invalid","inputSchema":{"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}}}]}}`)
	case "tools/call":
		name, _ := rpc.StringMember(p.params, "name")
		switch name {
		case "block":
			s.entered <- struct{}{}
			<-r.Context().Done()
			s.left <- struct{}{}
		case "progress":
			writeSSE(w, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
				`{"jsonrpc":"2.0","id":`+id+`,"result":{"content":[]}}`)
		case "mismatch":
			jsonAnswer(w, 400, `{"jsonrpc":"2.0","id":null,"error":{"code":-32020,"message":"Header mismatch: test"}}`)
		default:
			res, _ := json.Marshal(map[string]any{"content": []any{map[string]string{"type": "text", "text": r.Header.Get("Mcp-Name")}}})
			jsonAnswer(w, 200, `{"jsonrpc":"2.0","id":`+id+`,"result":`+string(res)+`}`)
		}
	default:
		jsonAnswer(w, 404, `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32601,"message":"Method not found"}}`)
	}
}

// The modern transport against a stub: Base64 names, a stream's
// notifications before its response, an HTTP error's JSON-RPC error as
// the response, cancellation by closing the POST (no notification), and
// the listen opened again when its stream drops.
func TestHTTPModernTransport(t *testing.T) {
	s := newStub(t)
	hooks := newRecorder()
	c := connect(t, &HTTPConnector{Name: "remote", URL: s.srv.URL, Protocol: ProtocolModern, Hooks: hooks})
	if !c.Modern() || c.Init().ProtocolVersion != ModernVersion || !strings.Contains(string(c.Init().ServerInfo), `"stub"`) {
		t.Fatalf("modern %v, init %s", c.Modern(), c.Init().Raw)
	}

	// The first listen's stream ends without its response: it is opened
	// again, and list changes go on reaching the hooks.
	for i := range 2 {
		select {
		case <-s.listens:
		case <-time.After(10 * time.Second):
			t.Fatalf("listen %d did not come", i+1)
		}
		nextNote(t, hooks, "notifications/tools/list_changed")
	}

	// A name that is not plain ASCII goes Base64-encoded.
	const name = "größe 世界"
	m := call(t, c, "tools/call", `{"name":"`+name+`","arguments":{}}`)
	var res struct{ Content []struct{ Text string } }
	_ = json.Unmarshal(m.Result, &res)
	enc := "=?base64?" + base64.StdEncoding.EncodeToString([]byte(name)) + "?="
	if len(res.Content) != 1 || res.Content[0].Text != enc {
		t.Errorf("Mcp-Name %s, want %q", m.Result, enc)
	}
	m = call(t, c, "tools/call", `{"name":"plain","arguments":{}}`)
	if !strings.Contains(string(m.Result), `"text":"plain"`) {
		t.Errorf("Mcp-Name %s, want plain", m.Result)
	}

	m = call(t, c, "tools/call", `{"name":"progress","arguments":{},"_meta":{"progressToken":"t"}}`)
	if n := nextNote(t, hooks, "notifications/progress"); !strings.Contains(string(n.Params), `"progressToken":"t"`) {
		t.Errorf("progress %s", n.Params)
	}
	if m.Error != nil || m.Result == nil {
		t.Errorf("the call that reported progress: %+v", m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Call(ctx, "tools/call", json.RawMessage(`{"name":"mismatch","arguments":{}}`))
	if err != nil || m.Error == nil || m.Error.Code != rpc.HeaderMismatch || m.Error.Message != "Header mismatch: test" {
		t.Errorf("an HTTP 400 with a JSON-RPC error: %v %+v", err, m)
	}
	m, err = c.Call(ctx, "nothing/here", nil)
	if err != nil || m.Error == nil || m.Error.Code != rpc.MethodNotFound {
		t.Errorf("an HTTP 404 with a JSON-RPC error: %v %+v", err, m)
	}

	// Cancelling a call closes its POST.
	bctx, bcancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(bctx, "tools/call", json.RawMessage(`{"name":"block","arguments":{}}`))
		errc <- err
	}()
	<-s.entered
	bcancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	select {
	case <-s.left:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call's POST stayed open")
	}
	call(t, c, "tools/call", `{"name":"plain","arguments":{}}`)

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("Wait: %v", err)
	}
	all, verbs := s.list()
	for _, p := range all {
		if len(p.id) == 0 || p.header.Get("Mcp-Session-Id") != "" || p.header.Get("MCP-Protocol-Version") != ModernVersion || p.header.Get("Mcp-Method") != p.method {
			t.Errorf("POST %s: id %s, headers %v", p.method, p.id, p.header)
		}
	}
	for _, v := range verbs {
		if v != http.MethodPost {
			t.Errorf("%s sent to a modern server", v)
		}
	}
}

// Credentials refused: at the probe, Connect fails as needing
// authentication; later, the connection ends so.
func TestHTTPModernAuth(t *testing.T) {
	s := newStub(t)
	s.deny.Store(true)
	if _, err := connectErr(&HTTPConnector{Name: "remote", URL: s.srv.URL, Protocol: ProtocolAuto}); !errors.Is(err, lifecycle.ErrAuthRequired) {
		t.Errorf("Connect with refused credentials: %v", err)
	}
	s.deny.Store(false)
	c := connect(t, &HTTPConnector{Name: "remote", URL: s.srv.URL, Protocol: ProtocolAuto})
	if !c.Modern() {
		t.Fatal("not modern")
	}
	s.deny.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m, err := c.Call(ctx, "tools/call", json.RawMessage(`{"name":"plain","arguments":{}}`)); err == nil && m.Error == nil {
		t.Errorf("call with revoked credentials: %s", m.Result)
	}
	if err := waitFor(t, c); !errors.Is(err, lifecycle.ErrAuthRequired) {
		t.Errorf("Wait: %v, want ErrAuthRequired", err)
	}
}

// A modern server gone: the next POST cannot reach it, and the connection
// ends as unavailable.
func TestHTTPModernServerGone(t *testing.T) {
	s := newStub(t)
	c := connect(t, &HTTPConnector{Name: "remote", URL: s.srv.URL + "/mcp?key=sekret", Protocol: ProtocolAuto})
	call(t, c, "tools/call", `{"name":"plain","arguments":{}}`)
	s.srv.CloseClientConnections()
	s.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m, err := c.Call(ctx, "tools/call", json.RawMessage(`{"name":"plain","arguments":{}}`)); err == nil && m.Error == nil {
		t.Errorf("call to a server gone: %s", m.Result)
	}
	err := waitFor(t, c)
	if !lifecycle.IsTransient(err) || strings.Contains(err.Error(), "sekret") {
		t.Errorf("Wait: %v, want a transient failure", err)
	}
}

// The subscriptions a connect's OnConnect replays (the fleet's, after a
// restart) are in the listen it opens: no listen goes out without them
// (one opened bare, then again with them).
func TestHTTPModernListenOpensWithReplay(t *testing.T) {
	s := newStub(t)
	c := connect(t, &HTTPConnector{Name: "remote", URL: s.srv.URL, Protocol: ProtocolAuto, Hooks: newRecorder(),
		OnConnect: func(_ context.Context, c *Conn) { c.SetResourceSubscriptions([]string{"test://watched"}) }})
	if !c.Modern() {
		t.Fatal("not modern")
	}
	select {
	case <-s.listens:
	case <-time.After(10 * time.Second):
		t.Fatal("no subscriptions/listen")
	}
	all, _ := s.list()
	for _, p := range all {
		if p.method == "subscriptions/listen" && !strings.Contains(string(p.params), "test://watched") {
			t.Fatalf("a listen without the replayed subscription: %s", p.params)
		}
	}
}

// A modern server's tools/list loses the tools whose x-mcp-header
// annotations are invalid, and a tools/call of an annotated tool carries
// its parameters' values as Mcp-Param headers.
func TestHTTPModernParamHeaders(t *testing.T) {
	s := newStub(t)
	c := connect(t, &HTTPConnector{Name: "remote", URL: s.srv.URL, Protocol: ProtocolModern, Hooks: newRecorder()})
	defer func() { _ = c.Close() }()
	m := call(t, c, "tools/list", `{}`)
	if !strings.Contains(string(m.Result), `"region"`) || strings.Contains(string(m.Result), `"invalid"`) {
		t.Errorf("tools/list: %s, want region's tool alone", m.Result)
	}
	call(t, c, "tools/call", `{"name":"region","arguments":{"region":"Hello, 世界"}}`)
	all, _ := s.list()
	got := ""
	for _, p := range all {
		if p.method == "tools/call" {
			got = p.header.Get("Mcp-Param-Region")
		}
	}
	if got != "=?base64?SGVsbG8sIOS4lueVjA==?=" {
		t.Errorf("Mcp-Param-Region %q", got)
	}
}
