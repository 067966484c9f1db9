package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Tests of the documented bounds of the gateway. Each drives its bound
// to the limit and one past it. Where a broken bound would make the test
// go on for ever, a ceiling of the test's own (far above the bound) ends
// it: a bound that does not hold by then is reported as missing.

// samplingRequest is a server's sampling/createMessage request, id n.
func samplingRequest(n int) *rpc.Message {
	return &rpc.Message{ID: json.RawMessage(strconv.Itoa(n)), Method: "sampling/createMessage", Params: json.RawMessage(`{}`)}
}

// newHeld is a modern client's call, held for input, a request of its own
// on g, the client having declared sampling, with c its call in
// flight on conn (registered, as begin would, for Request to find).
func newHeld(g *Gateway, conn fleet.Conn) (*heldCall, *call) {
	s := g.newModernReq(nil, nil, &Modern{Version: modernVersion}, nil)
	h := &heldCall{g: g, mreq: s, changed: make(chan struct{}), req: &rpc.Message{}, rawCaps: json.RawMessage(`{"sampling":{}}`)}
	s.held = h
	c := &call{from: sender{req: s}, clientID: json.RawMessage(`1`), related: noSink, conn: conn}
	return h, c
}

// heldInFlight is newHeld with c registered as in flight on conn, as
// begin would, for Request to find; the call stops when the test ends.
func heldInFlight(t *testing.T, g *Gateway, conn fleet.Conn) (*heldCall, *call) {
	h, c := newHeld(g, conn)
	t.Cleanup(func() { h.stop(false) })
	g.reg.mu.Lock()
	g.reg.calls[conn] = []*call{c}
	g.reg.mu.Unlock()
	return h, c
}

// pendingOf is how many server requests h has waiting for its client.
func pendingOf(h *heldCall) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}

// The calls held at once are bounded (maxHeld): once that many wait for
// their clients' input, a server's request during yet another modern call
// is refused to the server (and the call is not held); when one held call
// ends, there is room again.
func TestMRTRHeldCallsBounded(t *testing.T) {
	const ceiling = 1 << 12 // far above any sane bound
	g := New(nil)
	var held []*heldCall
	t.Cleanup(func() {
		for _, h := range held {
			h.stop(false)
		}
	})
	conn := &nopConn{}
	for len(held) < ceiling {
		h, c := newHeld(g, conn)
		ok, why := h.offer(conn, samplingRequest(len(held)), c)
		if !ok {
			if !strings.Contains(why, "too many calls") {
				t.Fatalf("held call %d refused for another reason: %s", len(held)+1, why)
			}
			break
		}
		held = append(held, h)
	}
	if len(held) != maxHeld {
		t.Fatalf("%d calls held at once (ceiling %d), want the bound, %d", len(held), ceiling, maxHeld)
	}
	if n := g.HeldCalls(); n != maxHeld {
		t.Fatalf("HeldCalls %d, want %d", n, maxHeld)
	}

	// One more call's server asks for input, as a server does (Request):
	// refused to the server; the call holds nothing.
	rc := &recConn{}
	h, _ := heldInFlight(t, g, rc)
	g.Request(fleet.Source{Conn: rc}, samplingRequest(1))
	waitFor(t, "the server's refusal", func() bool { return rc.errCount() == 1 })
	rc.mu.Lock()
	msg := rc.errs[0]
	rc.mu.Unlock()
	if !strings.Contains(msg, "too many calls") {
		t.Fatalf("refusal %q", msg)
	}
	if n := pendingOf(h); n != 0 || g.HeldCalls() != maxHeld {
		t.Fatalf("beyond the bound: %d inputs pending, %d calls held", n, g.HeldCalls())
	}

	// A held call ends: the next server request is taken.
	held[0].stop(false)
	g.Request(fleet.Source{Conn: rc}, samplingRequest(2))
	if n := pendingOf(h); n != 1 || rc.errCount() != 1 || g.HeldCalls() != maxHeld {
		t.Fatalf("after one ended: %d inputs pending, %d refusals, %d held", n, rc.errCount(), g.HeldCalls())
	}
}

// A held call has at most maxPendingInputs server requests waiting for its
// client: the next is refused to the server and is not in the client's
// round; once the client answers one, the server may ask again.
func TestMRTRPendingInputsBounded(t *testing.T) {
	const ceiling = 1 << 10
	g := New(nil)
	rc := &recConn{}
	h, _ := heldInFlight(t, g, rc)
	accepted := 0
	for accepted < ceiling {
		// As the server's requests come (Request): a refusal is written
		// on a goroutine of its own, taken is at once.
		g.Request(fleet.Source{Conn: rc}, samplingRequest(accepted))
		if pendingOf(h) == accepted {
			break
		}
		accepted++
	}
	if accepted != maxPendingInputs {
		t.Fatalf("%d inputs pending at once (ceiling %d), want the bound, %d", accepted, ceiling, maxPendingInputs)
	}
	waitFor(t, "the server's refusal", func() bool { return rc.errCount() == 1 })
	rc.mu.Lock()
	msg := rc.errs[0]
	rc.mu.Unlock()
	if !strings.Contains(msg, "too many requests wait for the client") {
		t.Fatalf("refusal %q", msg)
	}
	reqs, _ := inputRequests(t, h.missing(json.RawMessage(`1`)))
	if len(reqs) != maxPendingInputs {
		t.Fatalf("the client's round asks for %d inputs, want %d", len(reqs), maxPendingInputs)
	}

	// The client answers one: the server may ask once more, not twice.
	for key := range reqs {
		h.answer(map[string]json.RawMessage{key: json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"x"},"model":"m"}`)})
		break
	}
	if n := pendingOf(h); n != maxPendingInputs-1 {
		t.Fatalf("%d pending after one answer", n)
	}
	g.Request(fleet.Source{Conn: rc}, samplingRequest(ceiling))
	if n := pendingOf(h); n != maxPendingInputs || rc.errCount() != 1 {
		t.Fatalf("after an answer: %d pending, %d refusals", n, rc.errCount())
	}
	g.Request(fleet.Source{Conn: rc}, samplingRequest(ceiling+1))
	waitFor(t, "the second refusal", func() bool { return rc.errCount() == 2 })
	if n := pendingOf(h); n != maxPendingInputs {
		t.Fatalf("%d pending, want %d", n, maxPendingInputs)
	}
}

// A subscriptions/listen stream keeps at most maxEarly notifications until
// its acknowledgement is out; one more ends the listen (it is lost, and
// the client, listening again, fetches what it missed). Those kept are
// delivered after the acknowledgement, in order.
func TestListenEarlyNotificationsBounded(t *testing.T) {
	const ceiling = 1 << 12
	out := &capSink{}
	l := &listener{id: json.RawMessage(`"l"`), out: out, lost: make(chan struct{})}
	kept := 0
	for ; kept < ceiling; kept++ {
		err := l.send("notifications/resources/updated", json.RawMessage(`{"uri":"test://`+strconv.Itoa(kept)+`"}`))
		if err != nil {
			if !errors.Is(err, ErrStreamFull) {
				t.Fatalf("notification %d: %v", kept+1, err)
			}
			break
		}
	}
	if kept != maxEarly {
		t.Fatalf("%d notifications kept before the acknowledgement (ceiling %d), want the bound, %d", kept, ceiling, maxEarly)
	}
	select {
	case <-l.lost:
	default:
		t.Fatal("a notification beyond the bound was dropped, and the listen goes on")
	}
	if out.n() != 0 {
		t.Fatalf("%d notifications sent before the acknowledgement", out.n())
	}
	if err := l.ack(json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.got) != maxEarly+1 || out.got[0].Method != "notifications/subscriptions/acknowledged" {
		t.Fatalf("%d messages after the acknowledgement, want it and %d", len(out.got), maxEarly)
	}
	for i, m := range out.got[1:] {
		if uri := stringField(m.Params, "uri"); uri != "test://"+strconv.Itoa(i) {
			t.Fatalf("notification %d is of %q", i, uri)
		}
	}
}

// inputConn is a modern server that answers a call with input_required
// (asking for sampling) until it has answered rounds of them, counting
// the one fulfil is given first; then with a complete result. Each retry
// must carry the previous round's answers and requestState.
type inputConn struct {
	nopConn
	rounds int
	calls  atomic.Int32 // retries received
	bad    atomic.Pointer[string]
}

func inputRound(n int) *rpc.Message {
	return &rpc.Message{Result: json.RawMessage(`{"resultType":"input_required","inputRequests":{"s":{"method":"sampling/createMessage","params":{}}},"requestState":"st` + strconv.Itoa(n) + `"}`)}
}

func (c *inputConn) Call(_ context.Context, _ string, params json.RawMessage) (*rpc.Message, error) {
	n := int(c.calls.Add(1))
	if st := stringField(params, "requestState"); st != "st"+strconv.Itoa(n-1) || rpc.Member(rpc.Member(params, "inputResponses"), "s") == nil {
		msg := "retry " + strconv.Itoa(n) + ": " + string(params)
		c.bad.CompareAndSwap(nil, &msg)
	}
	if n < c.rounds {
		return inputRound(n), nil
	}
	return &rpc.Message{Result: json.RawMessage(`{"resultType":"complete","content":[]}`)}, nil
}

// legacyCall is a call of a legacy client session of g that declared
// sampling, whose stream answers every request the gateway sends it (as
// the client would) and counts them.
func legacyCall(g *Gateway, asked *atomic.Int32) *call {
	var s *Session
	s = NewSession(SinkFunc(func(m *rpc.Message) error {
		if m.IsRequest() {
			asked.Add(1)
			g.clientMessage(s, &rpc.Message{ID: m.ID, Result: json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"x"},"model":"m"}`)})
		}
		return nil
	}))
	g.reg.open(s, nil)
	g.reg.mu.Lock()
	st := g.reg.sessions[s]
	st.caps = map[string]json.RawMessage{"sampling": json.RawMessage(`{}`)}
	g.reg.mu.Unlock()
	return &call{from: legacySender(s), st: st, clientID: json.RawMessage(`1`), related: s.Out()}
}

// A legacy client's call to a modern server goes through at most
// maxInputRounds input_required rounds: a server that asks that many times
// gets its result; one that asks for ever is given up on after
// maxInputRounds, the client asked no more.
func TestInputRoundsBounded(t *testing.T) {
	const ceiling = 1 << 10 // the endless server's: it completes at last
	for _, tc := range []struct {
		name     string
		rounds   int
		complete bool
	}{
		{"at the bound", min(maxInputRounds, ceiling), true},
		{"endless", ceiling, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(nil)
			var asked atomic.Int32
			c := legacyCall(g, &asked)
			conn := &inputConn{rounds: tc.rounds}
			resp, err := g.fulfil(t.Context(), c, nil, conn, "tools/call", json.RawMessage(`{"name":"t"}`), inputRound(0))
			if err != nil {
				t.Fatal(err)
			}
			if p := conn.bad.Load(); p != nil {
				t.Fatalf("a retry without the round's answer or state: %s", *p)
			}
			if tc.complete {
				if resp.Error != nil || !strings.Contains(string(resp.Result), `"complete"`) {
					t.Fatalf("%d rounds: %s", tc.rounds, resp.Encode())
				}
			} else if resp.Error == nil || !strings.Contains(resp.Error.Message, "gave up") {
				t.Fatalf("a server that asks for ever: served after %d rounds: %s", conn.calls.Load(), resp.Encode())
			}
			if n := int(conn.calls.Load()); n != maxInputRounds {
				t.Fatalf("%d retries sent to the server, want %d", n, maxInputRounds)
			}
			if n := int(asked.Load()); n != maxInputRounds {
				t.Fatalf("the client was asked %d times, want %d", n, maxInputRounds)
			}
		})
	}
}

// signalConn is a recConn that also signals each error it is made to
// reply.
type signalConn struct {
	recConn
	replied chan struct{}
}

func (c *signalConn) ReplyError(id json.RawMessage, code int, msg string) error {
	_ = c.recConn.ReplyError(id, code, msg)
	c.replied <- struct{}{}
	return nil
}

// A client has inputWait to answer a request it was sent: a server's,
// relayed (the server is then told the client did not answer), and
// mcpvisor's own for a modern server's input (the call then fails). Until
// then the request waits; a client that never answers is not waited for
// beyond it. (Fake time: the bound is minutes.)
func TestClientAnswerWaitBounded(t *testing.T) {
	const ceiling = 24 * time.Hour
	t.Run("server's request", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := New(nil)
			conn := &signalConn{replied: make(chan struct{}, 1)}
			sink := &capSink{}
			s := NewSession(sink)
			g.reg.open(s, nil)
			g.reg.mu.Lock()
			st := g.reg.sessions[s]
			st.caps = map[string]json.RawMessage{"sampling": json.RawMessage(`{}`)} // declared at initialize
			c := &call{from: legacySender(s), st: st, clientID: json.RawMessage(`1`), related: sink, conn: conn}
			g.reg.calls[conn] = []*call{c}
			g.reg.mu.Unlock()
			start := time.Now()
			g.Request(fleet.Source{Conn: conn}, &rpc.Message{ID: json.RawMessage(`"s-1"`), Method: "sampling/createMessage", Params: json.RawMessage(`{}`)})
			if sink.n() != 1 {
				t.Fatalf("%d requests sent to the client, want 1", sink.n())
			}
			select {
			case <-conn.replied:
			case <-time.After(ceiling):
				t.Fatalf("the server's request still waits for the client after %v", ceiling)
			}
			if el := time.Since(start); el != inputWait {
				t.Fatalf("the server was answered after %v, want inputWait (%v)", el, inputWait)
			}
			conn.mu.Lock()
			msg := conn.errs[0]
			conn.mu.Unlock()
			g.reg.mu.Lock()
			pending, waiting := len(g.reg.outReqs), c.waiting.Load()
			g.reg.mu.Unlock()
			if !strings.Contains(msg, "did not answer") || pending != 0 || waiting != 0 {
				t.Fatalf("answer %q; %d requests pending, call waiting %d", msg, pending, waiting)
			}
		})
	})
	t.Run("modern server's input", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := New(nil)
			sink := &capSink{}
			s := NewSession(sink)
			g.reg.open(s, nil)
			g.reg.mu.Lock()
			st := g.reg.sessions[s]
			st.caps = map[string]json.RawMessage{"sampling": json.RawMessage(`{}`)}
			g.reg.mu.Unlock()
			c := &call{from: legacySender(s), st: st, clientID: json.RawMessage(`1`), related: sink}
			conn := &inputConn{rounds: 2}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			start := time.Now()
			done := make(chan *rpc.Message, 1)
			go func() {
				resp, _ := g.fulfil(ctx, c, nil, conn, "tools/call", json.RawMessage(`{"name":"t"}`), inputRound(0))
				done <- resp
			}()
			var resp *rpc.Message
			select {
			case resp = <-done:
			case <-time.After(ceiling):
				cancel()
				<-done
				t.Fatalf("the call still waits for the client's input after %v", ceiling)
			}
			if el := time.Since(start); el != inputWait {
				t.Fatalf("the call gave up on the client after %v, want inputWait (%v)", el, inputWait)
			}
			if sink.n() != 1 || resp.Error == nil || !strings.Contains(resp.Error.Message, "did not answer") || conn.calls.Load() != 0 {
				t.Fatalf("%d requests to the client, %d retries; %s", sink.n(), conn.calls.Load(), resp.Encode())
			}
			g.reg.mu.Lock()
			pending := len(g.reg.outReqs)
			g.reg.mu.Unlock()
			if pending != 0 {
				t.Fatalf("%d requests still pending", pending)
			}
		})
	})
}

// A modern request's context is its forward's: the one forward given it
// takes its cancel and ends it when done. Only once: a second forward in
// the same request context, while the first is in flight, derives a
// context of its own, and its end leaves the request — and the first
// forward — running. (A second forward after the first has ended finds
// the request's context ended: it is answered "cancelled".)
func TestModernForwardTakesTheRequestContextOnce(t *testing.T) {
	w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
	g, srv := w.gw, w.fleet.Get("x")
	mo := &Modern{Version: modernVersion, Caps: json.RawMessage(`{}`)}
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	mo.ctx, mo.cancel = ctx, cancel // as the HTTP front serves it
	s := g.newModernReq(nil, nil, mo, nil)
	defer g.endModernReq(s)

	first := make(chan *rpc.Message, 1)
	go func() {
		first <- g.forward(ctx, sender{req: s}, srv, "tools/call", json.RawMessage(`{"name":"sleep","arguments":{"ms":60000}}`), json.RawMessage(`1`), noSink)
	}()
	// In flight (registered after the cancel was taken).
	waitFor(t, "the first forward in flight", func() bool {
		g.reg.mu.Lock()
		defer g.reg.mu.Unlock()
		for _, list := range g.reg.calls {
			if len(list) > 0 {
				return true
			}
		}
		return false
	})
	second := g.forward(ctx, sender{req: s}, srv, "tools/call", json.RawMessage(`{"name":"echo","arguments":{"text":"second"}}`), json.RawMessage(`1`), noSink)
	if second.Error != nil || !strings.Contains(string(second.Result), "second") {
		t.Fatalf("the second forward: %s", second.Encode())
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("the second forward's end ended the request's context: %v", context.Cause(ctx))
	}
	// The request ends (its client went away): the first forward, still
	// in flight, ends with it, for that cause.
	gone := errors.New("the test's request ended")
	cancel(gone)
	m := <-first
	if m.Error == nil || !strings.Contains(m.Error.Message, gone.Error()) {
		t.Fatalf("the first forward: %s", m.Encode())
	}

	// The first forward of a request ends its context.
	ctx2, cancel2 := context.WithCancelCause(t.Context())
	defer cancel2(nil)
	mo2 := &Modern{Version: modernVersion, Caps: json.RawMessage(`{}`), ctx: ctx2, cancel: cancel2}
	s2 := g.newModernReq(nil, nil, mo2, nil)
	defer g.endModernReq(s2)
	if m := g.forward(ctx2, sender{req: s2}, srv, "tools/call", json.RawMessage(`{"name":"echo","arguments":{"text":"one"}}`), json.RawMessage(`2`), noSink); m.Error != nil {
		t.Fatalf("forward: %s", m.Encode())
	}
	if ctx2.Err() == nil {
		t.Fatal("a modern request's forward did not end the request's context")
	}
}

// A session's close takes its outgoing requests and ends the wait of
// each, as every other take does (the client's answer, the server's
// withdrawal, the request's timeout): the call's count of requests
// waiting on its client goes back to zero, and neither table keeps them.
func TestSessionCloseEndsItsOutgoingWaits(t *testing.T) {
	w := newWorld(t, twoFixtures)
	ep := w.gw.Aggregate()
	s := ep.Open(SinkFunc(func(*rpc.Message) error { return nil }))
	g := w.gw
	g.reg.mu.Lock()
	st := g.reg.sessions[s]
	g.reg.mu.Unlock()
	c := &call{from: legacySender(s), st: st, clientID: json.RawMessage(`1`), related: s.Out()}
	for i := range 2 {
		r := &outReq{call: c, sess: s, answer: make(chan *rpc.Message, 1), timer: time.NewTimer(time.Hour)}
		if err := g.sendOutReq(c, fmt.Sprint("ours-", i), r, "sampling/createMessage", json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.waiting.Load(); n != 2 {
		t.Fatalf("%d requests waiting on the client, want 2", n)
	}
	ep.Close(s)
	if n := c.waiting.Load(); n != 0 {
		t.Fatalf("after the session closed, its call still counts %d requests waiting on the client", n)
	}
	g.reg.mu.Lock()
	left, leftOwn := len(g.reg.outReqs), len(st.outReqs)
	g.reg.mu.Unlock()
	if left != 0 || leftOwn != 0 {
		t.Fatalf("after the session closed, %d outgoing requests are pending (%d in its own table)", left, leftOwn)
	}
}
