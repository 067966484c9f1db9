package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// mrtrWorld serves the conformance server — a legacy backend, which asks
// for elicitation with a server request — to modern clients over HTTP.
type mrtrWorld struct {
	*world
	url string
	h   *StreamableHandler
}

func newMRTRWorld(t *testing.T) *mrtrWorld {
	return newMRTRWorldConfig(t, `{"c":{"command":"$CONFORMANCE","protocol":"legacy","prefix":""}}`)
}

func newMRTRWorldConfig(t *testing.T, servers string) *mrtrWorld {
	w := newWorld(t, servers)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	return &mrtrWorld{world: w, url: srv.URL, h: h}
}

// call posts a modern tools/call of test_elicitation with extra params
// members and the client capabilities caps, and decodes the answer (the
// last message of an event stream).
func (w *mrtrWorld) call(id, extra, caps string) *rpc.Message {
	w.t.Helper()
	return w.callTool(id, "test_elicitation", `{"message":"who?"}`, extra, caps)
}

// callTool is call for any tool and arguments.
func (w *mrtrWorld) callTool(id, tool, args, extra, caps string) *rpc.Message {
	w.t.Helper()
	body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":` + mustJSONString(tool) + `,"arguments":` + args + extra + `,` + modernMeta(caps) + `}}`
	resp, b := postModern(w.t, w.url, body, "tools/call", tool)
	ms := replyMessages(w.t, resp, b)
	if len(ms) == 0 {
		w.t.Fatalf("reply %q: no message", b)
	}
	m := ms[len(ms)-1]
	if string(m.ID) != id {
		w.t.Fatalf("reply id %s, want %s", m.ID, id)
	}
	return m
}

// postModern posts body, a modern request of method (named name), with the
// headers a modern client sends, and returns the reply and its whole body.
func postModern(t testing.TB, url, body, method, name string) (*http.Response, []byte) {
	t.Helper()
	return postModernCtx(t, context.Background(), url, body, method, name)
}

// postModernCtx is postModern within ctx (an answer that does not come
// within it is an error, with the body read so far).
func postModernCtx(t testing.TB, ctx context.Context, url, body, method, name string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	for k, v := range modernHeaders(method, name) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err) // not Fatal: callers may run on goroutines of their own
		return &http.Response{Header: http.Header{}}, nil
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// inputRequired reads an input_required result: its one input's key and
// method, and the requestState.
func inputRequired(t *testing.T, m *rpc.Message) (key, method, state string) {
	t.Helper()
	reqs, state := inputRequests(t, m)
	if len(reqs) != 1 {
		t.Fatalf("want input_required with one input: %s", m.Encode())
	}
	for k, v := range reqs {
		key, method = k, v
	}
	return key, method, state
}

func (w *mrtrWorld) heldCalls(want int) {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.gw.HeldCalls() != want {
		if time.Now().After(deadline) {
			w.t.Fatalf("%d calls held, want %d", w.gw.HeldCalls(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const acceptUser = `{"action":"accept","content":{"username":"ada"}}`

// A legacy server's elicitation during a modern client's call becomes an
// input_required round; the retry with inputResponses answers the server,
// and its response is the call's result. Retries without the answer are
// asked again; nothing stays held.
func TestHeldCallElicitation(t *testing.T) {
	w := newMRTRWorld(t)
	key, method, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	if method != "elicitation/create" || !strings.HasPrefix(state, statePrefix) {
		t.Fatalf("input %s %s, state %q", key, method, state)
	}
	w.heldCalls(1)
	if n := w.gw.HeldCallsByServer()["c"]; n != 1 {
		t.Fatalf("held calls of c: %d", n)
	}

	// A retry that brings no answer is asked again for the same input.
	key2, _, state2 := inputRequired(t, w.call("2", `,"requestState":`+mustJSONString(state), `{"elicitation":{}}`))
	if key2 != key {
		t.Fatalf("asked again for %q, want %q", key2, key)
	}

	m := w.call("3", `,"requestState":`+mustJSONString(state2)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), `"resultType":"complete"`) || !strings.Contains(string(m.Result), "action=accept") || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("final result: %s", m.Encode())
	}
	w.heldCalls(0)

	// The state of an ended call is refused.
	if m := w.call("4", `,"requestState":`+mustJSONString(state2)+`,"inputResponses":{}`, `{"elicitation":{}}`); m.Error == nil || m.Error.Code != rpc.InvalidParams || !strings.Contains(m.Error.Message, "ended") {
		t.Fatalf("reused state: %s", m.Encode())
	}
}

// Forged, altered and misapplied states are refused and reach no server;
// the held call is not disturbed by them.
func TestHeldCallRefusesBadState(t *testing.T) {
	w := newMRTRWorld(t)
	_, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	body, sig, _ := strings.Cut(strings.TrimPrefix(state, statePrefix), ".")
	flipped := []byte(body)
	flipped[len(flipped)/2] ^= 1
	for name, bad := range map[string]string{
		"forged":  statePrefix + "eyJoIjoieCJ9." + sig,
		"altered": statePrefix + string(flipped) + "." + sig,
		"no mac":  statePrefix + body,
	} {
		if m := w.call("2", `,"requestState":`+mustJSONString(bad)+`,"inputResponses":{}`, `{"elicitation":{}}`); m.Error == nil || m.Error.Code != rpc.InvalidParams || !strings.Contains(m.Error.Message, "verification") {
			t.Fatalf("%s state: %s", name, m.Encode())
		}
	}
	// The state of this call, on a call with other arguments.
	other := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test_elicitation","arguments":{"message":"someone else"},"requestState":` + mustJSONString(state) + `,` + modernMeta(`{"elicitation":{}}`) + `}}`
	req, _ := http.NewRequest("POST", w.url, strings.NewReader(other))
	for k, v := range modernHeaders("tools/call", "test_elicitation") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeBody(t, resp)
	if m.Error == nil || m.Error.Code != rpc.InvalidParams || !strings.Contains(m.Error.Message, "another request") {
		t.Fatalf("state on other arguments: %s", m.Encode())
	}
	w.heldCalls(1)
}

// A client that does not declare elicitation is never asked: it gets
// MissingRequiredClientCapabilityError naming the capability, the server
// a refusal, and nothing stays held — whether it declared no input
// capability at all (its call is never held) or another one (held until
// the server asked).
func TestHeldCallUndeclaredCapability(t *testing.T) {
	w := newMRTRWorld(t)
	for i, caps := range []string{`{}`, `{"sampling":{},"roots":{}}`} {
		m := w.call(strconv.Itoa(i+1), "", caps)
		if m.Error == nil || m.Error.Code != rpc.MissingClientCapability || !strings.Contains(string(m.Error.Data), `"requiredCapabilities":{"elicitation":{}}`) {
			t.Fatalf("call declaring %s: %s", caps, m.Encode())
		}
		w.heldCalls(0)
	}
}

// While the client owes its input the call's request timeout does not
// run: an answer that comes after more than the timeout completes it.
func TestHeldCallSlowAnswer(t *testing.T) {
	w := newMRTRWorldConfig(t, `{"c":{"command":"$CONFORMANCE","protocol":"legacy","prefix":"","requestTimeout":"500ms"}}`)
	// Started first: the timeout covers a start too, and a loaded
	// machine may take longer than 500 ms to start a Node server.
	if err := w.fleet.Get("c").Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	key, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	time.Sleep(time.Second) // two request timeouts
	m := w.call("2", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("a slow answer: %s", m.Encode())
	}
	w.heldCalls(0)
}

// Two retries with the same state: one gets the result, the other an
// error at once — none waits for an answer that went to the other.
func TestHeldCallDuplicateRetry(t *testing.T) {
	w := newMRTRWorld(t)
	key, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	retry := `,"requestState":` + mustJSONString(state) + `,"inputResponses":{` + mustJSONString(key) + `:` + acceptUser + `}`
	got := make(chan *rpc.Message, 2)
	for _, id := range []string{"2", "3"} {
		go func() { got <- w.call(id, retry, `{"elicitation":{}}`) }()
	}
	var results, errs int
	for range 2 {
		select {
		case m := <-got:
			if m.Error != nil {
				errs++
			} else if strings.Contains(string(m.Result), "ada") {
				results++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a duplicate retry waited for good")
		}
	}
	if results != 1 || errs != 1 {
		t.Fatalf("%d results and %d errors, want one of each", results, errs)
	}
	w.heldCalls(0)
}

// A held call that ended takes no more input, and leaves nothing behind.
func TestMRTRHeldCallEndedTakesNoInput(t *testing.T) {
	g := New(nil)
	s := g.newModernReq(nil, nil, &Modern{Version: modernVersion, Caps: json.RawMessage(`{"elicitation":{}}`)}, nil)
	s.msg = &rpc.Message{Method: "tools/call", Params: json.RawMessage(`{"name":"x"}`)}
	h := &heldCall{g: g, req: s.msg, rawCaps: s.mo.Caps, mreq: s, cancel: func(error) {}, changed: make(chan struct{})}
	h.end()
	if ok, _ := h.offer(nil, &rpc.Message{ID: json.RawMessage("1"), Method: "elicitation/create"}, &call{}); ok {
		t.Fatal("an ended call took input")
	}
	if n := g.HeldCalls(); n != 0 {
		t.Fatalf("%d held calls after the end", n)
	}
}

// A client that never retries: its call is released at the hold bound,
// the server's request gets an error, and the state is refused after.
func TestHeldCallExpires(t *testing.T) {
	w := newMRTRWorldConfig(t, `{"c":{"command":"$CONFORMANCE","protocol":"legacy","prefix":"","requestTimeout":"1s"}}`)
	w.gw.SetHoldTimeout(300 * time.Millisecond)
	_, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	w.heldCalls(1)
	w.heldCalls(0) // within 5 s
	if m := w.call("2", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{}`, `{"elicitation":{}}`); m.Error == nil || m.Error.Code != rpc.InvalidParams {
		t.Fatalf("retry after the hold: %s", m.Encode())
	}
	// The server is free: once the abandoned call's request timeout has
	// passed (until then a request of the server's may be the abandoned
	// call's, and none is attributed), a new call is asked and answered.
	time.Sleep(1200 * time.Millisecond)
	key, _, state := inputRequired(t, w.call("3", "", `{"elicitation":{}}`))
	if m := w.call("4", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`); m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("a call after the expiry: %s", m.Encode())
	}
}

// A call stopped because its client lacks a capability the server asked
// for keeps no wait on its request timeout: the server's call is cut off
// at that timeout, not left to run as long as the server likes.
func TestMRTRStoppedCallKeepsNoWait(t *testing.T) {
	g := New(nil)
	c := &call{}
	s := g.newModernReq(nil, nil, &Modern{Version: modernVersion, Caps: json.RawMessage(`{"elicitation":{}}`)}, nil)
	s.msg = &rpc.Message{Method: "tools/call", Params: json.RawMessage(`{"name":"x"}`)}
	h := &heldCall{g: g, req: s.msg, rawCaps: s.mo.Caps, mreq: s, cancel: func(error) {}, changed: make(chan struct{})}
	s.held = h
	for _, m := range []string{"elicitation/create", "elicitation/create"} {
		if ok, why := h.offer(&nopConn{}, &rpc.Message{ID: json.RawMessage("1"), Method: m}, c); !ok {
			t.Fatalf("offer: %s", why)
		}
	}
	if n := c.waiting.Load(); n != 2 {
		t.Fatalf("waiting %d after two inputs", n)
	}
	h.stop(false)
	if n := c.waiting.Load(); n != 0 {
		t.Fatalf("waiting %d after the call stopped: its timeout would never run", n)
	}
}

// Retries with the same state: only the latest is answered; an earlier
// one still waiting is told at once that a later retry took its place,
// and its client going away does not end the call for the latest.
func TestMRTRLatestRetryIsAnswered(t *testing.T) {
	g := New(nil)
	s := g.newModernReq(nil, nil, &Modern{Version: modernVersion, Caps: json.RawMessage(`{}`)}, nil)
	h := &heldCall{g: g, mreq: s, cancel: func(error) {}, changed: make(chan struct{})}
	s.held = h
	first := make(chan *rpc.Message, 1)
	ctx1, cancel1 := context.WithCancel(context.Background())
	go func() { first <- h.round(ctx1, json.RawMessage("1")) }()
	waitFor(t, "the first round to wait", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.rounds == 1
	})
	second := make(chan *rpc.Message, 1)
	go func() { second <- h.round(context.Background(), json.RawMessage("2")) }()
	select {
	case m := <-first:
		if m.Error == nil || !strings.Contains(m.Error.Message, "later retry") {
			t.Fatalf("the earlier round: %s", m.Encode())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the earlier round still waits after a later one began")
	}
	cancel1() // the earlier client goes away: nothing changes for the later one
	h.mu.Lock()
	h.final = &rpc.Message{Result: json.RawMessage(`{"content":[]}`)}
	h.signalLocked()
	h.mu.Unlock()
	select {
	case m := <-second:
		if string(m.ID) != "2" || m.Error != nil {
			t.Fatalf("the latest round: %s", m.Encode())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the latest round did not get the answer")
	}
}

// A state is good for the next round on the endpoint that made it only:
// one of an earlier round, or shown on another endpoint, is refused, and
// the call goes on with the latest.
func TestMRTRStateBoundToRoundAndEndpoint(t *testing.T) {
	w := newMRTRWorld(t)
	single := NewStreamableHandler(w.gw.Single("c"), HTTPOptions{})
	singleSrv := httptest.NewServer(single)
	defer singleSrv.Close()
	defer single.Close()
	key, _, state1 := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	_, _, state2 := inputRequired(t, w.call("2", `,"requestState":`+mustJSONString(state1), `{"elicitation":{}}`))
	if m := w.call("3", `,"requestState":`+mustJSONString(state1)+`,"inputResponses":{}`, `{"elicitation":{}}`); m.Error == nil || !strings.Contains(m.Error.Message, "earlier round") {
		t.Fatalf("a state of an earlier round: %s", m.Encode())
	}
	elsewhere := &mrtrWorld{world: w.world, url: singleSrv.URL}
	if m := elsewhere.call("4", `,"requestState":`+mustJSONString(state2)+`,"inputResponses":{}`, `{"elicitation":{}}`); m.Error == nil || !strings.Contains(m.Error.Message, "another request") {
		t.Fatalf("a state shown on another endpoint: %s", m.Encode())
	}
	m := w.call("5", `,"requestState":`+mustJSONString(state2)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("the latest state: %s", m.Encode())
	}
}

// A tool whose schema mirrors a parameter into Mcp-Param-Region: the
// header must come with the value and match it (Base64 sentinel decoded);
// a missing, different or ill-formed header is a HeaderMismatch — on the
// aggregated endpoint and on the server's own.
func TestModernParamHeaders(t *testing.T) {
	w := newMRTRWorld(t)
	single := NewStreamableHandler(w.gw.Single("c"), HTTPOptions{})
	singleSrv := httptest.NewServer(single)
	t.Cleanup(func() {
		single.Close()
		singleSrv.Close()
	})
	for _, url := range []string{w.url, singleSrv.URL} {
		checkParamHeaders(t, url)
	}
}

func checkParamHeaders(t *testing.T, url string) {
	call := func(id, region string, hdr map[string]string) *rpc.Message {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"test_x_mcp_header","arguments":{"region":` + mustJSONString(region) + `},` + modernMeta(`{}`) + `}}`
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		for k, v := range modernHeaders("tools/call", "test_x_mcp_header") {
			req.Header.Set(k, v)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return decodeBody(t, resp)
	}
	if m := call("1", "us-west1", map[string]string{"Mcp-Param-Region": "us-west1"}); m.Error != nil {
		t.Fatalf("matching header: %s", m.Encode())
	}
	if m := call("2", "Hello, 世界", map[string]string{"Mcp-Param-Region": "=?base64?" + base64.StdEncoding.EncodeToString([]byte("Hello, 世界")) + "?="}); m.Error != nil {
		t.Fatalf("Base64 header: %s", m.Encode())
	}
	for name, hdr := range map[string]map[string]string{
		"missing":    nil,
		"different":  {"Mcp-Param-Region": "eu-west1"},
		"bad Base64": {"Mcp-Param-Region": "=?base64?!!?="},
	} {
		if m := call("3", "us-west1", hdr); m.Error == nil || m.Error.Code != rpc.HeaderMismatch || !strings.Contains(m.Error.Message, "Mcp-Param-Region") {
			t.Fatalf("%s header: %s", name, m.Encode())
		}
	}
}

// A list of servers that all announce their changes is fresh for listTTL;
// mcpvisor tells listeners of a change as it happens.
func TestModernListTTL(t *testing.T) {
	w := newMRTRWorld(t)
	_, b := postModern(t, w.url, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+modernMeta(`{}`)+`}}`, "tools/list", "")
	if !strings.Contains(string(b), `"ttlMs":60000`) || !strings.Contains(string(b), `"cacheScope":"public"`) {
		t.Fatalf("tools/list %.300s", b)
	}
}

// A held call whose server asked for input the client did not declare is
// answered MissingRequiredClientCapability at once; a server that then
// does not end its call (with no request timeout to end it) is cancelled
// after refusedGrace: nothing stays leased, in flight or held.
func TestMRTRRefusedServerCallIsCancelledAfterGrace(t *testing.T) {
	defer func(g time.Duration) { refusedGrace = g }(refusedGrace)
	refusedGrace = 200 * time.Millisecond
	w := newWorld(t, `{"x":{"command":"$FIXTURE","requestTimeout":"0"}}`)
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	hs := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); hs.Close() })
	_, b := postModern(t, hs.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x__sample","arguments":{"prompt":"p","hangOnRefusal":true},`+modernMeta(`{"elicitation":{}}`)+`}}`, "tools/call", "x__sample")
	m, err := rpc.Decode(bytes.TrimSpace(b))
	if err != nil || m.Error == nil || m.Error.Code != rpc.MissingClientCapability {
		t.Fatalf("%s (%v), want MissingRequiredClientCapability", b, err)
	}
	srv := w.fleet.Get("x")
	waitFor(t, "the refused server call to be cancelled", func() bool { return srv.Status().InFlight == 0 && w.gw.HeldCalls() == 0 })
}

// A call held for a modern client's retry ends with the HTTP front its
// client would retry on: at Close the server's call is cancelled and
// nothing stays held.
func TestMRTRHeldCallEndsAtHandlerClose(t *testing.T) {
	w := newMRTRWorld(t)
	inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	w.h.Close()
	if n := w.gw.HeldCalls(); n != 0 {
		t.Fatalf("%d calls held after the handler closed", n)
	}
	srv := w.fleet.Get("c")
	waitFor(t, "the held call's server call to end", func() bool { return srv.Status().InFlight == 0 })
}

// countActivity counts what an Activity is told of.
type countActivity struct{ begins, ends atomic.Int32 }

func (a *countActivity) Begin()          { a.begins.Add(1) }
func (a *countActivity) End()            { a.ends.Add(1) }
func (a *countActivity) inFlight() int32 { return a.begins.Load() - a.ends.Load() }

// Over stdio, a call held for the client's retry is the client's activity
// (an idle exit waits for it) until it ends — answered, or with the
// connection, which ends it.
func TestMRTRStdioHeldCallIsActivityAndEndsWithTheConnection(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","protocol":"legacy","prefix":""}}`)
	act := &countActivity{}
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- StdioOptions{Activity: act}.Serve(context.Background(), w.gw.Aggregate(), c2sR, s2cW)
		s2cW.Close()
	}()
	lines := bufio.NewScanner(s2cR)
	lines.Buffer(nil, 1<<20)
	next := func() *rpc.Message {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("no answer: %v", lines.Err())
		}
		m, err := rpc.Decode(lines.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	send := func(id, extra string) {
		_, _ = io.WriteString(c2sW, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"test_elicitation","arguments":{"message":"who?"}`+extra+`,`+modernMeta(`{"elicitation":{}}`)+`}}`+"\n")
	}
	send("1", "")
	key, _, state := inputRequired(t, next())
	waitFor(t, "the request's own end", func() bool { return act.ends.Load() >= 1 })
	if n := act.inFlight(); n != 1 {
		t.Fatalf("%d requests in flight for the activity while a call is held, want 1", n)
	}
	send("2", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`)
	if m := next(); m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("the retry: %s", m.Encode())
	}
	waitFor(t, "the activity to end with the answered call", func() bool { return act.inFlight() == 0 })
	send("3", "")
	inputRequired(t, next())
	if n := w.gw.HeldCalls(); n != 1 {
		t.Fatalf("%d calls held, want 1", n)
	}
	c2sW.Close() // the client goes away without retrying
	<-done       // Serve returns (the client's EOF)
	if n, a := w.gw.HeldCalls(), act.inFlight(); n != 0 || a != 0 {
		t.Fatalf("after the connection ended: %d calls held, activity %d", n, a)
	}
}
