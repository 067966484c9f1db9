package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// The registry's invariant: a call is in its session's calls from
// register to endCall, and a session's calls end when it closes. A
// legacy client may send a second request under the id of one still in
// flight (nothing refuses it): the session's close ends both, not only
// the later one.
func TestSessionCloseEndsCallsOfARepeatedID(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	ep := w.gw.Aggregate()
	s := ep.Open(newRecorder())
	done := make(chan *rpc.Message, 2)
	for range 2 {
		go func() {
			done <- ep.Handle(context.Background(), s, request(7, "tools/call", map[string]any{"name": "a__sleep", "arguments": map[string]any{"ms": 20000}}), newRecorder())
		}()
	}
	waitFor(t, "both calls in flight", func() bool {
		w.gw.reg.mu.Lock()
		defer w.gw.reg.mu.Unlock()
		n := 0
		for _, list := range w.gw.reg.calls {
			n += len(list)
		}
		return n == 2
	})
	ep.Close(s)
	for i := range 2 {
		select {
		case resp := <-done:
			if resp.Error == nil {
				t.Fatalf("call %d of the closed session answered: %s", i, resp.Encode())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 2 calls with a repeated id still run 5s after their session closed", 2-i)
		}
	}
}

// An outgoing request's wait ends exactly once, whichever of its takes —
// the client's answer, its timeout, the server's withdrawal, the
// session's close — come together: one of them has it, and its call's
// count of requests waiting on the client goes back to zero, not below.
func TestOutgoingRequestTakenExactlyOnce(t *testing.T) {
	conn := &nopConn{}
	for i := range 2000 {
		reg := newRegistry()
		s := NewSession(noSink)
		reg.open(s, nil)
		c := reg.sessionCall(s)
		c.waiting.Add(1)
		r := &outReq{call: c, conn: conn, backendID: json.RawMessage(`1`), sess: s}
		if err := reg.addOutReq(c, "ours", r); err != nil {
			t.Fatal(err)
		}
		var took atomic.Int32
		count := func(x *outReq) {
			if x != nil {
				took.Add(1)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; count(reg.takeOutReqOf(s, "ours")) })
		wg.Go(func() { <-start; count(reg.takeOutReq("ours")) })
		wg.Go(func() { <-start; _, x := reg.withdraw(conn, json.RawMessage(`1`)); count(x) })
		wg.Go(func() {
			<-start
			_, _, reqs, _ := reg.closeSession(s)
			for _, x := range reqs {
				count(x)
			}
		})
		close(start)
		wg.Wait()
		if n, w := took.Load(), c.waiting.Load(); n != 1 || w != 0 {
			t.Fatalf("round %d: %d takes had the request, its call counts %d waiting; want 1 and 0", i, n, w)
		}
	}
}

// No call of a legacy session registers once it closed: a request that
// comes after the close is answered "session closed", reaches no server,
// and leaves nothing in the registry.
func TestClosedSessionRegistersNoCall(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE","sharing":"per-session"}}`)
	ep := w.gw.Aggregate()
	s := ep.Open(newRecorder())
	ep.Close(s)
	resp := ep.Handle(context.Background(), s, request(1, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "late"}}), newRecorder())
	if resp == nil || resp.Error == nil || resp.Error.Message != "session closed" {
		t.Fatalf("a request after its session closed: %v", resp)
	}
	if c := w.gw.reg.callOf(s, json.RawMessage(`1`)); c != nil {
		t.Fatal("a call of a closed session is in the registry")
	}
	if n := w.fleet.Get("a").Status().Sessions; n != 0 {
		t.Fatalf("a closed session's request made %d per-session instances", n)
	}
}
