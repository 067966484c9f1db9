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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
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
	defer client.Close()
	conn := <-accepted
	if conn == nil {
		b.Fatal("no connection")
	}
	defer conn.Close()

	h := NewStreamableHandler(benchEndpoint{}, HTTPOptions{})
	defer h.Close()
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, conn.LocalAddr())
	w := &deadlineWriter{hdr: http.Header{}, conn: conn}
	body := &rewindBody{}
	r, err := http.NewRequestWithContext(ctx, "POST", "http://"+conn.LocalAddr().String()+"/mcp", body)
	if err != nil {
		b.Fatal(err)
	}
	r.Host = conn.LocalAddr().String()
	r.Header.Set("Accept", httpAccept)
	r.Header.Set("Content-Type", "application/json")

	post := func(msg []byte) {
		body.Reset(msg)
		r.ContentLength = int64(len(msg))
		clear(w.hdr)
		w.status, w.n = 0, 0
		h.ServeHTTP(w, r)
		_ = conn.SetWriteDeadline(time.Time{})
		_ = conn.SetReadDeadline(time.Time{})
	}
	post([]byte(httpInit))
	sid := w.hdr.Get("Mcp-Session-Id")
	if sid == "" {
		b.Fatalf("initialize: %d, no session", w.status)
	}
	r.Header.Set("Mcp-Session-Id", sid)
	r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	b.ReportAllocs()
	for b.Loop() {
		post(benchCall)
		if w.n != len(benchReply) {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
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
