package rpc

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errOwnCause = errors.New("the caller's own reason")

// CallAbort: abort closed while the peer has the request cancels it there
// with the caller's cause, forgets it, and returns context.Canceled; the
// context still bounds it as Call's does; an answer is returned.
func TestCallAbort(t *testing.T) {
	t.Run("aborted", func(t *testing.T) {
		c, p := startConn(t, Options{})
		abort := make(chan struct{})
		got := make(chan result, 1)
		go func() {
			m, err := c.CallAbort(context.Background(), abort, func() error { return errOwnCause }, "tools/call", []byte(`{"name":"slow"}`))
			got <- result{m, err}
		}()
		req := p.read()
		close(abort)
		if r := <-got; !errors.Is(r.err, context.Canceled) || r.msg != nil {
			t.Fatalf("CallAbort = %v, %v; want context.Canceled", r.msg, r.err)
		}
		note := p.read()
		if note.Method != "notifications/cancelled" || string(CancelledRequestID(note.Params)) != string(req.ID) {
			t.Fatalf("after the abort the peer got %+v", note)
		}
		if reason := field(note.Params, "reason"); string(reason) != `"`+errOwnCause.Error()+`"` {
			t.Fatalf("reason %s, want the caller's cause", reason)
		}
		if n := c.pendingLen(); n != 0 {
			t.Fatalf("%d calls pending after the abort", n)
		}
	})
	t.Run("context ended", func(t *testing.T) {
		c, p := startConn(t, Options{})
		ctx, cancel := context.WithCancelCause(context.Background())
		got := make(chan result, 1)
		go func() {
			m, err := c.CallAbort(ctx, make(chan struct{}), func() error { return errOwnCause }, "tools/call", nil)
			got <- result{m, err}
		}()
		p.read()
		cancel(errors.New("client gone"))
		if r := <-got; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("CallAbort = %v; want context.Canceled", r.err)
		}
		if reason := field(p.read().Params, "reason"); string(reason) != `"client gone"` {
			t.Fatalf("reason %s, want the context's cause", reason)
		}
	})
	t.Run("answered", func(t *testing.T) {
		c, p := startConn(t, Options{})
		got := make(chan result, 1)
		go func() {
			m, err := c.CallAbort(context.Background(), nil, nil, "ping", nil)
			got <- result{m, err}
		}()
		req := p.read()
		p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"ok":true}}`)
		if r := <-got; r.err != nil || string(r.msg.Result) != `{"ok":true}` {
			t.Fatalf("CallAbort = %v, %v", r.msg, r.err)
		}
	})
	t.Run("aborted before", func(t *testing.T) {
		c, _ := startConn(t, Options{})
		abort := make(chan struct{})
		close(abort)
		if _, err := c.CallAbort(context.Background(), abort, nil, "m", nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("CallAbort with abort closed = %v", err)
		}
		if n := c.pendingLen(); n != 0 {
			t.Fatalf("%d calls pending", n)
		}
	})
}

// A request that waits for room in a full write queue (the peer reads
// nothing) returns at the abort, and nothing of it is queued.
func TestCallAbortWhileWaitingForRoom(t *testing.T) {
	c, _ := pipeConn(t, Options{})
	note := errAsync(func() error { return c.NotifyContext(t.Context(), "huge-note", []byte(hugeParams)) })
	waitTaken(t, c)
	queued := callAsync(t.Context(), c, "huge-call", hugeParams)
	waitQueued(t, c, 1) // over the queue's bound now
	abort := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		_, err := c.CallAbort(t.Context(), abort, func() error { return errOwnCause }, "small", nil)
		got <- err
	}()
	// Waiting for room once the queue's room channel exists.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.wmu.Lock()
		waiting := c.wr.room != nil
		c.wmu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("CallAbort never waited for room")
		}
	}
	close(abort)
	if err := within(t, "CallAbort", got, time.Now().Add(slack)); !errors.Is(err, context.Canceled) {
		t.Fatalf("CallAbort = %v, want context.Canceled", err)
	}
	if n := c.queuedLen(); n != 1 {
		t.Fatalf("%d lines queued, want the huge call's only", n)
	}
	c.Close()
	<-note
	<-queued
}
