package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// A Wait interrupted leaves the request pending: its response goes to the
// next Wait, made from another goroutine, and nothing is sent to the peer.
func TestPendingWaitInterruptedThenAnswered(t *testing.T) {
	c, p, pend, req := startInterrupted(t)
	if n := c.pendingLen(); n != 1 {
		t.Fatalf("%d calls pending after the interrupt, want 1", n)
	}
	got := make(chan *Message, 1)
	go func() {
		m, interrupted, err := pend.Wait(context.Background(), nil)
		if interrupted || err != nil {
			t.Errorf("second Wait: %v, %v", interrupted, err)
		}
		got <- m
	}()
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"ok":true}}`)
	if m := <-got; m == nil || string(m.Result) != `{"ok":true}` {
		t.Fatalf("second Wait got %v", m)
	}
	if n := c.pendingLen(); n != 0 {
		t.Fatalf("%d calls pending", n)
	}
}

// A Wait whose ctx ends after an interrupted one cancels the request at
// the peer, as Call does.
func TestPendingWaitCancelAfterInterrupt(t *testing.T) {
	c, p, pend, req := startInterrupted(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, interrupted, err := pend.Wait(ctx, nil); interrupted || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, %v; want context.Canceled", interrupted, err)
	}
	note := p.read()
	if note.Method != "notifications/cancelled" || string(CancelledRequestID(note.Params)) != string(req.ID) {
		t.Fatalf("the peer got %+v", note)
	}
	if n := c.pendingLen(); n != 0 {
		t.Fatalf("%d calls pending", n)
	}
}

// startInterrupted starts a call the peer reads and does not answer, and
// interrupts a Wait for it.
func startInterrupted(t *testing.T) (*Conn, *testPeer, *Pending, *Message) {
	t.Helper()
	c, p := startConn(t, Options{})
	pend, err := c.Start(context.Background(), "tools/call", json.RawMessage(`{"name":"slow"}`))
	if err != nil {
		t.Fatal(err)
	}
	req := p.read()
	stop := make(chan struct{})
	close(stop)
	if m, interrupted, err := pend.Wait(context.Background(), stop); !interrupted || m != nil || err != nil {
		t.Fatalf("Wait = %v, %v, %v; want interrupted", m, interrupted, err)
	}
	return c, p, pend, req
}
