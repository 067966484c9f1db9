package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/conndeadline"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// rawPOST opens a connection to s and sends the head of a POST with the
// given Content-Length (-1: chunked, which the caller then writes) and
// the first bytes of its body. The connection is closed with the test.
func (s *httpTestServer) rawPOST(sid string, contentLength int64, body string) net.Conn {
	s.t.Helper()
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: %s\r\nContent-Type: application/json\r\n", httpAccept)
	if sid != "" {
		fmt.Fprintf(&b, "Mcp-Session-Id: %s\r\n", sid)
	}
	if contentLength >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", contentLength)
	} else {
		b.WriteString("Transfer-Encoding: chunked\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		s.t.Fatal(err)
	}
	return conn
}

// readRawResponse reads the response on conn, failing the test if none
// comes within bound.
func readRawResponse(t *testing.T, conn net.Conn, bound time.Duration) (*http.Response, *rpc.Message) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(bound))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response within %v: %v", bound, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("response body: %v", err)
	}
	m, err := rpc.Decode(b)
	if err != nil {
		t.Fatalf("response body %q: %v", b, err)
	}
	return resp, m
}

// A body that trickles in, or stops, is given BodyTimeout to arrive: then
// the client gets 408, the handler returns and the connection closes.
// Either the handler bounds the body, or, with a ReadTimeout no longer
// than BodyTimeout, its server does (bodyBounds).
func TestHTTPBodyTrickleTimesOut(t *testing.T) {
	for _, b := range bodyBounds {
		t.Run(b.name, func(t *testing.T) { testBodyTrickleTimesOut(t, b.server) })
	}
}

// bodyBounds are the ways a body's time is bounded: by the handler's own
// read deadline (an http.Server without ReadTimeout, as a test's), or by
// a server whose ReadTimeout is BodyTimeout (as mcpvisor serve's); each
// on a connection of its own and on one whose deadlines a
// conndeadline.Listener keeps (as mcpvisor serve's).
var bodyBounds = []struct {
	name   string
	server func(timeout time.Duration) func(*httptest.Server)
}{
	{"handler's deadline", func(time.Duration) func(*httptest.Server) { return nil }},
	{"server's ReadTimeout", func(timeout time.Duration) func(*httptest.Server) {
		return func(srv *httptest.Server) { srv.Config.ReadTimeout = timeout }
	}},
	{"handler's deadline, kept by conndeadline", func(time.Duration) func(*httptest.Server) {
		return func(srv *httptest.Server) { srv.Listener = conndeadline.NewListener(srv.Listener) }
	}},
	{"server's ReadTimeout, kept by conndeadline", func(timeout time.Duration) func(*httptest.Server) {
		return func(srv *httptest.Server) {
			srv.Config.ReadTimeout = timeout
			srv.Listener = conndeadline.NewListener(srv.Listener)
		}
	}},
}

func testBodyTrickleTimesOut(t *testing.T, server func(time.Duration) func(*httptest.Server)) {
	const timeout = 200 * time.Millisecond
	s := newHTTPTestServerWith(t, HTTPOptions{BodyTimeout: timeout}, server(timeout))
	sid := s.initialize()
	for _, c := range []struct {
		name string
		sid  string
		cl   int64
		body string
	}{
		{"with a session, Content-Length", sid, 100, `{"jsonrpc":"2.0",`},
		{"initialize, Content-Length", "", 100, `{"jsonrpc":"2.0",`},
		{"chunked", sid, -1, "11\r\n{\"jsonrpc\":\"2.0\",\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			conn := s.rawPOST(c.sid, c.cl, c.body)
			resp, m := readRawResponse(t, conn, 10*time.Second)
			if resp.StatusCode != http.StatusRequestTimeout || m.Error == nil || m.Error.Code != rpc.InvalidRequest ||
				!strings.Contains(m.Error.Message, timeout.String()) {
				t.Fatalf("status %d, body %s; want 408 and an error naming %v", resp.StatusCode, m.Encode(), timeout)
			}
			if took := time.Since(start); took < timeout {
				t.Errorf("answered after %v, before the timeout", took)
			}
			// The connection ends: the body's rest can no longer be told
			// from a next request.
			if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("connection after the 408: %v, want EOF", err)
			}
			if c.sid != "" {
				waitFor(t, "the handler to return", func() bool { return activeOf(s.h, sid) == 0 })
			}
		})
	}
	// The session is still usable: its deadline did not outlive the body.
	if st := s.status("POST", sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil); st != http.StatusOK {
		t.Fatalf("ping after the timeouts: %d", st)
	}
}

// A body that arrived in time leaves no read deadline behind: a request
// that runs longer than BodyTimeout is not cancelled by it.
func TestHTTPBodyDeadlineIsCleared(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, b := range bodyBounds {
		t.Run(b.name, func(t *testing.T) {
			s := newHTTPTestServerWith(t, HTTPOptions{BodyTimeout: timeout}, b.server(timeout))
			sid := s.initialize()
			resp := s.do("POST", sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait","arguments":{"ms":`+
				strconv.Itoa(int(3*timeout/time.Millisecond))+`}}}`, nil)
			if m := decodeBody(t, resp); m.Error != nil || !strings.Contains(string(m.Result), "waited") {
				t.Fatalf("a call longer than BodyTimeout: %s", m.Encode())
			}
			// The same with a chunked body: lifted at its last chunk.
			body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"ms":` +
				strconv.Itoa(int(3*timeout/time.Millisecond)) + `}}}`
			req, err := http.NewRequest("POST", s.url, struct{ io.Reader }{strings.NewReader(body)}) // a length net/http cannot know: chunked
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", httpAccept)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Mcp-Session-Id", sid)
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if m := decodeBody(t, resp); m.Error != nil || !strings.Contains(string(m.Result), "waited") {
				t.Fatalf("a chunked call longer than BodyTimeout: %s", m.Encode())
			}
		})
	}
}

// readDeadlineCounter counts the read deadlines a handler sets through
// http.ResponseController, and passes them on.
type readDeadlineCounter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w readDeadlineCounter) SetReadDeadline(d time.Time) error {
	w.n.Add(1)
	return http.NewResponseController(w.ResponseWriter).SetReadDeadline(d)
}

func (w readDeadlineCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A server that bounds bodies itself — its ReadTimeout positive and no
// longer than BodyTimeout — spares each POST the handler's own read
// deadline; any other server gets one per POST.
func TestHTTPBodyDeadlineSetOnce(t *testing.T) {
	const timeout = 5 * time.Second
	for _, c := range []struct {
		name        string
		readTimeout time.Duration
		want        int64 // per POST
	}{
		{"no ReadTimeout", 0, 1},
		{"ReadTimeout = BodyTimeout", timeout, 0},
		{"ReadTimeout < BodyTimeout", timeout / 2, 0},
		{"ReadTimeout > BodyTimeout", 2 * timeout, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int64
			h := NewStreamableHandler(newHTTPFake(), HTTPOptions{BodyTimeout: timeout})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(readDeadlineCounter{w, &n}, r)
			}))
			srv.Config.ReadTimeout = c.readTimeout
			srv.Start()
			t.Cleanup(func() { h.Close(); srv.Close() })
			s := &httpTestServer{t: t, h: h, srv: srv, url: srv.URL}
			sid := s.initialize() // two POSTs: initialize, notifications/initialized
			const pings = 3
			for i := range pings {
				if st := s.status("POST", sid, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i+2)+`,"method":"ping"}`, nil); st != http.StatusOK {
					t.Fatalf("ping: %d", st)
				}
			}
			if got, want := n.Load(), c.want*(pings+2); got != want {
				t.Fatalf("%d read deadlines set by the handler for %d POSTs, want %d", got, pings+2, want)
			}
		})
	}
}

// On a connection whose deadlines a conndeadline.Listener keeps (as
// mcpvisor serve's are), a POST arms no runtime timer: the handler's
// body and reply deadlines, and net/http's, are only recorded. Counted
// on the connection beneath: deadlines still ahead when set (a deadline
// in the past, as net/http sets to end its background read, changes no
// timer). Without the listener the same POSTs set them (the count fails
// if it cannot see them).
func TestHTTPNoTimerPerPOST(t *testing.T) {
	for _, kept := range []bool{false, true} {
		t.Run(fmt.Sprintf("kept %v", kept), func(t *testing.T) {
			var reads, writes atomic.Int64
			s := newHTTPTestServerWith(t, HTTPOptions{}, func(srv *httptest.Server) {
				srv.Config.ReadHeaderTimeout, srv.Config.IdleTimeout = 10*time.Second, 2*time.Minute
				srv.Listener = deadlineCounter{srv.Listener, &reads, &writes}
				if kept {
					srv.Listener = conndeadline.NewListener(srv.Listener)
				}
			})
			sid := s.initialize()
			reads.Store(0)
			writes.Store(0)
			const pings = 5
			for i := range pings {
				if st := s.status("POST", sid, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i+2)+`,"method":"ping"}`, nil); st != http.StatusOK {
					t.Fatalf("ping: %d", st)
				}
			}
			r, w := reads.Load(), writes.Load()
			if kept && (r != 0 || w != 0) {
				t.Fatalf("%d read and %d write deadlines reached the connection for %d POSTs, want none", r, w, pings)
			}
			if !kept && (r < pings || w < pings) {
				t.Fatalf("%d read and %d write deadlines for %d POSTs without the listener: the count sees nothing", r, w, pings)
			}
		})
	}
}

// deadlineCounter counts the deadlines still ahead when set on its
// connections: those that arm or move a runtime timer.
type deadlineCounter struct {
	net.Listener
	reads, writes *atomic.Int64
}

func (l deadlineCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.reads, l.writes}, nil
}

type countingConn struct {
	net.Conn
	reads, writes *atomic.Int64
}

func (c countingConn) SetReadDeadline(d time.Time) error {
	if d.After(time.Now()) {
		c.reads.Add(1)
	}
	return c.Conn.SetReadDeadline(d)
}

func (c countingConn) SetWriteDeadline(d time.Time) error {
	if d.After(time.Now()) {
		c.writes.Add(1)
	}
	return c.Conn.SetWriteDeadline(d)
}

// Content-Length is a claim, not an allocation: a client announcing a
// gigabyte (within the limit) and sending a few bytes costs a few bytes.
func TestHTTPBodyNotPreallocated(t *testing.T) {
	const claimed = 1 << 30
	s := newHTTPTestServer(t, HTTPOptions{MaxBodyBytes: claimed, BodyTimeout: 100 * time.Millisecond})
	sid := s.initialize()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	conn := s.rawPOST(sid, claimed, `{"jsonrpc":"2.0","id":1,`)
	if resp, _ := readRawResponse(t, conn, 10*time.Second); resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408", resp.StatusCode)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("a body of %d claimed bytes cost %d MB of allocations", claimed, grew>>20)
	}
}

// Over the limit: 413 with a JSON-RPC error naming the limit, whether
// Content-Length announces it or a chunked body reaches it, and at once
// for a claim over the limit (nothing is read).
func TestHTTPBodyOverLimit(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{MaxBodyBytes: 1024})
	sid := s.initialize()
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 2000) + `"}}}`
	check := func(name string, resp *http.Response, m *rpc.Message) {
		t.Helper()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || m.Error == nil || !strings.Contains(m.Error.Message, "1024 bytes") {
			t.Errorf("%s: %d %s, want 413 naming the limit", name, resp.StatusCode, m.Encode())
		}
	}
	resp := s.do("POST", sid, big, nil)
	check("Content-Length", resp, decodeBody(t, resp))

	conn := s.rawPOST(sid, -1, fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big))
	resp, m := readRawResponse(t, conn, 10*time.Second)
	check("chunked", resp, m)

	conn = s.rawPOST(sid, 2<<30, "") // claims 2 GB, sends nothing
	resp, m = readRawResponse(t, conn, 10*time.Second)
	check("claimed 2 GB", resp, m)
}
