package gateway

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkStreamableHandle is the handler's own cost for one POST of a
// tools/call, without the network and the load client that dominate
// BenchmarkStreamablePost: ServeHTTP is called directly, with a
// ResponseWriter whose deadlines are those of a real TCP connection (so
// that arming them costs what it costs under net/http, which clears both
// after each request, as done here) and whose body goes nowhere.
func BenchmarkStreamableHandle(b *testing.B) {
	h := NewStreamableHandler(benchEndpoint{}, HTTPOptions{})
	defer h.Close()
	rig := newHandleRig(b, h)
	rig.r.Header.Set("Accept", httpAccept)
	rig.r.Header.Set("Content-Type", "application/json")
	rig.post([]byte(httpInit))
	sid := rig.w.hdr.Get("Mcp-Session-Id")
	if sid == "" {
		b.Fatalf("initialize: %d, no session", rig.w.status)
	}
	rig.r.Header.Set("Mcp-Session-Id", sid)
	rig.r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	b.ReportAllocs()
	for b.Loop() {
		rig.post(benchCall)
		if rig.w.n != len(benchReply) {
			b.Fatalf("status %d, %d bytes", rig.w.status, rig.w.n)
		}
	}
}

// handleRig calls a handler's ServeHTTP directly with one reusable
// request, whose context carries the local address of a real loopback TCP
// connection and whose ResponseWriter arms that connection's deadlines
// (so that arming them costs what it costs under net/http, which clears
// both after each request, as post does).
type handleRig struct {
	h    http.Handler
	ctx  context.Context // the connection's: each request's derives from it
	conn net.Conn
	w    *deadlineWriter
	r    *http.Request
	body *rewindBody
}

// newHandleRig connects a loopback pair for h; both ends close with b.
func newHandleRig(b testing.TB, h http.Handler) *handleRig {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	conn := <-accepted
	if conn == nil {
		b.Fatal("no connection")
	}
	b.Cleanup(func() { conn.Close() })
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, conn.LocalAddr())
	rig := &handleRig{h: h, ctx: ctx, conn: conn, w: &deadlineWriter{hdr: http.Header{}, conn: conn}, body: &rewindBody{}}
	if rig.r, err = http.NewRequestWithContext(ctx, "POST", "http://"+conn.LocalAddr().String()+"/mcp", rig.body); err != nil {
		b.Fatal(err)
	}
	rig.r.Host = conn.LocalAddr().String()
	return rig
}

// post serves one POST of msg; the reply's status, headers and size are
// in rig.w after.
func (rig *handleRig) post(msg []byte) {
	rig.body.Reset(msg)
	rig.r.ContentLength = int64(len(msg))
	clear(rig.w.hdr)
	rig.w.status, rig.w.n = 0, 0
	// As net/http serves each request: its own context, ended after it.
	ctx, cancel := context.WithCancel(rig.ctx)
	rig.h.ServeHTTP(rig.w, rig.r.WithContext(ctx))
	cancel()
	_ = rig.conn.SetWriteDeadline(time.Time{})
	_ = rig.conn.SetReadDeadline(time.Time{})
}

// deadlineWriter is an http.ResponseWriter whose deadlines are conn's and
// whose body is only counted.
type deadlineWriter struct {
	hdr    http.Header
	conn   net.Conn
	status int
	n      int
}

func (w *deadlineWriter) Header() http.Header                { return w.hdr }
func (w *deadlineWriter) WriteHeader(status int)             { w.status = status }
func (w *deadlineWriter) Write(b []byte) (int, error)        { w.n += len(b); return len(b), nil }
func (w *deadlineWriter) Flush()                             {}
func (w *deadlineWriter) SetReadDeadline(t time.Time) error  { return w.conn.SetReadDeadline(t) }
func (w *deadlineWriter) SetWriteDeadline(t time.Time) error { return w.conn.SetWriteDeadline(t) }

// rewindBody is a request body that can be reused.
type rewindBody struct{ bytes.Reader }

func (b *rewindBody) Close() error { return nil }
