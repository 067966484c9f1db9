package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

const allInputCaps = `{"elicitation":{},"sampling":{},"roots":{}}`

// inputRequests reads an input_required result's inputs, by key, and its
// requestState.
func inputRequests(t *testing.T, m *rpc.Message) (map[string]string, string) {
	t.Helper()
	var r struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string `json:"method"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || r.ResultType != "input_required" || r.RequestState == "" {
		t.Fatalf("want input_required: %s", m.Encode())
	}
	out := map[string]string{}
	for k, v := range r.InputRequests {
		out[k] = v.Method
	}
	return out, r.RequestState
}

// answersFor answers each input of reqs as a client would.
func answersFor(reqs map[string]string) string {
	var parts []string
	for k, method := range reqs {
		var v string
		switch method {
		case "elicitation/create":
			v = `{"action":"accept","content":{"name":"Ada"}}`
		case "sampling/createMessage":
			v = `{"role":"assistant","content":{"type":"text","text":"Hello"},"model":"m","stopReason":"endTurn"}`
		case "roots/list":
			v = `{"roots":[{"uri":"file:///r","name":"r"}]}`
		}
		parts = append(parts, mustJSONString(k)+":"+v)
	}
	return `{` + strings.Join(parts, ",") + `}`
}

// A legacy server that sends several requests at once while it serves one
// call (the go-sdk asks for every input of a round concurrently) has them
// all in one input_required round, not one round each — a client that
// answers a round in full gets the result on its first retry.
func TestHeldCallGathersConcurrentRequests(t *testing.T) {
	w := newMRTRWorld(t)
	const tool = "test_input_required_result_multiple_inputs"
	reqs, state := inputRequests(t, w.callTool("1", tool, `{}`, "", allInputCaps))
	methods := map[string]bool{}
	for _, m := range reqs {
		methods[m] = true
	}
	if len(reqs) != 3 || len(methods) != 3 {
		t.Fatalf("one round with the server's 3 requests, got %v", reqs)
	}
	m := w.callTool("2", tool, `{}`, `,"requestState":`+mustJSONString(state)+`,"inputResponses":`+answersFor(reqs), allInputCaps)
	if m.Error != nil || !strings.Contains(string(m.Result), `"resultType":"complete"`) || !strings.Contains(string(m.Result), "Ada") {
		t.Fatalf("final result: %s", m.Encode())
	}
	w.heldCalls(0)
}

// A round whose client does not come back keeps its call held at the
// server, which may still ask for more in it: until the call ends, a
// request the shared server sends while another client's call is in
// flight could be either's, and is refused — never handed to the other
// client. Once the first client answers, the server's requests are
// attributed again.
func TestMRTRUnansweredRoundKeepsRequestsApart(t *testing.T) {
	w := newMRTRWorld(t)
	key, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	w.heldCalls(1)
	const tool = "test_input_required_result_sampling"
	m := w.callTool("2", tool, `{}`, "", allInputCaps)
	if m.Error == nil || !strings.Contains(m.Error.Message, "cannot tell which") {
		t.Fatalf("while another client's round is open: %s", m.Encode())
	}
	m = w.call("3", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("the first client's result: %s", m.Encode())
	}
	w.heldCalls(0)
	reqs, state2 := inputRequests(t, w.callTool("4", tool, `{}`, "", allInputCaps))
	m = w.callTool("5", tool, `{}`, `,"requestState":`+mustJSONString(state2)+`,"inputResponses":`+answersFor(reqs), allInputCaps)
	if m.Error != nil || !strings.Contains(string(m.Result), `"resultType":"complete"`) {
		t.Fatalf("after the round ended: %s", m.Encode())
	}
}

// A held call whose round its client has may still be the cause of what
// its server sends next (the handler's requests may come apart): such a
// request, with another session's call in flight on the shared server,
// reaches neither.
func TestMRTRHeldCallsRequestNeverReachesAnother(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
	g := w.gw
	conn := &recConn{}
	srv := w.fleet.Get("x")
	sA := g.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
	hA := &heldCall{g: g, mreq: sA, changed: make(chan struct{}), req: &rpc.Message{}, rawCaps: json.RawMessage(`{"sampling":{}}`)}
	sA.held = hA
	cA := &call{from: sender{req: sA}, clientID: json.RawMessage(`1`), related: noSink, conn: conn}
	sinkB := &capSink{}
	sB := NewSession(sinkB)
	// B declared sampling: what keeps the request from it is that it may
	// be A's.
	stB := &sessState{calls: map[string]*call{}, outReqs: map[string]*outReq{}, caps: map[string]json.RawMessage{"sampling": json.RawMessage(`{}`)}}
	g.reg.mu.Lock()
	g.reg.sessions[sB] = stB
	g.reg.byKey[sB.key] = sB
	cB := &call{from: legacySender(sB), st: stB, clientID: json.RawMessage(`7`), related: sinkB, conn: conn}
	g.reg.calls[conn] = []*call{cA, cB}
	g.reg.mu.Unlock()
	g.Request(fleet.Source{Server: srv, Conn: conn}, &rpc.Message{ID: json.RawMessage(`"a-2"`), Method: "sampling/createMessage",
		Params: json.RawMessage(`{"messages":[{"role":"user","content":{"type":"text","text":"A's secret"}}]}`)})
	// Delivery is synchronous: had it reached B, B's sink has it now.
	if sinkB.n() != 0 {
		t.Fatalf("session B got a request of the server's that may be A's: %s", sinkB.got[0].Params)
	}
	hA.mu.Lock()
	n := len(hA.pending)
	hA.mu.Unlock()
	if n != 0 {
		t.Fatal("A got a request that may be B's")
	}
	waitFor(t, "the server's refusal", func() bool { return conn.errCount() == 1 })
}

// roots/list during a modern client's call is that call's input — unless
// a client lately told the server its roots changed, or a legacy client's
// request ended there lately: then the server may be asking on its own,
// for that client, and the request is no call's.
func TestMRTRRootsAfterRootsChangedAreNoCalls(t *testing.T) {
	for _, why := range []string{"", "roots changed", "a legacy request ended"} {
		changed := why != ""
		w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
		g := w.gw
		conn := &recConn{}
		srv := w.fleet.Get("x")
		sA := g.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
		hA := &heldCall{g: g, mreq: sA, changed: make(chan struct{}), req: &rpc.Message{}, rawCaps: json.RawMessage(`{"roots":{}}`)}
		sA.held = hA
		cA := &call{from: sender{req: sA}, clientID: json.RawMessage(`1`), related: noSink, conn: conn}
		g.reg.mu.Lock()
		g.reg.calls[conn] = []*call{cA}
		g.reg.mu.Unlock()
		switch why {
		case "roots changed":
			g.reg.rootsAsked(conn)
		case "a legacy request ended":
			g.reg.mu.Lock()
			g.reg.noteRecentAtLocked(conn, legacySender(NewSession(noSink)), time.Now())
			g.reg.mu.Unlock()
		}
		g.Request(fleet.Source{Server: srv, Conn: conn}, &rpc.Message{ID: json.RawMessage(`"r-1"`), Method: "roots/list"})
		hA.mu.Lock()
		n := len(hA.pending)
		hA.mu.Unlock()
		if changed && n != 0 {
			t.Fatalf("the server's own roots/list, after %s, became a modern call's input", why)
		}
		if !changed && n != 1 {
			t.Fatalf("roots/list during a modern call: %d inputs pending, want 1", n)
		}
		hA.stop(false)
	}
}

// recConn is a fleet.Conn that records the errors it is made to reply.
type recConn struct {
	nopConn
	mu   sync.Mutex
	errs []string
}

func (c *recConn) ReplyError(_ json.RawMessage, _ int, msg string) error {
	c.mu.Lock()
	c.errs = append(c.errs, msg)
	c.mu.Unlock()
	return nil
}

func (c *recConn) errCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.errs)
}

// capSink records what it is sent.
type capSink struct {
	mu  sync.Mutex
	got []*rpc.Message
}

func (s *capSink) Send(m *rpc.Message) error {
	s.mu.Lock()
	s.got = append(s.got, m)
	s.mu.Unlock()
	return nil
}

func (s *capSink) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// Clients whose calls are in flight at once on a shared legacy server
// that asks for input: a request nobody can attribute is refused to the
// server, and a round a client gets holds only requests its own call
// caused — half the clients call a tool whose sampling asks for the
// capital of France, half one whose asks for a greeting, and neither sees
// the other's.
func TestMRTRConcurrentRoundsStayApart(t *testing.T) {
	w := newMRTRWorld(t)
	tools := map[string]string{
		"test_input_required_result_sampling":        "capital of France",
		"test_input_required_result_multiple_inputs": "Generate a greeting",
	}
	names := []string{"test_input_required_result_sampling", "test_input_required_result_multiple_inputs"}
	var wg sync.WaitGroup
	results := make([]*rpc.Message, 12)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = w.callTool(`"c`+string(rune('a'+i))+`"`, names[i%2], `{}`, "", allInputCaps)
		}()
	}
	wg.Wait()
	rounds := 0
	for i, m := range results {
		if m.Error != nil {
			if !strings.Contains(m.Error.Message, "cannot tell which") {
				t.Fatalf("an error other than the refusal: %s", m.Encode())
			}
			continue
		}
		var r struct {
			InputRequests map[string]struct {
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			} `json:"inputRequests"`
		}
		if json.Unmarshal(m.Result, &r) != nil {
			t.Fatalf("result %s", m.Result)
		}
		if !strings.Contains(string(m.Result), `"input_required"`) {
			continue // the call ended (the server was refused)
		}
		rounds++
		seen := map[string]bool{}
		for _, in := range r.InputRequests {
			if seen[in.Method] {
				t.Fatalf("a round with two %s requests: %s", in.Method, m.Result)
			}
			seen[in.Method] = true
			if in.Method == "sampling/createMessage" && !strings.Contains(string(in.Params), tools[names[i%2]]) {
				t.Fatalf("%s got another call's sampling request: %s", names[i%2], in.Params)
			}
		}
	}
	t.Logf("%d of %d calls got a round", rounds, len(results))
}

// A modern client's call that the server has asked nothing of is bound to
// the client's request: the client going away cancels it at the server
// (the lease is released, nothing is held) — not at the hold bound, not
// at the server's own pace.
func TestModernCallEndsWithItsRequest(t *testing.T) {
	w := newMRTRWorldConfig(t, `{"x":{"command":"$FIXTURE","prefix":""}}`)
	ctx, cancel := context.WithCancel(t.Context())
	done := postModernAsync(ctx, w.url, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000},`+modernMeta(`{}`)+`}}`, "tools/call", "sleep")
	srv := w.fleet.Get("x")
	calls := func() int {
		w.gw.reg.mu.Lock()
		defer w.gw.reg.mu.Unlock()
		n := 0
		for _, list := range w.gw.reg.calls {
			n += len(list)
		}
		return n
	}
	waitFor(t, "the call in flight", func() bool { return calls() == 1 })
	cancel()
	<-done
	waitFor(t, "the call ended at the server", func() bool { return calls() == 0 && srv.Status().InFlight == 0 })
	if n := w.gw.HeldCalls(); n != 0 {
		t.Fatalf("%d calls held", n)
	}
}

// A server request that comes at once — before the call's answer is even
// waited for — still makes the round: the wait cannot miss it.
func TestMRTRRequestBeforeTheWait(t *testing.T) {
	w := newMRTRWorld(t)
	testHookStarted = func(h *heldCall) {
		waitFor(t, "the server's request", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.pending) > 0
		})
	}
	t.Cleanup(func() { testHookStarted = nil })
	got := make(chan *rpc.Message, 1)
	go func() { got <- w.call("1", "", `{"elicitation":{}}`) }()
	select {
	case m := <-got:
		if _, method, _ := inputRequired(t, m); method != "elicitation/create" {
			t.Fatalf("round asks for %s", method)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call waited for an answer its server will not give before its client's input")
	}
}

// A modern call whose server is still starting ends when its client goes
// away — the wait for the start is the client's request's, as the call
// is until the server asks for input — not when the start ends (here
// 30 s away).
func TestModernCallEndsWithItsRequestWhileTheServerStarts(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","env":{"FIXTURE_SLOW_START":"30s"}}}`)
	// The per-server endpoint reads a resource without a list to look it
	// up in: the request goes straight to the server's start.
	h := NewStreamableHandler(w.gw.Single("x"), HTTPOptions{})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	tracked := func() int {
		n := 0
		for i := range h.modern {
			h.modern[i].mu.Lock()
			n += len(h.modern[i].m)
			h.modern[i].mu.Unlock()
		}
		return n
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := postModernAsync(ctx, srv.URL, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"test://r",`+modernMeta(`{}`)+`}}`, "resources/read", "test://r")
	waitFor(t, "the request in the handler", func() bool { return tracked() == 1 })
	waitFor(t, "the server starting", func() bool { return w.fleet.Get("x").Status().State == "starting" })
	cancel()
	<-done
	waitFor(t, "the request's end, the server still starting", func() bool { return tracked() == 0 })
}

// A per-session server serves each modern request from an instance of its
// own — a modern client has no session — ended with the request (a held
// call's with its last round): so a round one client leaves open keeps
// nobody else's requests from being attributed.
func TestModernRequestsOwnPerSessionInstances(t *testing.T) {
	w := newMRTRWorldConfig(t, `{"c":{"command":"$CONFORMANCE","protocol":"legacy","prefix":"","sharing":"per-session"}}`)
	srv := w.fleet.Get("c")
	key, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	const tool = "test_input_required_result_sampling"
	for i := range 3 {
		id := strconv.Itoa(10 + i)
		reqs, st := inputRequests(t, w.callTool(id, tool, `{}`, "", allInputCaps))
		m := w.callTool(id, tool, `{}`, `,"requestState":`+mustJSONString(st)+`,"inputResponses":`+answersFor(reqs), allInputCaps)
		if m.Error != nil || !strings.Contains(string(m.Result), `"resultType":"complete"`) {
			t.Fatalf("call %d beside an open round: %s", i, m.Encode())
		}
	}
	// The finished requests' instances end; the held call's lives on.
	waitFor(t, "the finished requests' instances to end", func() bool { return srv.Status().Sessions == 1 })
	m := w.call("2", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("the held call's result: %s", m.Encode())
	}
	waitFor(t, "the held call's instance to end", func() bool { return srv.Status().Sessions == 0 })
}

// postModernAsync posts a modern request of method (named name) under ctx
// on a goroutine of its own; the channel closes when the client is done
// with it (answered, or ctx ended).
func postModernAsync(ctx context.Context, url, body, method, name string) <-chan struct{} {
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	for k, v := range modernHeaders(method, name) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", httpAccept)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	return done
}

// A round gathers the requests a server sends together, but not for
// ever: a server that keeps asking, each request within gatherQuiet of the
// last, has its round answered gatherMax after the first.
func TestMRTRGatherIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(nil)
		s := g.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
		h := &heldCall{g: g, mreq: s, changed: make(chan struct{}), req: &rpc.Message{}, rawCaps: json.RawMessage(`{"sampling":{}}`)}
		s.held = h
		c := &call{from: sender{req: s}, clientID: json.RawMessage(`1`), related: noSink}
		conn := &nopConn{}
		offer := func(i int) {
			if ok, why := h.offer(conn, &rpc.Message{ID: json.RawMessage(strconv.Itoa(i)), Method: "sampling/createMessage", Params: json.RawMessage(`{}`)}, c); !ok {
				t.Fatalf("offer %d refused: %s", i, why)
			}
		}
		start := time.Now()
		offer(0)
		done := make(chan *rpc.Message, 1)
		go func() { done <- h.round(t.Context(), json.RawMessage(`1`)) }()
		// One more every 20 ms (within gatherQuiet), 15 in all: 300 ms.
		for i := 1; i < maxPendingInputs; i++ {
			time.Sleep(20 * time.Millisecond)
			select {
			case m := <-done:
				if el := time.Since(start); el < gatherMax {
					t.Fatalf("the round was answered after %v, before gatherMax, with requests still coming: %s", el, m.Encode())
				}
				reqs, _ := inputRequests(t, m)
				if el := time.Since(start); el > gatherMax+20*time.Millisecond || len(reqs) == 0 {
					t.Fatalf("round after %v with %d inputs", el, len(reqs))
				}
				h.stop(false)
				return
			default:
			}
			offer(i)
		}
		t.Fatal("the round was still gathering after the server's 16th request")
	})
}

// A subscriptions/listen whose stream cannot take a notification (full)
// ends — answered — rather than go on without it: its client, listening
// again, fetches the list it would have missed.
func TestListenEndsWhenANotificationIsLost(t *testing.T) {
	g := New(nil)
	full := SinkFunc(func(m *rpc.Message) error {
		if m.Method == "notifications/subscriptions/acknowledged" {
			return nil
		}
		return ErrStreamFull
	})
	m := &rpc.Message{ID: json.RawMessage(`"l"`), Method: "subscriptions/listen", Params: json.RawMessage(`{"notifications":{"toolsListChanged":true}}`)}
	done := make(chan *rpc.Message, 1)
	go func() { done <- g.listen(t.Context(), nil, m, nil, full, nil) }()
	waitFor(t, "the listener", func() bool {
		g.listeners.mu.Lock()
		defer g.listeners.mu.Unlock()
		return len(g.listeners.m) == 1
	})
	g.tellListeners(nil, catalog.Tools.ListChanged())
	select {
	case r := <-done:
		if r.Error != nil || !strings.Contains(string(r.Result), `"complete"`) {
			t.Fatalf("the listen's end: %s", r.Encode())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the listen went on after losing a notification")
	}
}

// A server's request relayed to a session that is closing is refused at
// once — not kept, unanswered, for the client's answer bound.
func TestServerRequestToAClosedSessionRefused(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
	g := w.gw
	conn := &recConn{}
	sink := &capSink{}
	s := NewSession(sink)
	// It declared sampling: the request gets as far as the session.
	st := &sessState{calls: map[string]*call{}, outReqs: map[string]*outReq{}, closed: true, caps: map[string]json.RawMessage{"sampling": json.RawMessage(`{}`)}}
	c := &call{from: legacySender(s), st: st, clientID: json.RawMessage(`1`), related: sink, conn: conn}
	g.reg.mu.Lock()
	g.reg.sessions[s] = st
	g.reg.byKey[s.key] = s
	g.reg.calls[conn] = []*call{c}
	g.reg.mu.Unlock()
	g.Request(fleet.Source{Server: w.fleet.Get("x"), Conn: conn}, &rpc.Message{ID: json.RawMessage(`"s-1"`), Method: "sampling/createMessage", Params: json.RawMessage(`{}`)})
	waitFor(t, "the refusal", func() bool { return conn.errCount() == 1 })
	g.reg.mu.Lock()
	pending := len(g.reg.outReqs)
	g.reg.mu.Unlock()
	if pending != 0 || c.waiting.Load() != 0 || sink.n() != 0 {
		t.Fatalf("%d pending, waiting %d, %d sent to the closed session", pending, c.waiting.Load(), sink.n())
	}
	conn.mu.Lock()
	msg := conn.errs[0]
	conn.mu.Unlock()
	if !strings.Contains(msg, errSessionClosed.Error()) {
		t.Fatalf("the server was told %q, want the closed session's refusal", msg)
	}
}

// A request the server withdraws (notifications/cancelled) while its held
// call keeps it for the client's next round is not asked of the client,
// and no longer holds the call's request timeout; the server's other
// request still is.
func TestMRTRServerWithdrawsAHeldInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(nil)
		s := g.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
		h := &heldCall{g: g, mreq: s, changed: make(chan struct{}), req: &rpc.Message{}, rawCaps: json.RawMessage(`{"sampling":{}}`)}
		s.held = h
		conn, other := &recConn{}, &recConn{}
		c := &call{from: sender{req: s}, clientID: json.RawMessage(`1`), related: noSink, conn: conn}
		for _, id := range []string{`7`, `8`} {
			if ok, why := h.offer(conn, &rpc.Message{ID: json.RawMessage(id), Method: "sampling/createMessage", Params: json.RawMessage(`{"n":` + id + `}`)}, c); !ok {
				t.Fatal(why)
			}
		}
		// Another server's cancel of the same id is not this call's.
		g.Notification(fleet.Source{Conn: other}, &rpc.Message{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":7}`)})
		if n := c.waiting.Load(); n != 2 {
			t.Fatalf("another server's cancel changed the waits to %d", n)
		}
		g.Notification(fleet.Source{Conn: conn}, &rpc.Message{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":7}`)})
		if n := c.waiting.Load(); n != 1 {
			t.Fatalf("%d waits on the client after the server withdrew one of two, want 1", n)
		}
		reqs, _ := inputRequests(t, h.round(t.Context(), json.RawMessage(`1`)))
		if len(reqs) != 1 {
			t.Fatalf("the round asks %d inputs, want the one not withdrawn: %v", len(reqs), reqs)
		}
		if _, ok := reqs["mcpv-2"]; !ok { // the second offered: the server's 8
			t.Fatalf("the round asks %v, want the request the server did not withdraw", reqs)
		}
		h.end()
	})
}

// A modern client's subscriptions/listen naming a resource subscribes
// through a session of mcpvisor's own: its resources/subscribe ending on a
// shared legacy server is no legacy client's request, and does not make a
// modern call's roots/list there ambiguous (legacyLately).
func TestListenSubscriptionIsNoLegacyRequest(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
	g := w.gw
	srv := w.fleet.Get("x")
	ctx, cancel := context.WithCancel(t.Context())
	acked := make(chan struct{}, 1)
	sink := SinkFunc(func(m *rpc.Message) error {
		if m.Method == "notifications/subscriptions/acknowledged" {
			acked <- struct{}{}
		}
		return nil
	})
	done := make(chan *rpc.Message, 1)
	go func() {
		done <- g.listen(ctx, srv, &rpc.Message{ID: json.RawMessage(`1`), Method: "subscriptions/listen",
			Params: json.RawMessage(`{"notifications":{"resourceSubscriptions":["test://a"]}}`)}, nil, sink,
			func(context.Context, string) *fleet.Server { return srv })
	}()
	select {
	case <-acked:
	case <-time.After(10 * time.Second):
		t.Fatal("no ack")
	}
	l, ok := srv.Peek("")
	if !ok {
		t.Fatal("no shared instance")
	}
	conn := l.Conn()
	l.Release()
	if g.reg.legacyLately(conn) {
		t.Errorf("a modern listen's own subscription marked the server as lately used by a legacy session: a modern call's roots/list is refused for %v", g.reg.linger)
	}
	cancel()
	<-done
}

// lockProbe is an Activity that records whether the gateway's lock, or
// its held call's, was held when it was called.
type lockProbe struct {
	g             *Gateway
	h             *heldCall
	begins, ends  int
	underGateLock bool
}

func (a *lockProbe) probe() {
	for _, mu := range []*sync.Mutex{&a.g.reg.mu, &a.g.held.mu, &a.h.mu} {
		if mu.TryLock() {
			mu.Unlock()
		} else {
			a.underGateLock = true
		}
	}
}
func (a *lockProbe) Begin() { a.begins++; a.probe() }
func (a *lockProbe) End()   { a.ends++; a.probe() }

// A front's Activity is told of a held call outside the gateway's locks
// (it is the caller's code: one that asks the gateway anything would
// deadlock under them), once as the call is held and once as it ends.
func TestHeldFrontActivityOutsideGatewayLocks(t *testing.T) {
	g := New(nil)
	act := &lockProbe{g: g}
	front := &heldFront{act: act}
	s := g.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
	h := &heldCall{g: g, mreq: s, changed: make(chan struct{}), req: &rpc.Message{}, rawCaps: json.RawMessage(`{}`), front: front}
	act.h = h
	s.held = h
	// Escalated twice: the second finds the call held already, and the
	// front must still hear of it once.
	first := h.escalate()
	second := h.escalate()
	if !first || !second {
		t.Fatal("not held")
	}
	h.end()
	if act.begins != 1 || act.ends != 1 || act.underGateLock {
		t.Fatalf("Begin %d, End %d times; under the gateway's or the call's lock: %v", act.begins, act.ends, act.underGateLock)
	}
}

// A round is never an input_required result that asks for nothing: with
// every input withdrawn since the round looked, missing has no answer and
// the round waits on.
func TestMRTRNoEmptyRound(t *testing.T) {
	g := New(nil)
	h, c := newHeld(g, &recConn{})
	defer h.stop(false)
	if ok, why := h.offer(c.conn, &rpc.Message{ID: json.RawMessage(`7`), Method: "sampling/createMessage", Params: json.RawMessage(`{}`)}, c); !ok {
		t.Fatal(why)
	}
	if !h.withdraw(c.conn, json.RawMessage(`7`)) {
		t.Fatal("not withdrawn")
	}
	if r := h.missing(json.RawMessage(`1`)); r != nil {
		t.Fatalf("a round with nothing to ask: %s", r.Encode())
	}
}
