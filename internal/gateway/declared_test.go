package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A server's request reaches only a client that declared the capability
// it asks for. The fixture with -ask-roots asks roots/list before the
// first call of each process and answers no call until it is answered,
// as some popular servers do after every start; its sample tool asks for
// sampling during a call. A 2025-11-25 client that declared neither is
// asked nothing, and the server gets Method not found at once, as the
// client's SDK would answer: no call waits on a request its client cannot
// answer — on both endpoints, for a shared server before and after a
// wake, and for a per-session one. A client that declared roots is asked,
// and its answer reaches the server. A per-session instance is declared
// exactly its client's capabilities; a shared one, all mcpvisor carries.
func TestServerRequestsOnlyToDeclaringClients(t *testing.T) {
	const (
		shared     = `{"x":{"command":"$FIXTURE","env":{"FIXTURE_ASK_ROOTS":"1"}}}`
		perSession = `{"x":{"command":"$FIXTURE","env":{"FIXTURE_ASK_ROOTS":"1"},"sharing":"per-session"}}`
		// The bound of a call here; a request its client never answers
		// would hold it for inputWait (5 minutes).
		callBound = 30 * time.Second
	)
	// What the server was declared: a shared server all mcpvisor
	// carries; a per-session one exactly its client's capabilities.
	const own = `declared: {\"roots\":{\"listChanged\":true},\"sampling\":{},\"elicitation\":{}}`
	for _, tc := range []struct {
		name    string
		servers string
		single  bool
		wake    bool
		// declaredNone and declaredRoots are what the server reports it
		// was declared, with the client declaring nothing or roots.
		declaredNone, declaredRoots string
	}{
		{"/mcp shared", shared, false, true, own, own},
		{"/servers/x/mcp shared", shared, true, true, own, own},
		{"/mcp per-session", perSession, false, false, `declared: {}`, `declared: {\"roots\":{}}`},
		{"/servers/x/mcp per-session", perSession, true, false, `declared: {}`, `declared: {\"roots\":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint := func(w *world) (Endpoint, string) {
				if tc.single {
					return w.gw.Single("x"), ""
				}
				return w.gw.Aggregate(), "x__"
			}
			// try calls tool; safe in any goroutine (it reports, not fails).
			try := func(ep Endpoint, prefix string, s *Session, id int, tool string, args map[string]any, rel Sink) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), callBound)
				defer cancel()
				resp := ep.Handle(ctx, s, request(id, "tools/call", map[string]any{"name": prefix + tool, "arguments": args}), rel)
				if ctx.Err() != nil {
					return "", fmt.Errorf("%s waited %v: a request the client cannot answer held it", tool, callBound)
				}
				if resp == nil || resp.Error != nil {
					return "", fmt.Errorf("%s: %v", tool, resp)
				}
				return string(resp.Result), nil
			}
			call := func(t *testing.T, ep Endpoint, prefix string, s *Session, id int, tool string, args map[string]any, rel Sink) string {
				t.Helper()
				got, err := try(ep, prefix, s, id, tool, args, rel)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}

			t.Run("declared nothing", func(t *testing.T) {
				w := newWorld(t, tc.servers)
				ep, prefix := endpoint(w)
				out, rel := newRecorder(), newRecorder()
				s := openDeclaring(t, ep, out, `{}`)
				defer ep.Close(s)
				rounds := 1
				if tc.wake {
					rounds = 2
				}
				for round := range rounds {
					if round == 1 {
						// Asleep, then woken by the next call: the new
						// process asks again.
						ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
						err := w.fleet.Get("x").Sleep(ctx)
						cancel()
						if err != nil {
							t.Fatal(err)
						}
					}
					if got := call(t, ep, prefix, s, 10*round+1, "echo", map[string]any{"text": "a"}, rel); !strings.Contains(got, `"text":"a"`) {
						t.Fatalf("round %d: echo: %s", round, got)
					}
					got := call(t, ep, prefix, s, 10*round+2, "roots", map[string]any{}, rel)
					if !strings.Contains(got, "roots refused: -32601") || !strings.Contains(got, "did not declare the roots capability") {
						t.Errorf("round %d: the server got %s, want Method not found naming the capability", round, got)
					}
					if !strings.Contains(got, tc.declaredNone) {
						t.Errorf("round %d: the server reports %s, want %s", round, got, tc.declaredNone)
					}
					got = call(t, ep, prefix, s, 10*round+3, "sample", map[string]any{"prompt": "p"}, rel)
					if !strings.Contains(got, "refused") || !strings.Contains(got, "-32601") {
						t.Errorf("round %d: sample: %s, want the client's refusal (Method not found)", round, got)
					}
				}
				for _, r := range []*recorder{out, rel} {
					if n := r.count("roots/list") + r.count("sampling/createMessage"); n != 0 {
						t.Errorf("the client that declared nothing was sent %d server requests: %v", n, r.methods())
					}
				}
			})

			t.Run("declared roots", func(t *testing.T) {
				w := newWorld(t, tc.servers)
				ep, prefix := endpoint(w)
				out, rel := newRecorder(), newRecorder()
				s := openDeclaring(t, ep, out, `{"roots":{}}`)
				defer ep.Close(s)
				type result struct {
					got string
					err error
				}
				done := make(chan result, 1)
				go func() {
					got, err := try(ep, prefix, s, 1, "echo", map[string]any{"text": "a"}, rel)
					done <- result{got, err}
				}()
				req := rel.next(t, "roots/list", 20*time.Second)
				answer := &rpc.Message{ID: req.ID, Result: json.RawMessage(`{"roots":[{"uri":"file:///work"}]}`)}
				ep.Handle(t.Context(), s, answer, newRecorder())
				if r := <-done; r.err != nil || !strings.Contains(r.got, `"text":"a"`) {
					t.Fatalf("echo: %s %v", r.got, r.err)
				}
				if got := call(t, ep, prefix, s, 2, "roots", map[string]any{}, rel); !strings.Contains(got, `file:///work`) || !strings.Contains(got, tc.declaredRoots) {
					t.Errorf("the server got %s, want the client's roots and %s", got, tc.declaredRoots)
				}
				// Roots, not sampling: the server's sampling request is
				// answered for it.
				if got := call(t, ep, prefix, s, 3, "sample", map[string]any{"prompt": "p"}, rel); !strings.Contains(got, "-32601") {
					t.Errorf("sample: %s, want Method not found", got)
				}
				if n := rel.count("sampling/createMessage") + out.count("sampling/createMessage"); n != 0 {
					t.Errorf("sampling reached a client that declared roots only (%d)", n)
				}
			})
		})
	}
}

// A 2026-07-28 client's held call whose client declared elicitation only:
// the server's sampling request is answered Method not found for it, and
// the call records the missing capability for its client.
func TestHeldCallUndeclaredIsMethodNotFound(t *testing.T) {
	g := New(nil)
	conn := &recConn{}
	s := g.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
	h := &heldCall{g: g, mreq: s, changed: make(chan struct{}), req: &rpc.Message{}, rawCaps: json.RawMessage(`{"elicitation":{}}`)}
	s.held = h
	t.Cleanup(func() { h.stop(false) })
	c := &call{from: sender{req: s}, clientID: json.RawMessage(`1`), related: noSink, conn: conn}
	g.reg.mu.Lock()
	g.reg.calls[conn] = []*call{c}
	g.reg.mu.Unlock()
	g.Request(fleet.Source{Conn: conn}, samplingRequest(1))
	waitFor(t, "the server's answer", func() bool { return conn.errCount() == 1 })
	conn.mu.Lock()
	msg := conn.errs[0]
	conn.mu.Unlock()
	if !strings.HasPrefix(msg, "Method not found: sampling/createMessage") {
		t.Errorf("the server was told %q, want Method not found", msg)
	}
	h.mu.Lock()
	need := h.needCap
	h.mu.Unlock()
	if need != "sampling" {
		t.Errorf("the call records %q as missing, want sampling", need)
	}
}

// What a legacy session's own instance is declared: of its client's
// capabilities, those mcpvisor carries (not tasks, which it does not
// carry, nor anything else); {} for a key no longer open, or a 2026-07-28
// request's that runs no instance of its own.
func TestSessionCapabilities(t *testing.T) {
	g := newWorld(t, `{"x":{"command":"$FIXTURE"}}`).gw
	ep := g.Aggregate()
	s := openDeclaring(t, ep, newRecorder(), `{"roots":{"listChanged":true},"tasks":{},"experimental":{"x":{}},"elicitation":{"form":{}}}`)
	if got, want := string(g.SessionCapabilities(s.Key())), `{"elicitation":{"form":{}},"roots":{"listChanged":true}}`; got != want {
		t.Errorf("declared %s, want %s", got, want)
	}
	key := s.Key()
	ep.Close(s)
	if got := string(g.SessionCapabilities(key)); got != `{}` {
		t.Errorf("a closed session's: %s, want {}", got)
	}
	if got := string(g.SessionCapabilities(modernKeyPrefix + "x")); got != `{}` {
		t.Errorf("a 2026-07-28 request's that runs no instance: %s, want {}", got)
	}
}

// A 2026-07-28 request's own instance of a per-session legacy server is
// declared what the request declared, of what mcpvisor carries — on both
// endpoints — and the request's end forgets it.
func TestModernRequestsOwnInstanceIsDeclaredItsCapabilities(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","sharing":"per-session","env":{"FIXTURE_ASK_ROOTS":"1"}}}`)
	for _, ep := range []struct {
		name string
		h    http.Handler
		tool string
	}{
		{"/mcp", NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{}), "x__roots"},
		{"/servers/x/mcp", NewStreamableHandler(w.gw.Single("x"), HTTPOptions{}), "roots"},
	} {
		t.Run(ep.name, func(t *testing.T) {
			hs := httptest.NewServer(ep.h)
			t.Cleanup(hs.Close)
			_, b := postModern(t, hs.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+ep.tool+`","arguments":{},`+modernMeta(`{"elicitation":{"form":{}},"experimental":{"x":{}}}`)+`}}`, "tools/call", ep.tool)
			m, err := rpc.Decode(bytes.TrimSpace(b))
			if err != nil || m.Error != nil || !strings.Contains(string(m.Result), `declared: {\"elicitation\":{\"form\":{}}}`) {
				t.Errorf("%s (%v), want the instance declared the request's elicitation alone", b, err)
			}
			w.gw.reg.mu.Lock()
			n := len(w.gw.reg.ownCaps)
			w.gw.reg.mu.Unlock()
			if n != 0 {
				t.Errorf("%d requests' capabilities kept after their end", n)
			}
		})
	}
}

// A server's config narrows what mcpvisor declares to it
// ("clientCapabilities"): its shared process is declared only those, a
// session's own process those of them its client declared, and the
// server's request for another is answered Method not found at once,
// naming the config — even to a client that declared it, which is asked
// nothing.
func TestConfigNarrowsDeclaredCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name, servers, declared string
	}{
		{"shared", `{"x":{"command":"$FIXTURE","env":{"FIXTURE_ASK_ROOTS":"1"},"clientCapabilities":["elicitation"]}}`,
			`declared: {\"elicitation\":{}}`},
		{"per-session", `{"x":{"command":"$FIXTURE","env":{"FIXTURE_ASK_ROOTS":"1"},"sharing":"per-session","clientCapabilities":["elicitation","sampling"]}}`,
			`declared: {\"elicitation\":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.servers)
			if got := string(fleet.DeclaredCapabilities(w.fleet.Get("x").Config())); got != map[string]string{"shared": `{"elicitation":{}}`, "per-session": `{"elicitation":{},"sampling":{}}`}[tc.name] {
				t.Errorf("DeclaredCapabilities = %s", got)
			}
			ep := w.gw.Single("x")
			out, rel := newRecorder(), newRecorder()
			s := openDeclaring(t, ep, out, `{"roots":{},"elicitation":{}}`)
			defer ep.Close(s)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			resp := ep.Handle(ctx, s, request(1, "tools/call", map[string]any{"name": "roots", "arguments": map[string]any{}}), rel)
			if ctx.Err() != nil || resp == nil || resp.Error != nil {
				t.Fatalf("roots: %v (%v)", resp, ctx.Err())
			}
			got := string(resp.Result)
			if !strings.Contains(got, "roots refused: -32601") || !strings.Contains(got, "configuration declares no roots capability to server x") {
				t.Errorf("the server got %s, want Method not found naming the config", got)
			}
			if !strings.Contains(got, tc.declared) {
				t.Errorf("the server reports %s, want %s", got, tc.declared)
			}
			resp = ep.Handle(ctx, s, request(2, "tools/call", map[string]any{"name": "sample", "arguments": map[string]any{"prompt": "p"}}), rel)
			if resp == nil || resp.Error != nil || !strings.Contains(string(resp.Result), "-32601") {
				t.Errorf("sample: %v, want Method not found", resp)
			}
			if n := rel.count("roots/list") + out.count("roots/list") + rel.count("sampling/createMessage"); n != 0 {
				t.Errorf("the client was asked %d times for what the config does not declare", n)
			}
		})
	}
}

// A modern request's client capabilities reach the server without those
// the server's config does not declare; the rest of params as it was.
func TestNarrowCapabilities(t *testing.T) {
	cfg := &config.Server{ClientCapabilities: []string{"roots"}}
	in := `{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{},"sampling":{},"experimental":{"x":{}}},"progressToken":1}}`
	got := narrowCapabilities(json.RawMessage(in), cfg)
	want := `{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"experimental":{"x":{}},"roots":{}},"progressToken":1}}`
	if string(got) != want {
		t.Errorf("narrowed to %s, want %s", got, want)
	}
	if same := narrowCapabilities(json.RawMessage(want), cfg); string(same) != want {
		t.Errorf("nothing to narrow, yet %s", same)
	}
}

// With requests of several sessions in flight on a shared server, a
// server's request that none of their clients declared the capability
// for is answered Method not found at once — not refused as one mcpvisor
// cannot attribute — while a request one of them did declare it for is
// still refused as ambiguous (it cannot tell whose it is).
func TestUndeclaredWithSeveralSessionsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name, capsA, want string
	}{
		{"none declared", `{}`, "-32601"},
		{"one declared", `{"sampling":{}}`, "cannot tell which of 2 client sessions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
			ep := w.gw.Single("x")
			a := openDeclaring(t, ep, newRecorder(), tc.capsA)
			defer ep.Close(a)
			b := openDeclaring(t, ep, newRecorder(), `{}`)
			defer ep.Close(b)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			relA := newRecorder()
			held := make(chan *rpc.Message, 1)
			go func() {
				held <- ep.Handle(ctx, a, request(1, "tools/call", map[string]any{"name": "sleep", "arguments": map[string]any{"ms": 20000}}), relA)
			}()
			waitFor(t, "a's call in flight", func() bool { return w.fleet.Get("x").Status().InFlight == 1 })
			resp := ep.Handle(ctx, b, request(2, "tools/call", map[string]any{"name": "sample", "arguments": map[string]any{"prompt": "p"}}), newRecorder())
			if ctx.Err() != nil || resp == nil || resp.Error != nil || !strings.Contains(string(resp.Result), tc.want) {
				t.Errorf("sample: %s (%v), want the server told %q", resp.Encode(), ctx.Err(), tc.want)
			}
			if n := relA.count("sampling/createMessage"); n != 0 {
				t.Errorf("a was asked for sampling %d times", n)
			}
			ep.Handle(ctx, a, &rpc.Message{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":1}`)}, newRecorder())
			<-held
		})
	}
}

// A 2026-07-28 client that declared no roots, calling a legacy server
// that asks for roots on its own before it answers (as playwright,
// chrome-devtools and server-filesystem do after each start): the server
// is told Method not found and carries on, and the client gets its
// answer — roots fail no call, unlike sampling, which a server asks for
// because the call needs it (MissingRequiredClientCapability).
func TestModernClientWithoutRootsGetsTheAnswer(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","env":{"FIXTURE_ASK_ROOTS":"1"}}}`)
	for _, ep := range []struct {
		name string
		h    http.Handler
		tool string
	}{
		{"/mcp", NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{}), "x__roots"},
		{"/servers/x/mcp", NewStreamableHandler(w.gw.Single("x"), HTTPOptions{}), "roots"},
	} {
		t.Run(ep.name, func(t *testing.T) {
			hs := httptest.NewServer(ep.h)
			t.Cleanup(hs.Close)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			err := w.fleet.Get("x").Sleep(ctx) // a new process, which asks again
			if err != nil && !strings.Contains(err.Error(), "not running") {
				t.Fatal(err)
			}
			_, b := postModern(t, hs.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+ep.tool+`","arguments":{},`+modernMeta(`{}`)+`}}`, "tools/call", ep.tool)
			m, err := rpc.Decode(bytes.TrimSpace(b))
			if err != nil || m.Error != nil || !strings.Contains(string(m.Result), "roots refused: -32601") {
				t.Errorf("%s (%v), want the server's answer, its roots request refused", b, err)
			}
		})
	}
}

// A server that asks for roots as soon as it is initialized — before the
// request that started it is in flight there, as playwright,
// chrome-devtools and server-filesystem do — asks its one client, which
// declared roots, on its session stream, and gets the client's answer;
// a client that declared none is asked nothing. (A session's own
// process: its client is certain from the start. A shared process's
// sole client is known once its lease is.)
func TestRootsAskedAtStartReachTheOwner(t *testing.T) {
	for _, tc := range []struct {
		name, caps string
		asked      bool
	}{
		{"declared roots", `{"roots":{}}`, true},
		{"declared nothing", `{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// initialize starts the session's own process (never started:
			// nothing cached to answer from), which asks at once: no
			// request of the client is in flight, before or after.
			w := newWorld(t, `{"x":{"command":"$FIXTURE","sharing":"per-session","env":{"FIXTURE_ASK_ROOTS":"1","FIXTURE_ASK_ROOTS_AT_INIT":"1"}}}`)
			ep := w.gw.Single("x")
			out := newRecorder()
			s := openDeclaring(t, ep, out, tc.caps)
			defer ep.Close(s)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			want := "roots refused: -32601"
			if tc.asked {
				req := out.next(t, "roots/list", 20*time.Second)
				ep.Handle(ctx, s, &rpc.Message{ID: req.ID, Result: json.RawMessage(`{"roots":[{"uri":"file:///start"}]}`)}, newRecorder())
				want = "file:///start"
			}
			rel := newRecorder()
			resp := ep.Handle(ctx, s, request(1, "tools/call", map[string]any{"name": "roots", "arguments": map[string]any{}}), rel)
			if resp == nil || resp.Error != nil || !strings.Contains(string(resp.Result), want) {
				t.Errorf("roots: %v, want the server to report %q", resp, want)
			}
			if n := out.count("roots/list") + rel.count("roots/list"); n != map[bool]int{true: 1, false: 0}[tc.asked] {
				t.Errorf("the client was asked for roots %d times", n)
			}
		})
	}
}

// A legacy HTTP client that declared roots but has no GET stream open
// cannot be asked outside a call (the request would wait in its session
// buffer, and the server with it, until the request timeout): the
// server's roots request at start is refused at once, or, if it comes
// while the call is in flight, asked on the call's stream (answered here
// with an error of the client's own) — either way the call gets the
// server's answer at once, never after a wait.
func TestRootsAtStartWithoutAStreamDoNotWait(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE","sharing":"per-session","requestTimeout":"10s","env":{"FIXTURE_ASK_ROOTS":"1","FIXTURE_ASK_ROOTS_AT_INIT":"1"}}}`)
	hs := httptest.NewServer(NewStreamableHandler(w.gw.Single("x"), HTTPOptions{}))
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	post := func(sid, body string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"t","version":"1"}}}`)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	start := time.Now()
	resp = post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"roots","arguments":{}}}`)
	defer resp.Body.Close()
	var answer string
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var m rpc.Message
		if json.NewDecoder(resp.Body).Decode(&m) == nil && string(m.ID) == "2" {
			answer = string(m.Result)
		}
	} else {
		r := newSSEReader(resp.Body)
		for {
			ev, err := r.next()
			if err != nil {
				break
			}
			var m rpc.Message
			if json.Unmarshal([]byte(ev.data), &m) != nil {
				continue
			}
			if m.Method == "roots/list" {
				post(sid, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":{"code":-32000,"message":"asked on the call's stream"}}`).Body.Close()
				continue
			}
			if string(m.ID) == "2" {
				answer = string(m.Result)
				break
			}
		}
	}
	if took := time.Since(start); ctx.Err() != nil || !strings.Contains(answer, "roots refused: -32") {
		t.Errorf("after %v: %q, want the server's answer at once, its roots refused", took.Round(time.Millisecond), answer)
	}
}
