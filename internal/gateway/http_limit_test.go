package gateway

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// tryInitialize sends an initialize and returns the status, the session
// id and the body.
func (s *httpTestServer) tryInitialize(body string) (int, string, *rpc.Message) {
	s.t.Helper()
	resp := s.do("POST", "", body, nil)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), decodeBody(s.t, resp)
}

// Beyond MaxSessions an initialize gets 503 with a JSON-RPC error naming
// the limit; a session that ends, or an initialize that fails, frees its
// place.
func TestHTTPMaxSessions(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{MaxSessions: 2})
	first := s.initialize()
	s.initialize()
	status, sid, m := s.tryInitialize(httpInit)
	if status != http.StatusServiceUnavailable || sid != "" || m.Error == nil || !strings.Contains(m.Error.Message, "limit is 2 ") || string(m.ID) != "1" {
		t.Fatalf("third session: %d %q %s; want 503 naming the limit", status, sid, m.Encode())
	}
	if n := s.fake.opened.Load(); n != 2 {
		t.Fatalf("the endpoint opened %d sessions, want 2", n)
	}
	if st := s.status("DELETE", first, "", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE: %d", st)
	}
	third := s.initialize() // room again

	// An initialize that fails gives its place back.
	if st := s.status("DELETE", third, "", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE: %d", st)
	}
	for range 3 {
		if status, _, _ := s.tryInitialize(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"refuse"}}`); status != http.StatusOK {
			t.Fatalf("refused initialize: %d", status)
		}
	}
	s.initialize()
}

// Concurrent initializes never open more sessions than the limit.
func TestHTTPMaxSessionsConcurrent(t *testing.T) {
	const max, clients = 3, 20
	s := newHTTPTestServer(t, HTTPOptions{MaxSessions: max})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[int]int{}
	for range clients {
		wg.Go(func() {
			resp, err := s.srv.Client().Post(s.url, "application/json", strings.NewReader(httpInit))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			got[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got[http.StatusOK] != max || got[http.StatusServiceUnavailable] != clients-max || s.h.Sessions() != max {
		t.Fatalf("statuses %v, %d sessions; want %d opened and the rest refused", got, s.h.Sessions(), max)
	}
}

// A SessionLimit bounds the sessions of every handler sharing it, and
// the zero options bound them too.
func TestHTTPSessionLimitShared(t *testing.T) {
	limit := NewSessionLimit(2)
	a := NewStreamableHandler(newHTTPFake(), HTTPOptions{SessionLimit: limit, MaxSessions: 100})
	b := NewStreamableHandler(newHTTPFake(), HTTPOptions{SessionLimit: limit})
	defer a.Close()
	defer b.Close()
	for i, h := range []*StreamableHandler{a, b, a, b} {
		want := http.StatusOK
		if i >= 2 {
			want = http.StatusServiceUnavailable
		}
		if rec := serveRecorded(h, "POST", "", httpInit); rec.Code != want {
			t.Fatalf("initialize %d: %d, want %d", i, rec.Code, want)
		}
	}
	if limit.Max() != 2 || NewSessionLimit(0).Max() != DefaultMaxSessions || NewSessionLimit(-5).Max() != DefaultMaxSessions {
		t.Fatal("limit defaults")
	}
	if h := NewStreamableHandler(newHTTPFake(), HTTPOptions{}); h.limit.Max() != DefaultMaxSessions {
		t.Fatalf("zero options: limit %d", h.limit.Max())
	}
}
