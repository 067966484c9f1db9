package gateway

//lint:file-ignore SA1019 sampling and logging are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 client's sampling, elicitation and logging through mcpvisor.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// modernClient connects the go-sdk client at its default — MCP 2026-07-28,
// found by server/discover — to ep over the stdio front (http false) or
// the Streamable HTTP front.
func (w *world) modernClient(ep Endpoint, http bool, opts *mcp.ClientOptions) *mcp.ClientSession {
	t := w.t
	t.Helper()
	var tr mcp.Transport
	if http {
		h := NewStreamableHandler(ep, HTTPOptions{})
		srv := httptest.NewServer(h)
		t.Cleanup(func() {
			h.Close()
			srv.Close()
		})
		tr = &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}
	} else {
		c2sR, c2sW := io.Pipe()
		s2cR, s2cW := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = StdioOptions{Logger: slog.New(slog.DiscardHandler)}.Serve(context.Background(), ep, c2sR, s2cW)
			s2cW.Close()
		}()
		t.Cleanup(func() {
			c2sW.Close()
			<-done
		})
		tr = &mcp.IOTransport{Reader: s2cR, Writer: c2sW}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "modern-test", Version: "0"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { sess.Close() })
	if v := sess.InitializeResult().ProtocolVersion; v != modernVersion {
		t.Fatalf("the go-sdk client negotiated %q, want %s", v, modernVersion)
	}
	return sess
}

// The official go-sdk client, at its modern default, uses the aggregated
// and per-server endpoints over both fronts: lists, calls, progress,
// sampling through an input_required round, a log line at the level its
// request asked for, and a list change on its subscriptions/listen stream.
func TestModernGoSDKClient(t *testing.T) {
	w := newWorld(t, twoFixtures)
	w.gw.reg.linger = 20 * time.Millisecond
	for _, tc := range []struct {
		name   string
		ep     Endpoint
		http   bool
		prefix string
	}{
		{"stdio /mcp", w.gw.Aggregate(), false, "a__"},
		{"http /mcp", w.gw.Aggregate(), true, "a__"},
		{"http a", w.gw.Single("a"), true, ""},
		{"stdio a", w.gw.Single("a"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := make(chan struct{}, 4)
			progress := make(chan float64, 8)
			logs := make(chan string, 8)
			sess := w.modernClient(tc.ep, tc.http, &mcp.ClientOptions{
				// The fixture's sample tool asks, as a legacy server does,
				// with a request: the client answers it in an
				// input_required round (MRTR), with this handler.
				CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					text := ""
					if len(r.Params.Messages) > 0 {
						if c, ok := r.Params.Messages[0].Content.(*mcp.TextContent); ok {
							text = c.Text
						}
					}
					return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "answer to " + text}}, nil
				},
				LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
					if s, ok := r.Params.Data.(string); ok {
						select {
						case logs <- s:
						default:
						}
					}
				},
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
					select {
					case changed <- struct{}{}:
					default:
					}
				},
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					select {
					case progress <- r.Params.Progress:
					default:
					}
				},
			})
			ctx := t.Context()
			res, err := sess.ListTools(ctx, nil)
			if err != nil || !strings.Contains(strings.Join(toolNames(res), ","), tc.prefix+"echo") {
				t.Fatalf("tools/list: %v %v", toolNames(res), err)
			}
			out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tc.prefix + "echo", Arguments: map[string]any{"text": "modern"}})
			if err != nil || textOf(t, out) != "modern" {
				t.Fatalf("tools/call echo: %v %v", out, err)
			}
			out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: tc.prefix + "progress", Arguments: map[string]any{"steps": 3, "intervalMs": 1},
				Meta: mcp.Meta{"progressToken": "tok"}})
			if err != nil || textOf(t, out) != "done" {
				t.Fatalf("tools/call progress: %v %v", out, err)
			}
			for i := range 3 {
				select {
				case <-progress:
				case <-time.After(10 * time.Second):
					t.Fatalf("progress notification %d did not come", i+1)
				}
			}
			// Sampling through an input_required round.
			out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: tc.prefix + "sample", Arguments: map[string]any{"prompt": "capital?"}})
			if err != nil || textOf(t, out) != "sampled: answer to capital?" {
				t.Fatalf("tools/call sample: %v %v", out, err)
			}
			// A log line at the level the request asked for, on its stream
			// — once the server's other requesters are past the linger
			// (its lines are certainly this call's; see relayLog).
			time.Sleep(3 * w.gw.reg.linger)
			out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: tc.prefix + "log", Arguments: map[string]any{"text": "per-request", "level": "warning"},
				Meta: mcp.Meta{"io.modelcontextprotocol/logLevel": "info"}})
			if err != nil || textOf(t, out) != "logged" {
				t.Fatalf("tools/call log: %v %v", out, err)
			}
			select {
			case l := <-logs:
				if l != "per-request" {
					t.Fatalf("log line %q", l)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the log line the request asked for did not come")
			}
			// A list change reaches the client's listen stream.
			w.gw.ListsChanged(w.fleet.Get("a"), []catalog.ListKind{catalog.Tools})
			select {
			case <-changed:
			case <-time.After(10 * time.Second):
				t.Fatal("the tool list change did not reach the client's subscriptions/listen stream")
			}
		})
	}
}

// sseEvents posts body to url with hdr and sends each event's data on the
// returned channel, until the stream ends (then the channel closes).
func sseEvents(t *testing.T, ctx context.Context, url, body string, hdr map[string]string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("HTTP %d %q: %s", resp.StatusCode, ct, b)
	}
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		for r := newSSEReader(resp.Body); ; {
			ev, err := r.next()
			if err != nil {
				return
			}
			ch <- ev.data
		}
	}()
	return ch
}

// next is the next event within 10 s, or "" if the stream ended.
func nextEvent(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return ""
}

// subscriptions/listen: the acknowledgement comes first, naming what will
// be delivered (resource subscriptions are not); each listener gets only
// the kinds it asked for, tagged with its own subscription id, and only
// from servers its endpoint sees; the stream ends with its result when the
// front closes.
func TestModernListen(t *testing.T) {
	w := newWorld(t, twoFixtures)
	agg := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	aggSrv := httptest.NewServer(agg)
	defer aggSrv.Close()
	defer agg.Close() // first: it ends the listen streams
	single := NewStreamableHandler(w.gw.Single("b"), HTTPOptions{})
	singleSrv := httptest.NewServer(single)
	defer singleSrv.Close()
	defer single.Close()
	ctx := t.Context()
	listen := func(url, id, filter string) <-chan string {
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"subscriptions/listen","params":{"notifications":` + filter + `,` + modernMeta(`{}`) + `}}`
		return sseEvents(t, ctx, url, body, modernHeaders("subscriptions/listen", ""))
	}
	tools := listen(aggSrv.URL, `"t"`, `{"toolsListChanged":true,"resourceSubscriptions":["test://x"]}`)
	prompts := listen(aggSrv.URL, `"p"`, `{"promptsListChanged":true}`)
	onlyB := listen(singleSrv.URL, `7`, `{"toolsListChanged":true}`)
	for _, tc := range []struct {
		ch   <-chan string
		id   string
		want string
	}{
		{tools, `"t"`, `{"toolsListChanged":true}`},
		{prompts, `"p"`, `{"promptsListChanged":true}`},
		{onlyB, `7`, `{"toolsListChanged":true}`},
	} {
		ack := nextEvent(t, tc.ch)
		if !strings.Contains(ack, `"method":"notifications/subscriptions/acknowledged"`) || !strings.Contains(ack, `"notifications":`+tc.want) ||
			!strings.Contains(ack, `"io.modelcontextprotocol/subscriptionId":`+tc.id) {
			t.Fatalf("first event of listener %s: %s", tc.id, ack)
		}
	}

	// Server a's tools change: the aggregated tools listener hears it,
	// tagged with its id; neither the prompts listener nor b's does.
	w.gw.ListsChanged(w.fleet.Get("a"), []catalog.ListKind{catalog.Tools})
	if e := nextEvent(t, tools); !strings.Contains(e, `"notifications/tools/list_changed"`) || !strings.Contains(e, `"io.modelcontextprotocol/subscriptionId":"t"`) {
		t.Fatalf("tools listener: %s", e)
	}
	// Then b's prompts and tools change: each listener hears its own kind
	// from the servers it sees, and the first thing each hears after the
	// acknowledgement proves nothing else came before.
	w.gw.ListsChanged(w.fleet.Get("b"), []catalog.ListKind{catalog.Prompts, catalog.Tools})
	if e := nextEvent(t, prompts); !strings.Contains(e, `"notifications/prompts/list_changed"`) || !strings.Contains(e, `/subscriptionId":"p"`) {
		t.Fatalf("prompts listener: %s", e)
	}
	if e := nextEvent(t, onlyB); !strings.Contains(e, `"notifications/tools/list_changed"`) || !strings.Contains(e, `/subscriptionId":7`) {
		t.Fatalf("b's listener: %s", e)
	}
	if e := nextEvent(t, tools); !strings.Contains(e, `"notifications/tools/list_changed"`) || !strings.Contains(e, `/subscriptionId":"t"`) {
		t.Fatalf("tools listener, second change: %s", e)
	}

	// The front closes: each stream ends with the subscription's result.
	agg.Close()
	for _, ch := range []<-chan string{tools, prompts} {
		e := nextEvent(t, ch)
		if !strings.Contains(e, `"result":{`) || !strings.Contains(e, `"io.modelcontextprotocol/subscriptionId"`) {
			t.Fatalf("last event: %s", e)
		}
		if e, ok := <-ch; ok {
			t.Fatalf("an event after the result: %s", e)
		}
	}
	w.gw.listeners.mu.Lock()
	n := len(w.gw.listeners.m)
	w.gw.listeners.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d listeners registered after the aggregated front closed, want b's alone", n)
	}
}

// Over stdio a request with modern _meta is served on its own, before and
// without initialize: removed methods and bad versions get their errors,
// server/discover names the server, notifications/cancelled cancels it
// upstream, and a server's request during it becomes an input_required
// round if the client declared the capability, else the client gets
// MissingRequiredClientCapabilityError.
func TestModernStdio(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"c":{"command":"$CONFORMANCE","protocol":"legacy","prefix":"c"}}`)
	c := newStdioTestClientOn(t, w.gw.Aggregate())
	meta := modernMeta(`{}`)

	c.send(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + meta + `}}`)
	if m := c.message(); string(m.ID) != "1" || m.Error == nil || m.Error.Code != rpc.MethodNotFound {
		t.Fatalf("modern ping: %s", m.Encode())
	}
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + strings.Replace(meta, "2026-07-28", "2030-01-01", 1) + `}}`)
	if m := c.message(); string(m.ID) != "2" || m.Error == nil || m.Error.Code != rpc.UnsupportedProtocolVersion || !strings.Contains(string(m.Error.Data), `"requested":"2030-01-01"`) {
		t.Fatalf("unknown version: %s", m.Encode())
	}
	c.send(`{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{` + meta + `}}`)
	if m := c.message(); string(m.ID) != "3" || !strings.Contains(string(m.Result), `"supportedVersions":["2026-07-28"`) || !strings.Contains(string(m.Result), `"name":"mcpvisor"`) {
		t.Fatalf("discover: %s", m.Encode())
	}

	// Cancelled while the server works on it: the call ends at once
	// with an error, and the server is told. A second request with the
	// same id meanwhile is refused: ids name requests in flight.
	c.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a__sleep","arguments":{"ms":60000},` + meta + `}}`)
	c.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"},` + meta + `}}`)
	if m := c.message(); string(m.ID) != "4" || m.Error == nil || m.Error.Code != rpc.InvalidRequest || !strings.Contains(m.Error.Message, "in flight") {
		t.Fatalf("a second request with the id of one in flight: %s", m.Encode())
	}
	time.Sleep(50 * time.Millisecond) // let it reach the server; the test holds either way
	c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`)
	if m := c.message(); string(m.ID) != "4" || m.Error == nil || !strings.Contains(m.Error.Message, "cancel") {
		t.Fatalf("cancelled call: %s", m.Encode())
	}

	// The conformance server asks for sampling: without the capability
	// declared, MissingRequiredClientCapabilityError; with it, an
	// input_required round, answered by the retry.
	c.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"c__test_sampling","arguments":{"prompt":"hi"},` + meta + `}}`)
	if m := c.message(); string(m.ID) != "5" || m.Error == nil || m.Error.Code != rpc.MissingClientCapability {
		t.Fatalf("sampling without the capability: %s", m.Encode())
	}
	// The refused call ends at the server a moment later; until it has,
	// a sampling request there could be either call's.
	waitFor(t, "the refused call to end at the server", func() bool {
		w.gw.reg.mu.Lock()
		defer w.gw.reg.mu.Unlock()
		return len(w.gw.reg.calls) == 0
	})
	c.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"c__test_sampling","arguments":{"prompt":"hi"},` + modernMeta(`{"sampling":{}}`) + `}}`)
	key, method, state := inputRequired(t, c.message())
	if method != "sampling/createMessage" {
		t.Fatalf("input %s", method)
	}
	c.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"c__test_sampling","arguments":{"prompt":"hi"},"requestState":` + mustJSONString(state) +
		`,"inputResponses":{` + mustJSONString(key) + `:{"role":"assistant","content":{"type":"text","text":"Paris"},"model":"m"}},` + modernMeta(`{"sampling":{}}`) + `}}`)
	if m := c.message(); string(m.ID) != "8" || !strings.Contains(string(m.Result), "Paris") || !strings.Contains(string(m.Result), `"resultType":"complete"`) {
		t.Fatalf("sampling round over stdio: %s", m.Encode())
	}

	// A legacy session opens on the same stdio afterwards.
	c.initializeAt("2025-11-25")
	c.send(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	if m := c.message(); string(m.ID) != "6" || string(m.Result) != "{}" {
		t.Fatalf("legacy ping: %s", m.Encode())
	}
}

// A modern request gets the server's log lines on its stream only when
// its _meta asked for them, and only those at least as severe. (Each
// request is its own requester: the calls are spaced by more than the
// linger, so that each line is certainly its call's.)
func TestModernPerRequestLogLevel(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	w.gw.reg.linger = 20 * time.Millisecond
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	call := func(id, level, logLevel string) []*rpc.Message {
		meta := modernMeta(`{}`)
		if logLevel != "" {
			meta = strings.Replace(meta, `"io.modelcontextprotocol/clientCapabilities"`, `"io.modelcontextprotocol/logLevel":"`+logLevel+`","io.modelcontextprotocol/clientCapabilities"`, 1)
		}
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"a__log","arguments":{"text":"line","level":"` + level + `"},` + meta + `}}`
		resp, b := postModern(t, srv.URL, body, "tools/call", "a__log")
		if !strings.Contains(string(b), `"logged"`) {
			t.Fatalf("call %s: %s", id, b)
		}
		time.Sleep(50 * time.Millisecond) // past the linger: the next call is the server's only requester
		return replyMessages(t, resp, b)
	}
	has := func(ms []*rpc.Message) bool {
		for _, m := range ms {
			if m.Method == "notifications/message" {
				return true
			}
		}
		return false
	}
	if has(call("1", "info", "")) {
		t.Fatal("a log line reached a request that asked for none")
	}
	if !has(call("2", "info", "info")) {
		t.Fatal("the info line did not reach a request at logLevel info")
	}
	if has(call("3", "info", "error")) {
		t.Fatal("an info line reached a request at logLevel error")
	}
}

// A listener's resource subscriptions: mcpvisor subscribes at the server
// on its behalf, acknowledges the ones taken, and tags each update with
// the subscription's id; a URI no server has is left out.
func TestModernListenResourceSubscriptions(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE"}}`)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	body := `{"jsonrpc":"2.0","id":"r","method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["test://watched-resource","test://nobody"]},` + modernMeta(`{}`) + `}}`
	ch := sseEvents(t, t.Context(), srv.URL, body, modernHeaders("subscriptions/listen", ""))
	ack := nextEvent(t, ch)
	if !strings.Contains(ack, `"notifications/subscriptions/acknowledged"`) || !strings.Contains(ack, `"resourceSubscriptions":["test://watched-resource"]`) {
		t.Fatalf("acknowledgement %s", ack)
	}
	deadline := time.After(15 * time.Second)
	for {
		select {
		case e := <-ch:
			if strings.Contains(e, `"notifications/resources/updated"`) {
				if !strings.Contains(e, `"test://watched-resource"`) || !strings.Contains(e, `/subscriptionId":"r"`) {
					t.Fatalf("update %s", e)
				}
				return
			}
		case <-deadline:
			t.Fatal("no update of the watched resource within 15 s")
		}
	}
}

// Modern requests run concurrently, each on its own: 16 callers at once,
// each gets its own echo and only the progress of its own token.
func TestModernConcurrentCallsStayApart(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	errs := make(chan string, 64)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 4 {
				tok := fmt.Sprintf("t%d-%d", i, j)
				body := `{"jsonrpc":"2.0","id":"` + tok + `","method":"tools/call","params":{"name":"a__progress","arguments":{"steps":3,"intervalMs":1},"_meta":{"progressToken":"` + tok + `",` +
					strings.TrimPrefix(modernMeta(`{}`), `"_meta":{`) + `}}`
				_, b := postModern(t, srv.URL, body, "tools/call", "a__progress")
				got := string(b)
				if strings.Count(got, `"progressToken":"`+tok+`"`) != 3 || strings.Count(got, `"progressToken"`) != 3 || !strings.Contains(got, `"id":"`+tok+`"`) {
					errs <- fmt.Sprintf("caller %s got:\n%s", tok, got)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Over stdio every request is the one client's: a log line of a shared
// legacy server reaches the modern request that asked for it even right
// after that client's other requests there (the linger, which keeps one
// requester's late lines from another, has nobody else to keep apart).
func TestModernStdioLogLinesAfterOwnRequests(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	logs := make(chan string, 8)
	sess := w.modernClient(w.gw.Aggregate(), false, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			if s, ok := r.Params.Data.(string); ok {
				logs <- s
			}
		},
	})
	ctx := t.Context()
	for i := range 3 {
		if out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}}); err != nil || textOf(t, out) != "x" {
			t.Fatalf("echo: %v %v", out, err)
		}
		text := "line " + strconv.Itoa(i)
		out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__log", Arguments: map[string]any{"text": text, "level": "warning"},
			Meta: mcp.Meta{"io.modelcontextprotocol/logLevel": "info"}})
		if err != nil || textOf(t, out) != "logged" {
			t.Fatalf("log: %v %v", out, err)
		}
		select {
		case l := <-logs:
			if l != text {
				t.Fatalf("log line %q, want %q", l, text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("log line %d did not come", i)
		}
	}
}

// A modern request reaches a legacy server as a request of the 2025
// session mcpvisor opened: the revision's version key is left out (the
// session did not negotiate it), while what the request says of its client
// — capabilities, client info, log level — stays, so that a server that
// reads them per request honours this client's and not the union
// mcpvisor declared at initialize; a trace context, a progress token stay.
// A legacy client's _meta reaches the server as it sent it.
func TestModernMetaToLegacyServer(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	const trace = `"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`
	metaOf := func(resp *http.Response, b []byte) map[string]json.RawMessage {
		t.Helper()
		var m *rpc.Message
		for _, r := range replyMessages(t, resp, b) {
			if r.IsResponse() {
				m = r
			}
		}
		if m == nil || m.Result == nil {
			t.Fatalf("response %s", b)
		}
		var res struct{ Content []struct{ Text string } }
		if err := json.Unmarshal(m.Result, &res); err != nil || len(res.Content) != 1 {
			t.Fatalf("result %s: %v", m.Result, err)
		}
		var meta map[string]json.RawMessage
		if err := json.Unmarshal([]byte(res.Content[0].Text), &meta); err != nil {
			t.Fatalf("the server's _meta %q: %v", res.Content[0].Text, err)
		}
		return meta
	}
	meta := strings.Replace(modernMeta(`{"sampling":{}}`), `"_meta":{`, `"_meta":{`+trace+`,"io.modelcontextprotocol/logLevel":"debug",`, 1)
	resp, b := postModern(t, srv.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__meta",`+meta+`}}`, "tools/call", "a__meta")
	got := metaOf(resp, b)
	if _, ok := got["io.modelcontextprotocol/protocolVersion"]; ok || len(got) != 4 || string(got["traceparent"]) == "" ||
		string(got["io.modelcontextprotocol/clientCapabilities"]) != `{"sampling":{}}` ||
		string(got["io.modelcontextprotocol/logLevel"]) != `"debug"` || got["io.modelcontextprotocol/clientInfo"] == nil {
		t.Errorf("the legacy server got _meta %v from a modern request, want all but the protocol version", got)
	}

	c := w.stdioClient(w.gw.Aggregate(), nil)
	res, err := c.CallTool(t.Context(), &mcp.CallToolParams{Name: "a__meta", Meta: mcp.Meta{"traceparent": "00-1", "io.modelcontextprotocol/x": "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	var legacy map[string]any
	if err := json.Unmarshal([]byte(textOf(t, res)), &legacy); err != nil || legacy["traceparent"] != "00-1" || legacy["io.modelcontextprotocol/x"] != "kept" {
		t.Errorf("a legacy client's _meta reached the server as %s (%v)", textOf(t, res), err)
	}
}

// A modern request's timeout and its client's going away end its call at
// the server (its context is the request's own: see forward), on the
// aggregated endpoint and on the server's.
func TestModernRequestTimeoutAndCancel(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE","requestTimeout":"300ms"}}`)
	for _, ep := range []Endpoint{w.gw.Aggregate(), w.gw.Single("a")} {
		h := NewStreamableHandler(ep, HTTPOptions{})
		srv := httptest.NewServer(h)
		name := "a__sleep"
		if ep != w.gw.Aggregate() {
			name = "sleep"
		}
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + name + `","arguments":{"ms":30000},` + modernMeta(`{}`) + `}}`
		_, b := postModern(t, srv.URL, body, "tools/call", name)
		if !strings.Contains(string(b), strconv.Itoa(rpc.RequestTimeout)) || !strings.Contains(string(b), "within 300ms") {
			t.Fatalf("%s past its timeout: %s", name, b)
		}
		if n := inFlight(w.gw); n != 0 {
			t.Fatalf("%d calls in flight after the timeout's answer", n)
		}

		// The client goes away: its call ends.
		ctx, cancel := context.WithCancel(t.Context())
		done := postModernAsync(ctx, srv.URL, body, "tools/call", name)
		waitFor(t, "the call in flight", func() bool { return inFlight(w.gw) == 1 })
		cancel()
		<-done
		waitFor(t, "the abandoned call ended", func() bool { return inFlight(w.gw) == 0 })
		h.Close()
		srv.Close()
	}
}

// inFlight counts the calls g has in flight at servers.
func inFlight(g *Gateway) int {
	g.reg.mu.Lock()
	defer g.reg.mu.Unlock()
	n := 0
	for _, l := range g.reg.calls {
		n += len(l)
	}
	return n
}

// A per-session server limited to one instance serves a modern client's
// requests one after another: server/discover runs no instance of its own
// (it is answered from the server's shared one), and each request's
// instance is no session's once its answer is sent; the next request
// takes its place as soon as it is gone.
func TestModernPerSessionRequestsWithinMaxInstances(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","sharing":"per-session","maxInstances":1}}`)
	srv := w.fleet.Get("x")
	h := NewStreamableHandler(w.gw.Single("x"), HTTPOptions{})
	hs := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); hs.Close() })
	_, b := postModern(t, hs.URL, `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+modernMeta(`{}`)+`}}`, "server/discover", "")
	if !bytes.Contains(b, []byte(`"supportedVersions"`)) {
		t.Fatalf("discover: %s", b)
	}
	if n := srv.Status().Sessions; n != 0 {
		t.Fatalf("server/discover left %d per-session instances", n)
	}
	for i := range 20 {
		resp, b := postModern(t, hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"r%d"},%s}}`, i+2, i, modernMeta(`{}`)), "tools/call", "echo")
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(fmt.Sprintf(`"r%d"`, i))) {
			t.Fatalf("call %d: HTTP %d %s", i, resp.StatusCode, b)
		}
		if n := srv.Status().Sessions; n != 0 {
			t.Fatalf("after call %d's answer %d per-session instances are counted", i, n)
		}
	}
}

// A modern tools/call whose Mcp-Param headers are checked against a tool
// list mcpvisor must learn first is bounded as every request is: by the
// server's start and request timeouts (a server that stopped answering
// before its list was learned gets the call an error, not a wait as long
// as the client's), and by the endpoint's Close (the request is tracked
// from before the lookup).
func TestModernToolListLookupIsBounded(t *testing.T) {
	t.Run("timeouts", func(t *testing.T) {
		w := newWorld(t, `{"x":{"command":"$FIXTURE","initTimeout":"1s","requestTimeout":"300ms"}}`)
		ep := w.gw.Single("x")
		s := ep.Open(noSink)
		defer ep.Close(s)
		// The server stops answering before anyone asked for its tools.
		if r := ep.Handle(t.Context(), s, &rpc.Message{ID: json.RawMessage(`1`), Method: "tools/call", Params: json.RawMessage(`{"name":"wedge","arguments":{}}`)}, noRelated); r.Error != nil {
			t.Fatalf("wedge: %s", r.Encode())
		}
		// The one line a wedged fixture may still read and answer.
		ep.Handle(t.Context(), s, &rpc.Message{ID: json.RawMessage(`2`), Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"x"}}`)}, noRelated)
		h := NewStreamableHandler(ep, HTTPOptions{})
		hs := httptest.NewServer(h)
		t.Cleanup(func() { h.Close(); hs.Close() })
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // against a hang: the bound is 1.3 s
		defer cancel()
		resp, b := postModernCtx(t, ctx, hs.URL, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},`+modernMeta(`{}`)+`}}`, "tools/call", "echo")
		m, err := rpc.Decode(bytes.TrimSpace(b))
		if err != nil || m.Error == nil || m.Error.Code != rpc.BackendUnavailable || !strings.Contains(m.Error.Message, "could not be learned") {
			t.Fatalf("HTTP %d %s (%v), want the error of a list that could not be learned", resp.StatusCode, b, err)
		}
	})
	t.Run("close", func(t *testing.T) {
		w := newWorld(t, `{"x":{"command":"$FIXTURE","env":{"FIXTURE_SLOW_START":"30s"}}}`)
		h := NewStreamableHandler(w.gw.Single("x"), HTTPOptions{})
		hs := httptest.NewServer(h)
		t.Cleanup(hs.Close)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := postModernAsync(ctx, hs.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},`+modernMeta(`{}`)+`}}`, "tools/call", "echo")
		waitFor(t, "the server to be starting for the lookup", func() bool { return w.fleet.Get("x").Status().State == "starting" })
		h.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a modern tools/call waiting for its tool list outlived the endpoint's Close")
		}
	})
}

// subscriptions/listen streams count under the sessions' bound, with the
// sessions: beyond it a listen (or an initialize) gets 503 LimitReached,
// and a listen that ends gives its place back.
func TestModernListensBoundedWithSessions(t *testing.T) {
	w := newWorld(t, twoFixtures)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{MaxSessions: 2})
	hs := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); hs.Close() })
	body := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + modernMeta(`{}`) + `}}`
	ctx1, end1 := context.WithCancel(t.Context())
	defer end1()
	first := sseEvents(t, ctx1, hs.URL, body, modernHeaders("subscriptions/listen", ""))
	nextEvent(t, first)
	second := sseEvents(t, t.Context(), hs.URL, body, modernHeaders("subscriptions/listen", ""))
	nextEvent(t, second)
	refused := func(what string, resp *http.Response, b []byte) {
		t.Helper()
		m, err := rpc.Decode(bytes.TrimSpace(b))
		if resp.StatusCode != http.StatusServiceUnavailable || err != nil || m.Error == nil || m.Error.Code != rpc.LimitReached {
			t.Fatalf("%s beyond the bound: HTTP %d %s", what, resp.StatusCode, b)
		}
	}
	// Bounded: a listen that were let in would stream until the test ends.
	ctx3, end3 := context.WithTimeout(t.Context(), 10*time.Second)
	defer end3()
	resp, b := postModernCtx(t, ctx3, hs.URL, body, "subscriptions/listen", "")
	refused("a third listen", resp, b)
	resp2, err := http.Post(hs.URL, "application/json", strings.NewReader(httpInit))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp2.Body)
	resp2.Body.Close()
	refused("an initialize", resp2, b)
	end1() // the first listener goes away: its place comes back
	waitFor(t, "the first listen's place to come back", func() bool { return h.limit.Open() == 1 })
	third := sseEvents(t, t.Context(), hs.URL, body, modernHeaders("subscriptions/listen", ""))
	if e := nextEvent(t, third); !strings.Contains(e, "notifications/subscriptions/acknowledged") {
		t.Fatalf("a listen in the place given back: %s", e)
	}
}

// maxInstances bounds a per-session server's processes, those still
// stopping included: a modern client's next request waits for the last
// one's process — slow to exit — to be gone, and never more than the
// bound (and the shared instance that learns the lists) run at once.
func TestModernPerSessionInstancesBoundProcesses(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","sharing":"per-session","maxInstances":1,
		"env":{"FIXTURE_IGNORE_EOF":"1","FIXTURE_IGNORE_TERM":"1"},"stop":{"stdinWait":"500ms","termWait":"500ms"}}}`)
	h := NewStreamableHandler(w.gw.Single("x"), HTTPOptions{})
	hs := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); hs.Close() })
	fixture := testserver.Build(t)
	servers := func() int { // the fixture processes (each runs under a shim of its own)
		n := 0
		for _, pid := range testserver.LiveProcesses(w.marker) {
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == fixture {
				n++
			}
		}
		return n
	}
	most := 0
	for i := range 3 {
		resp, b := postModern(t, hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"r%d"},%s}}`, i+1, i, modernMeta(`{}`)), "tools/call", "echo")
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(fmt.Sprintf(`"r%d"`, i))) {
			t.Fatalf("call %d: HTTP %d %s", i, resp.StatusCode, b)
		}
		most = max(most, servers())
	}
	if most > 2 {
		t.Fatalf("%d processes of a per-session server with maxInstances 1 ran at once (the bound, and the shared instance)", most)
	}
}
