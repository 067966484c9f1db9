package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"
)

// testPeer is the far end of a Conn under test, driven by hand.
type testPeer struct {
	t   testing.TB
	in  *bufio.Reader  // the lines the conn wrote
	inR *io.PipeReader // ... the pipe under it
	out *io.PipeWriter // lines to the conn
}

// read reads and decodes the next line the conn wrote.
func (p *testPeer) read() *Message {
	p.t.Helper()
	line, err := p.in.ReadBytes('\n')
	if err != nil {
		p.t.Fatalf("peer read: %v", err)
	}
	m, err := Decode(line)
	if err != nil {
		p.t.Fatalf("peer decode %q: %v", line, err)
	}
	return m
}

// send writes one line (a newline is added) to the conn.
func (p *testPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.out, line+"\n"); err != nil {
		p.t.Fatalf("peer write: %v", err)
	}
}

// errSink collects what a Conn reports to OnError.
type errSink chan error

func (s errSink) onError(err error) { s <- err }

func (s errSink) next(t testing.TB) error {
	t.Helper()
	select {
	case err := <-s:
		return err
	default:
		t.Fatal("no error was reported")
		return nil
	}
}

// startConn runs a Conn on two pipes whose far ends the returned peer
// holds. Everything is closed and Run awaited at the end of the test.
func startConn(t testing.TB, opts Options) (*Conn, *testPeer) {
	t.Helper()
	connR, peerW := io.Pipe()
	peerR, connW := io.Pipe()
	c := NewConn(connR, connW, opts)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	p := &testPeer{t: t, in: bufio.NewReader(peerR), inR: peerR, out: peerW}
	t.Cleanup(func() {
		c.Close()
		peerW.Close()
		peerR.Close()
		<-ran
	})
	return c, p
}

// echoPair returns a Conn whose peer is another Conn answering every
// request with its params as the result, over io.Pipes.
func echoPair(tb testing.TB) *Conn {
	tb.Helper()
	aR, bW := io.Pipe()
	bR, aW := io.Pipe()
	return echoPairOver(tb, aR, aW, bR, bW)
}

// echoPairOS is echoPair over os.Pipes, as between mcpvisor and a child.
func echoPairOS(tb testing.TB) *Conn {
	tb.Helper()
	aR, bW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	bR, aW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	return echoPairOver(tb, aR, aW, bR, bW)
}

func echoPairOver(tb testing.TB, aR io.Reader, aW io.Writer, bR io.Reader, bW io.Writer) *Conn {
	a := NewConn(aR, aW, Options{})
	var b *Conn
	b = NewConn(bR, bW, Options{Handler: func(_ context.Context, m *Message) {
		if m.IsRequest() {
			_ = b.Reply(m.ID, m.Params)
		}
	}})
	ranA, ranB := make(chan error, 1), make(chan error, 1)
	go func() { ranA <- a.Run(context.Background()) }()
	go func() { ranB <- b.Run(context.Background()) }()
	tb.Cleanup(func() {
		a.Close()
		b.Close()
		<-ranA
		<-ranB
	})
	return a
}

// callAsync runs c.Call on another goroutine.
func callAsync(ctx context.Context, c *Conn, method string, params string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		var p json.RawMessage
		if params != "" {
			p = json.RawMessage(params)
		}
		m, err := c.Call(ctx, method, p)
		ch <- result{m, err}
	}()
	return ch
}

func (c *Conn) pendingLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// valid reports whether d is exactly one JSON value, with optional white
// space around it: the scanner's verdict on a whole input, which the tests
// compare with json.Valid's.
func valid(d []byte) bool {
	i := skipSpace(d, 0)
	end, err := skipValue(d, i, 0)
	return err == nil && skipSpace(d, end) == len(d)
}
