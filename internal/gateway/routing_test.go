package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// recorder is a Sink that keeps what it is sent.
type recorder struct {
	mu   sync.Mutex
	msgs []*rpc.Message
	got  chan *rpc.Message // every message, if set
}

func newRecorder() *recorder { return &recorder{got: make(chan *rpc.Message, 256)} }

func (r *recorder) Send(m *rpc.Message) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	select {
	case r.got <- m:
	default:
	}
	return nil
}

// methods lists the methods of what r was sent.
func (r *recorder) methods() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		out = append(out, m.Method)
	}
	return out
}

func (r *recorder) count(method string) int {
	n := 0
	for _, m := range r.methods() {
		if m == method {
			n++
		}
	}
	return n
}

// next waits for the next message with method.
func (r *recorder) next(t *testing.T, method string, timeout time.Duration) *rpc.Message {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m := <-r.got:
			if m.Method == method {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s within %v (got %v)", method, timeout, r.methods())
			return nil
		}
	}
}

func request(id int, method string, params any) *rpc.Message {
	return &rpc.Message{ID: json.RawMessage(mustJSONString(id)), Method: method, Params: json.RawMessage(mustJSONString(params))}
}

// A client answer to a server request relayed to another session is
// refused and leaves that request pending; the right session's answer is
// then accepted. The ids of relayed requests are not guessable sequences.
func TestStrayAnswerFromAnotherSessionIsRefused(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","sharing":"per-session"}}`)
	ep := w.gw.Aggregate()
	outA, outB := newRecorder(), newRecorder()
	a, b := openDeclaring(t, ep, outA, `{"sampling":{}}`), openDeclaring(t, ep, outB, `{"sampling":{}}`)
	defer ep.Close(a)
	defer ep.Close(b)
	relA := newRecorder()
	done := make(chan *rpc.Message, 1)
	go func() {
		done <- ep.Handle(context.Background(), a, request(1, "tools/call", map[string]any{"name": "c__test_sampling", "arguments": map[string]any{"prompt": "hi"}}), relA)
	}()
	req := relA.next(t, "sampling/createMessage", 20*time.Second)
	var id string
	if err := json.Unmarshal(req.ID, &id); err != nil {
		t.Fatalf("relayed request id %s: %v", req.ID, err)
	}
	if len(id) < 32 {
		t.Fatalf("relayed request id %q is short enough to guess", id)
	}
	answer := func(text string) *rpc.Message {
		return &rpc.Message{ID: req.ID, Result: json.RawMessage(mustJSONString(map[string]any{
			"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": text}}))}
	}
	if resp := ep.Handle(context.Background(), b, answer("from B"), newRecorder()); resp != nil {
		t.Fatalf("stray answer got a response: %+v", resp)
	}
	select {
	case resp := <-done:
		t.Fatalf("the call completed with another session's answer: %s %v", resp.Result, resp.Error)
	default:
	}
	if resp := ep.Handle(context.Background(), a, answer("from A"), newRecorder()); resp != nil {
		t.Fatalf("answer got a response: %+v", resp)
	}
	select {
	case resp := <-done:
		if resp.Error != nil || !strings.Contains(string(resp.Result), "from A") || strings.Contains(string(resp.Result), "from B") {
			t.Fatalf("call result %s %v, want A's answer", resp.Result, resp.Error)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not complete after its own session answered")
	}
}

// Log lines of a server that serves several sessions carry nothing that
// ties them to a request. One that comes while only B has a call in
// flight, and no other session's ended lately, is B's, on that call's
// stream, and no other session's; one that comes once the server has been
// quiet for the linger is the server's own, for the sessions that set a
// log level, each at its level.
func TestLogLinesDoNotCrossSessions(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	w.gw.reg.linger = 50 * time.Millisecond
	ep := w.gw.Aggregate()
	outA, outB, outC := newRecorder(), newRecorder(), newRecorder()
	a, b, c := ep.Open(outA), ep.Open(outB), ep.Open(outC)
	defer ep.Close(a)
	defer ep.Close(b)
	defer ep.Close(c)
	handle := func(s *Session, m *rpc.Message, rel Sink) {
		t.Helper()
		if resp := ep.Handle(context.Background(), s, m, rel); resp.Error != nil {
			t.Fatalf("%s: %v", m.Method, resp.Error)
		}
	}
	handle(a, request(1, "logging/setLevel", map[string]any{"level": "info"}), newRecorder())
	handle(c, request(2, "logging/setLevel", map[string]any{"level": "error"}), newRecorder())
	// A uses the server too: it now serves more than one session.
	handle(a, request(5, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "a"}}), newRecorder())
	time.Sleep(100 * time.Millisecond) // A's call is no longer recent
	relB := newRecorder()
	handle(b, request(3, "tools/call", map[string]any{"name": "a__log", "arguments": map[string]any{"text": "from B", "laterMs": 300}}), relB)
	// The line during B's call is B's; the later one, once the server
	// has been quiet, goes to A, which asked for the server's lines.
	if m := relB.next(t, "notifications/message", 5*time.Second); !strings.Contains(string(m.Params), `"from B"`) {
		t.Fatalf("B's call stream got %s", m.Params)
	}
	if m := outA.next(t, "notifications/message", 5*time.Second); !strings.Contains(string(m.Params), `"from B (later)"`) {
		t.Fatalf("A got %s, want only the line sent while the server was quiet", m.Params)
	}
	// A request answered after the lines were relayed: everything the
	// server sent before it has been delivered by now.
	handle(b, request(4, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "sync"}}), newRecorder())
	if n := outA.count("notifications/message"); n != 1 {
		t.Fatalf("A got %d lines, want the one sent while the server was quiet: the line of B's call crossed to it", n)
	}
	if n := outB.count("notifications/message"); n != 0 {
		t.Fatalf("B, which set no log level, got %d lines on its session stream", n)
	}
	if n := outC.count("notifications/message"); n != 0 {
		t.Fatalf("C, at level error, got %d info lines", n)
	}
}

// A line that comes while one session's call is in flight and another's
// ended a moment ago may be either's: it goes to neither's call, only to
// sessions that asked for the server's log — here none.
func TestLogLineOfTwoActiveSessionsGoesToNeither(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	ep := w.gw.Aggregate()
	outA, outB := newRecorder(), newRecorder()
	a, b := ep.Open(outA), ep.Open(outB)
	defer ep.Close(a)
	defer ep.Close(b)
	relA, relB := newRecorder(), newRecorder()
	if resp := ep.Handle(context.Background(), a, request(2, "tools/call", map[string]any{"name": "a__log", "arguments": map[string]any{"text": "secret of A", "laterMs": 300}}), relA); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	relA.next(t, "notifications/message", 5*time.Second) // during A's call, A's alone
	if resp := ep.Handle(context.Background(), b, request(3, "tools/call", map[string]any{"name": "a__sleep", "arguments": map[string]any{"ms": 600}}), relB); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	if resp := ep.Handle(context.Background(), b, request(4, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "sync"}}), newRecorder()); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	if n := relB.count("notifications/message") + outB.count("notifications/message") + outA.count("notifications/message"); n != 0 {
		t.Fatalf("A's late line reached a session stream or B's call %d times", n)
	}
}

// The lines of a server that only one session has used are that session's:
// during its call on the call's stream, between calls on its session
// stream once it set a log level. A session that comes later does not
// inherit them.
func TestLogLinesOfASoleSession(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	ep := w.gw.Aggregate()
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	call := func(id int, text string, laterMs int, rel Sink) {
		t.Helper()
		m := request(id, "tools/call", map[string]any{"name": "a__log", "arguments": map[string]any{"text": text, "laterMs": laterMs}})
		if resp := ep.Handle(context.Background(), s, m, rel); resp.Error != nil {
			t.Fatal(resp.Error)
		}
	}
	rel := newRecorder()
	call(1, "first", 0, rel)
	if m := rel.next(t, "notifications/message", time.Second); !strings.Contains(string(m.Params), `"first"`) {
		t.Fatalf("call stream got %s", m.Params)
	}
	if resp := ep.Handle(context.Background(), s, request(2, "logging/setLevel", map[string]any{"level": "info"}), newRecorder()); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	call(3, "second", 50, newRecorder())
	if m := out.next(t, "notifications/message", 5*time.Second); !strings.Contains(string(m.Params), "second (later)") {
		t.Fatalf("session stream got %s, want the later line of the second call", m.Params)
	}
}

// A resource subscription survives its server's crash: the fleet replays
// it to the restarted process, and updates reach the subscriber again —
// and only the subscriber.
func TestSubscriptionSurvivesARestart(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE"}}`)
	ep := w.gw.Aggregate()
	outA, outB := newRecorder(), newRecorder()
	a, b := ep.Open(outA), ep.Open(outB)
	defer ep.Close(a)
	defer ep.Close(b)
	if resp := ep.Handle(context.Background(), b, request(1, "tools/list", nil), newRecorder()); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	if resp := ep.Handle(context.Background(), a, request(2, "resources/subscribe", map[string]any{"uri": "test://watched-resource"}), newRecorder()); resp.Error != nil {
		t.Fatalf("subscribe: %v", resp.Error)
	}
	outA.next(t, "notifications/resources/updated", 10*time.Second)
	pid := w.pid("c")
	if err := killPID(pid); err != nil {
		t.Fatal(err)
	}
	w.waitEvent("c", "restarted", 1, 10*time.Second)
	for len(outA.got) > 0 {
		<-outA.got
	}
	outA.next(t, "notifications/resources/updated", 10*time.Second)
	if n := outB.count("notifications/resources/updated"); n != 0 {
		t.Fatalf("a session that did not subscribe got %d updates", n)
	}
}

// Reading a resource a session subscribed to on the aggregated endpoint
// keeps the subscription: the interest book still names the session (the
// fleet replays it to a restarted server, keeps the server awake for it,
// and routes the resource's updates by it), and updates go on reaching
// the session.
func TestReadingASubscribedResourceKeepsTheSubscription(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE"}}`)
	ep := w.gw.Aggregate()
	out := newRecorder()
	a := ep.Open(out)
	defer ep.Close(a)
	const uri = "test://watched-resource"
	if resp := ep.Handle(context.Background(), a, request(1, "resources/subscribe", map[string]any{"uri": uri}), newRecorder()); resp.Error != nil {
		t.Fatalf("subscribe: %v", resp.Error)
	}
	if resp := ep.Handle(context.Background(), a, request(2, "resources/read", map[string]any{"uri": uri}), newRecorder()); resp.Error != nil {
		t.Fatalf("read: %v", resp.Error)
	}
	if subs := w.gw.Interest().Subscribers(w.fleet.Get("c"), uri); !slices.Contains(subs, a.Key()) {
		t.Fatalf("after a read, the subscribers of %s are %v: the session's subscription was forgotten", uri, subs)
	}
	for len(out.got) > 0 {
		<-out.got
	}
	out.next(t, "notifications/resources/updated", 10*time.Second)
}

// After an invalidation, concurrent callers share one rebuild of the
// aggregated table instead of one each.
func TestConcurrentListsShareOneTableBuild(t *testing.T) {
	w := newWorld(t, twoFixtures)
	ep := w.gw.Aggregate()
	s := ep.Open(newRecorder())
	defer ep.Close(s)
	agg := w.gw.agg
	before := agg.builds.Load()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			resp := ep.Handle(context.Background(), s, request(i, "tools/list", nil), newRecorder())
			if resp.Error != nil || !strings.Contains(string(resp.Result), "a__echo") || !strings.Contains(string(resp.Result), "b__echo") {
				t.Errorf("tools/list: %s %v", resp.Result, resp.Error)
			}
		})
	}
	wg.Wait()
	if n := agg.builds.Load() - before; n != 1 {
		t.Fatalf("20 concurrent first lists built the table %d times, want 1", n)
	}
}

// On a server several sessions share, a sampling request goes to the one
// session with a request in flight there; while two sessions have requests
// in flight it cannot be attributed and is refused, reaching neither.
func TestSamplingOnASharedServer(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE"}}`)
	ep := w.gw.Aggregate()
	a, b := openDeclaring(t, ep, newRecorder(), `{"sampling":{}}`), openDeclaring(t, ep, newRecorder(), `{"sampling":{}}`)
	defer ep.Close(a)
	defer ep.Close(b)
	sample := func(s *Session, id int, rel Sink) *rpc.Message {
		return ep.Handle(context.Background(), s, request(id, "tools/call", map[string]any{"name": "c__test_sampling", "arguments": map[string]any{"prompt": "hi"}}), rel)
	}
	relA, relB := newRecorder(), newRecorder()
	doneA := make(chan *rpc.Message, 1)
	go func() { doneA <- sample(a, 1, relA) }()
	req := relA.next(t, "sampling/createMessage", 20*time.Second) // A alone: its own
	// B's call while A's is in flight: its sampling request is refused.
	resp := sample(b, 2, relB)
	if !strings.Contains(string(resp.Result)+fmt.Sprint(resp.Error), "per-session") {
		t.Fatalf("B's sampling call while A's was in flight: %s %v, want the refusal naming per-session", resp.Result, resp.Error)
	}
	if n := relB.count("sampling/createMessage"); n != 0 {
		t.Fatalf("B received %d sampling requests", n)
	}
	answer := &rpc.Message{ID: req.ID, Result: json.RawMessage(`{"role":"assistant","model":"m","content":{"type":"text","text":"from A"}}`)}
	ep.Handle(context.Background(), a, answer, newRecorder())
	if r := <-doneA; !strings.Contains(string(r.Result), "from A") {
		t.Fatalf("A's call: %s %v", r.Result, r.Error)
	}
}

// A request that waits for its server's restart is the session's from the
// start: the client's cancellation, or the session's end, cancels it there,
// and it is never sent to the server once the server is back.
func TestCancelWhileWaitingForARestart(t *testing.T) {
	for _, how := range []string{"cancelled", "session closed"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t, `{"a":{"command":"$FIXTURE","restart":{"backoff":{"initial":"1s","max":"1s","jitter":0}}}}`)
			ep := w.gw.Aggregate()
			s := ep.Open(newRecorder())
			defer ep.Close(s)
			if resp := ep.Handle(context.Background(), s, request(1, "tools/call", map[string]any{"name": "a__pid"}), newRecorder()); resp.Error != nil {
				t.Fatal(resp.Error)
			}
			ep.Handle(context.Background(), s, request(2, "tools/call", map[string]any{"name": "a__crash"}), newRecorder())
			w.waitEvent("a", "restarting", 1, 5*time.Second)
			done := make(chan *rpc.Message, 1)
			go func() {
				done <- ep.Handle(context.Background(), s, request(5, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "SIDE-EFFECT"}}), newRecorder())
			}()
			waitFor(t, "the request to wait for the restart", func() bool {
				return w.gw.reg.callOf(s, json.RawMessage(`5`)) != nil
			})
			if how == "cancelled" {
				ep.Handle(context.Background(), s, &rpc.Message{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":5,"reason":"user"}`)}, newRecorder())
			} else {
				ep.Close(s)
			}
			resp := <-done
			if resp.Error == nil || strings.Contains(string(resp.Result), "SIDE-EFFECT") {
				t.Fatalf("the %s request reached the server after its restart: %s %v", how, resp.Result, resp.Error)
			}
			// The restart itself goes on.
			w.waitEvent("a", "restarted", 1, 5*time.Second)
		})
	}
}

// A line a server sends after the only session that used it has closed
// reaches no later session: the later one does not inherit it.
func TestLateLineOfAClosedSessionReachesNoOther(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	ep := w.gw.Aggregate()
	outA := newRecorder()
	a := ep.Open(outA)
	if resp := ep.Handle(context.Background(), a, request(1, "tools/call", map[string]any{"name": "a__log", "arguments": map[string]any{"text": "secret of A", "laterMs": 300}}), newRecorder()); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	ep.Close(a)
	outB, relB := newRecorder(), newRecorder()
	b := ep.Open(outB)
	defer ep.Close(b)
	// B's call is in flight when A's later line comes, and ends after it.
	if resp := ep.Handle(context.Background(), b, request(2, "tools/call", map[string]any{"name": "a__sleep", "arguments": map[string]any{"ms": 600}}), relB); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	if n := relB.count("notifications/message") + outB.count("notifications/message"); n != 0 {
		t.Fatalf("B received %d log lines of A's call", n)
	}
}

// A request a session abandoned (cancelled, timed out) may still be served
// by the server: while it may, the server's sampling requests are not
// attributed by what is in flight, so another session's call does not
// receive them.
func TestSamplingAfterAnAbandonedCallIsNotGuessed(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE"}}`)
	ep := w.gw.Aggregate()
	a, b := openDeclaring(t, ep, newRecorder(), `{"sampling":{}}`), openDeclaring(t, ep, newRecorder(), `{"sampling":{}}`)
	defer ep.Close(a)
	defer ep.Close(b)
	sample := func(s *Session, id int, rel Sink) *rpc.Message {
		return ep.Handle(context.Background(), s, request(id, "tools/call", map[string]any{"name": "c__test_sampling", "arguments": map[string]any{"prompt": "hi"}}), rel)
	}
	relA := newRecorder()
	doneA := make(chan *rpc.Message, 1)
	go func() { doneA <- sample(a, 1, relA) }()
	relA.next(t, "sampling/createMessage", 20*time.Second)
	ep.Handle(context.Background(), a, &rpc.Message{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":1}`)}, newRecorder())
	if r := <-doneA; r.Error == nil {
		t.Fatalf("A's cancelled call answered %s", r.Result)
	}
	relB := newRecorder()
	resp := sample(b, 2, relB)
	if n := relB.count("sampling/createMessage"); n != 0 {
		t.Fatalf("B received %d sampling requests while A's abandoned call may still be served", n)
	}
	if !strings.Contains(string(resp.Result)+fmt.Sprint(resp.Error), "per-session") {
		t.Fatalf("B's call: %s %v, want the refusal naming per-session", resp.Result, resp.Error)
	}
}

// Calls of a name no server has, coming together, cause one rebuild of the
// table between them, not one each.
func TestConcurrentUnknownNamesShareOneRebuild(t *testing.T) {
	w := newWorld(t, twoFixtures)
	ep := w.gw.Aggregate()
	s := ep.Open(newRecorder())
	defer ep.Close(s)
	if resp := ep.Handle(context.Background(), s, request(0, "tools/list", nil), newRecorder()); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	before := w.gw.agg.builds.Load()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			resp := ep.Handle(context.Background(), s, request(i+1, "tools/call", map[string]any{"name": "a__nope"}), newRecorder())
			if resp.Error == nil || !strings.Contains(resp.Error.Message, "unknown tool") {
				t.Errorf("call of an unknown tool: %s %v", resp.Result, resp.Error)
			}
		})
	}
	wg.Wait()
	if n := w.gw.agg.builds.Load() - before; n > 2 {
		t.Fatalf("20 concurrent calls of an unknown name rebuilt the table %d times", n)
	}
}

// What a session's private instance sends between calls reaches that
// session alone, even when every session asked for it.
func TestPrivateInstancesLinesReachTheirSessionOnly(t *testing.T) {
	w := newWorld(t, `{"p":{"command":"$FIXTURE","sharing":"per-session"}}`)
	ep := w.gw.Aggregate()
	outA, outB := newRecorder(), newRecorder()
	a, b := ep.Open(outA), ep.Open(outB)
	defer ep.Close(a)
	defer ep.Close(b)
	for i, s := range []*Session{a, b} {
		if resp := ep.Handle(context.Background(), s, request(i+1, "logging/setLevel", map[string]any{"level": "info"}), newRecorder()); resp.Error != nil {
			t.Fatal(resp.Error)
		}
	}
	for i, s := range []*Session{a, b} {
		text := []string{"of A", "of B"}[i]
		if resp := ep.Handle(context.Background(), s, request(10+i, "tools/call", map[string]any{"name": "p__log", "arguments": map[string]any{"text": text, "laterMs": 50}}), newRecorder()); resp.Error != nil {
			t.Fatal(resp.Error)
		}
	}
	if m := outA.next(t, "notifications/message", 5*time.Second); !strings.Contains(string(m.Params), "of A (later)") {
		t.Fatalf("A got %s", m.Params)
	}
	if m := outB.next(t, "notifications/message", 5*time.Second); !strings.Contains(string(m.Params), "of B (later)") {
		t.Fatalf("B got %s", m.Params)
	}
	// Requests answered after the lines: nothing else is on its way.
	for i, s := range []*Session{a, b} {
		ep.Handle(context.Background(), s, request(20+i, "tools/call", map[string]any{"name": "p__echo", "arguments": map[string]any{"text": "sync"}}), newRecorder())
	}
	if outA.count("notifications/message") != 1 || outB.count("notifications/message") != 1 {
		t.Fatalf("lines: A %d, B %d, want one each, its own", outA.count("notifications/message"), outB.count("notifications/message"))
	}
}

// A change of several lists behind one notification is told once.
func TestListsChangedIsToldOncePerNotification(t *testing.T) {
	w := newWorld(t, twoFixtures)
	ep := w.gw.Aggregate()
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	w.gw.ListsChanged(w.fleet.Get("a"), []catalog.ListKind{catalog.Resources, catalog.Templates, catalog.Tools})
	if n := out.count("notifications/resources/list_changed"); n != 1 {
		t.Fatalf("%d resources/list_changed for resources and templates, want 1", n)
	}
	if n := out.count("notifications/tools/list_changed"); n != 1 {
		t.Fatalf("%d tools/list_changed, want 1", n)
	}
	if n := out.count("notifications/prompts/list_changed"); n != 0 {
		t.Fatalf("%d prompts/list_changed for no prompts change", n)
	}
}

// A server left out of the aggregated list because it could not start is
// announced when a later list includes it: clients that listed without it
// are told the list changed.
func TestAServerBackInTheListIsAnnounced(t *testing.T) {
	broken := t.TempDir() + "/broken"
	if err := writeFile(broken); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"s":{"command":"/bin/sh","args":["-c","test -e `+broken+` && exit 3; exec $0","$FIXTURE"]}}`)
	ep := w.gw.Aggregate()
	out := newRecorder()
	sess := ep.Open(out)
	defer ep.Close(sess)
	list := func(id int) string {
		resp := ep.Handle(context.Background(), sess, request(id, "tools/list", nil), newRecorder())
		if resp.Error != nil {
			t.Fatal(resp.Error)
		}
		return string(resp.Result)
	}
	if l := list(1); strings.Contains(l, "s__echo") || !strings.Contains(l, "a__echo") {
		t.Fatalf("first list: %s", l)
	}
	if n := out.count("notifications/tools/list_changed"); n != 0 {
		t.Fatalf("%d list_changed before anything changed", n)
	}
	if err := removeFile(broken); err != nil {
		t.Fatal(err)
	}
	w.gw.agg.invalidate() // as the next list after a miss or a change would
	if l := list(2); !strings.Contains(l, "s__echo") {
		t.Fatalf("the server that can start now is not listed: %s", l)
	}
	if n := out.count("notifications/tools/list_changed"); n != 1 {
		t.Fatalf("%d list_changed once the server was back, want 1", n)
	}
}

// A per-session server's shared instance serves no session: a resource
// update it sends reaches no subscriber, while the same update from a
// session's own instance reaches that session.
func TestPerSessionSharedInstanceUpdatesReachNoOne(t *testing.T) {
	w := newWorld(t, `{"p":{"command":"$FIXTURE","sharing":"per-session"}}`)
	ep := w.gw.Aggregate()
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	srv := w.fleet.Get("p")
	w.gw.interests.Subscribe(srv, s.Key(), bookInstance(srv, legacySender(s)), "test://x")
	update := &rpc.Message{Method: "notifications/resources/updated", Params: json.RawMessage(`{"uri":"test://x"}`)}
	w.gw.Notification(fleet.Source{Server: srv}, update)
	w.gw.Notification(fleet.Source{Server: srv, Session: s.Key()}, update)
	if m := out.next(t, "notifications/resources/updated", 5*time.Second); m == nil {
		t.Fatal("the session's own instance's update did not arrive")
	}
	if n := out.count("notifications/resources/updated"); n != 1 {
		t.Fatalf("the session got %d updates, want only its own instance's", n)
	}
}
