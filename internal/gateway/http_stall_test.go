package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/conndeadline"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// deadlineKeepers are the two kinds of connection the stall tests run
// on: the runtime's deadlines, and deadlines kept by a
// conndeadline.Listener, as mcpvisor serve's are.
var deadlineKeepers = []struct {
	name   string
	config func(*httptest.Server)
}{
	{"runtime", nil},
	{"conndeadline", func(srv *httptest.Server) { srv.Listener = conndeadline.NewListener(srv.Listener) }},
}

// stalledConn opens a connection to s that reads as little as the kernel
// lets it and never reads itself, sends req (a request head, maybe with a
// body) on it, and closes it with the test.
func (s *httpTestServer) stalledConn(req string) net.Conn {
	s.t.Helper()
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(conn, req); err != nil {
		s.t.Fatal(err)
	}
	return conn
}

// stalledGET opens a GET stream for sid that is never read.
func (s *httpTestServer) stalledGET(sid string) {
	s.t.Helper()
	s.stalledConn("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: " + sid + "\r\n\r\n")
	waitFor(s.t, "the GET stream to open", func() bool { return hasGET(s.h, sid) })
}

// stalledPOST posts body for sid, accepting accept, and never reads the
// reply.
func (s *httpTestServer) stalledPOST(sid, accept, body string) {
	s.t.Helper()
	s.stalledConn(fmt.Sprintf("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: %s\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s",
		accept, sid, len(body), body))
}

// pushMB sends n notifications of about 1 MB each to sid's GET stream:
// far more than the loopback connection's buffers hold.
func (s *httpTestServer) pushMB(sid string, n int) {
	s.t.Helper()
	params := json.RawMessage(`{"blob":"` + strings.Repeat("x", 1<<20) + `"}`)
	out := s.fake.session(sid).Out()
	for range n {
		if err := out.Send(&rpc.Message{Method: "notifications/message", Params: params}); err != nil {
			s.t.Fatalf("Send: %v", err)
		}
	}
}

// A GET stream whose client stops reading is dropped after WriteTimeout,
// and its session with it: nothing can reach that client any more.
func TestStreamableStalledGETIsDropped(t *testing.T) {
	for _, k := range deadlineKeepers {
		t.Run(k.name, func(t *testing.T) { testStreamableStalledGETIsDropped(t, k.config) })
	}
}

func testStreamableStalledGETIsDropped(t *testing.T, config func(*httptest.Server)) {
	s := newHTTPTestServerWith(t, HTTPOptions{WriteTimeout: 200 * time.Millisecond, EventBuffer: 64}, config)
	sid := s.initialize()
	s.pushMB(sid, 64)
	s.stalledGET(sid)
	waitFor(t, "the stalled client's session to be dropped", func() bool { return s.h.Sessions() == 0 })
	if got := <-s.fake.closedCh; got.ID != sid {
		t.Fatalf("endpoint closed %q, want %q", got.ID, sid)
	}
	if st := s.status("POST", sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil); st != 404 {
		t.Fatalf("the dropped session answers %d, want 404", st)
	}
}

// A GET stream blocked on a client that stopped reading cannot hold a
// graceful shutdown: Close ends it within the close grace, however long
// WriteTimeout is.
func TestStreamableShutdownWithStalledGET(t *testing.T) {
	for _, k := range deadlineKeepers {
		t.Run(k.name, func(t *testing.T) { testStreamableShutdownWithStalledGET(t, k.config) })
	}
}

func testStreamableShutdownWithStalledGET(t *testing.T, config func(*httptest.Server)) {
	s := newHTTPTestServerWith(t, HTTPOptions{WriteTimeout: time.Hour, EventBuffer: 64}, config)
	sid := s.initialize()
	s.pushMB(sid, 64)
	s.stalledGET(sid)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- s.srv.Config.Shutdown(ctx) }()
	s.h.Close()
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v after %v", err, time.Since(start))
	}
	if s.h.Sessions() != 0 || s.fake.closed.Load() != 1 {
		t.Fatalf("after shutdown: %d sessions, %d closed by the endpoint", s.h.Sessions(), s.fake.closed.Load())
	}
}

// A newer GET replaces a stalled one at once; the session stays.
func TestStreamableStalledGETReplaced(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{WriteTimeout: time.Hour, EventBuffer: 64})
	sid := s.initialize()
	s.pushMB(sid, 64)
	s.stalledGET(sid)
	resp, r := s.openGET(sid, "")
	defer resp.Body.Close()
	waitFor(t, "the stalled GET stream to end", func() bool { return activeOf(s.h, sid) == 1 })
	if s.h.Sessions() != 1 {
		t.Fatalf("Sessions() = %d after a replaced stream", s.h.Sessions())
	}
	// The newer stream carries the session's messages on, from the first
	// the stalled one did not hand to the kernel (how many it did depends
	// on the socket buffers).
	ev, err := r.next()
	if err != nil {
		t.Fatalf("the newer stream: %v", err)
	}
	stream, seq, ok := parseEventID(ev.id)
	if !ok || stream != 0 || seq < 1 || seq > 64 {
		t.Fatalf("the newer stream's first event id %q, want one of the 64 pushed", ev.id)
	}
}

// A POST's event stream whose client stops reading ends after
// WriteTimeout: the request's further messages are refused and its
// handler returns. The session stays.
func TestStreamableStalledPOSTStream(t *testing.T) {
	for _, k := range deadlineKeepers {
		t.Run(k.name, func(t *testing.T) { testStreamableStalledPOSTStream(t, k.config) })
	}
}

func testStreamableStalledPOSTStream(t *testing.T, config func(*httptest.Server)) {
	s := newHTTPTestServerWith(t, HTTPOptions{WriteTimeout: 200 * time.Millisecond, EventBuffer: 4}, config)
	sid := s.initialize()
	s.stalledPOST(sid, httpAccept, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"flood"}}`)
	waitFor(t, "the request to be in flight", func() bool { return activeOf(s.h, sid) == 1 })
	waitFor(t, "the stalled POST to end", func() bool { return activeOf(s.h, sid) == 0 })
	if s.h.Sessions() != 1 {
		t.Fatalf("Sessions() = %d", s.h.Sessions())
	}
}

// A JSON reply whose client does not read it is given WriteTimeout.
func TestStreamableStalledJSONReply(t *testing.T) {
	for _, k := range deadlineKeepers {
		t.Run(k.name, func(t *testing.T) { testStreamableStalledJSONReply(t, k.config) })
	}
}

func testStreamableStalledJSONReply(t *testing.T, config func(*httptest.Server)) {
	s := newHTTPTestServerWith(t, HTTPOptions{WriteTimeout: 200 * time.Millisecond}, config)
	sid := s.initialize()
	s.stalledPOST(sid, "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big","arguments":{"mb":32}}}`)
	waitFor(t, "the request to be in flight", func() bool { return activeOf(s.h, sid) == 1 })
	waitFor(t, "the stalled reply to end", func() bool { return activeOf(s.h, sid) == 0 })
}
