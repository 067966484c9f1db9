package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

func rpcNotification(method, params string) *rpc.Message {
	return &rpc.Message{Method: method, Params: json.RawMessage(params)}
}

// dial opens a connection to s, sends req on it, and closes it with the
// test.
func (s *httpTestServer) dial(req string) net.Conn {
	s.t.Helper()
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, req); err != nil {
		s.t.Fatal(err)
	}
	return conn
}

// slowRead reads everything from conn, 64 KiB every 10 ms: a slow client
// that keeps reading.
func slowRead(conn net.Conn) (int, error) {
	buf := make([]byte, 64<<10)
	total := 0
	for {
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := conn.Read(buf)
		total += n
		if err != nil {
			return total, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WriteTimeout bounds each 256 KiB of a write, not the whole: a reply that
// takes a slow client longer than WriteTimeout to read, read steadily,
// arrives whole.
func TestHTTPWriteTimeoutPerPiece(t *testing.T) {
	for _, k := range deadlineKeepers {
		t.Run(k.name, func(t *testing.T) { testHTTPWriteTimeoutPerPiece(t, k.config) })
	}
}

func testHTTPWriteTimeoutPerPiece(t *testing.T, config func(*httptest.Server)) {
	const timeout = 500 * time.Millisecond
	s := newHTTPTestServerWith(t, HTTPOptions{WriteTimeout: timeout}, config)
	sid := s.initialize()

	// A JSON reply of 8 MB.
	conn := s.dial(fmt.Sprintf("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		sid, len(bigCall), bigCall))
	start := time.Now()
	n, err := slowRead(conn)
	if err != io.EOF || n < 8<<20 {
		t.Fatalf("read %d bytes of the reply: %v", n, err)
	}
	if took := time.Since(start); took < timeout {
		t.Logf("the reply took %v, less than WriteTimeout: the test proves nothing on this machine", took)
	}

	// A GET stream event of 8 MB.
	params := `{"blob":"` + strings.Repeat("x", 8<<20) + `"}`
	if err := s.fake.session(sid).Out().Send(rpcNotification("notifications/message", params)); err != nil {
		t.Fatal(err)
	}
	conn = s.dial("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: " + sid + "\r\n\r\n")
	waitFor(t, "the GET stream to open", func() bool { return hasGET(s.h, sid) })
	r := bufio.NewReaderSize(&slowConn{conn}, 64<<10)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	sr := newSSEReader(resp.Body) // not closed: that would read the endless stream

	ev, err := sr.next()
	if err != nil || len(ev.data) < 8<<20 {
		t.Fatalf("the event: %d bytes, %v", len(ev.data), err)
	}
	if s.h.Sessions() != 1 {
		t.Fatal("the slow client's session was dropped")
	}
}

const bigCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big","arguments":{"mb":8}}}`

// slowConn reads at most 64 KiB per 10 ms.
type slowConn struct{ net.Conn }

func (c *slowConn) Read(p []byte) (int, error) {
	time.Sleep(10 * time.Millisecond)
	_ = c.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	return c.Conn.Read(p[:min(len(p), 64<<10)])
}

// Defaults of the options that must never be unbounded.
func TestHTTPOptionDefaults(t *testing.T) {
	for _, opts := range []HTTPOptions{{}, {BodyTimeout: -1, WriteTimeout: -1, MaxSessions: -1}} {
		h := NewStreamableHandler(newHTTPFake(), opts)
		if h.bodyWait != DefaultBodyTimeout || h.writeWait != DefaultWriteTimeout || h.limit.Max() != DefaultMaxSessions || h.grace != closeGrace {
			t.Errorf("%+v: body %v, write %v, sessions %d, grace %v", opts, h.bodyWait, h.writeWait, h.limit.Max(), h.grace)
		}
		h.Close()
	}
	h := NewStreamableHandler(newHTTPFake(), HTTPOptions{WriteTimeout: 100 * time.Millisecond})
	defer h.Close()
	if h.grace != 100*time.Millisecond {
		t.Errorf("the close grace %v exceeds WriteTimeout", h.grace)
	}
}
