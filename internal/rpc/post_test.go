package rpc

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Post queues a line and returns at once, even when the peer reads
// nothing; with FlushAtEOF the peer's EOF waits until what was posted
// before it is written.
func TestPostAndFlushAtEOF(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var c *Conn
	posted := make(chan struct{})
	c = NewConn(inR, outW, Options{FlushAtEOF: true, Handler: func(ctx context.Context, m *Message) {
		// Nobody reads the output yet: a Write would wait; Post does not.
		if err := c.Post(&Message{ID: m.ID, Error: &Error{Code: InvalidRequest, Message: "refused"}}); err != nil {
			t.Error(err)
		}
		close(posted)
	}})
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	go func() {
		io.WriteString(inW, `{"jsonrpc":"2.0","id":7,"method":"x"}`+"\n")
		inW.Close()
	}()
	select {
	case <-posted:
	case <-time.After(10 * time.Second):
		t.Fatal("Post waited for a peer that reads nothing")
	}
	// Only now does the peer read: the EOF it sent held the connection
	// open until the posted line was written.
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":7`) || !strings.Contains(line, "refused") {
		t.Fatalf("the posted reply: %q %v", line, err)
	}
	if err := <-done; err == nil {
		t.Fatal("Run returned nil at the peer's EOF")
	}
	if err := c.Post(&Message{}); err == nil {
		t.Fatal("Post of a message with neither method nor id")
	}
}

// FlushAtEOF's wait for what is queued is bounded by WriteTimeout: a peer
// that closes its output and never reads again does not hold the
// connection open.
func TestFlushAtEOFIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inR, inW := io.Pipe()
		_, outW := io.Pipe() // nobody reads it
		var c *Conn
		c = NewConn(inR, outW, Options{FlushAtEOF: true, WriteTimeout: time.Second, Handler: func(ctx context.Context, m *Message) {
			_ = c.Post(&Message{ID: m.ID, Error: &Error{Code: InvalidRequest, Message: "refused"}})
		}})
		done := make(chan error, 1)
		go func() { done <- c.Run(context.Background()) }()
		io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"x"}`+"\n")
		inW.Close()
		start := time.Now()
		<-done // without the bound: every goroutine blocked, and synctest says so
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the EOF waited %v for a peer that reads nothing, bound 1s", d)
		}
	})
}
