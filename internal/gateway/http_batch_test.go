package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// initializeAt opens a session at protocol revision version.
func (s *httpTestServer) initializeAt(version string) string {
	s.t.Helper()
	body := strings.Replace(httpInit, "2025-11-25", version, 1)
	resp := s.do("POST", "", body, nil)
	m := decodeBody(s.t, resp)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" || !strings.Contains(string(m.Result), version) {
		s.t.Fatalf("initialize at %s: %d %s", version, resp.StatusCode, m.Encode())
	}
	return sid
}

// decodeBatch decodes a JSON array of responses, by id.
func decodeBatch(t *testing.T, resp *http.Response) map[string]*rpc.Message {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/json" {
		t.Fatalf("batch reply: %d %q %s", resp.StatusCode, ct, b)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(b, &elems); err != nil {
		t.Fatalf("batch reply %s: %v", b, err)
	}
	out := map[string]*rpc.Message{}
	for _, e := range elems {
		m, err := rpc.Decode(e)
		if err != nil || !m.IsResponse() {
			t.Fatalf("batch reply element %s: %v", e, err)
		}
		out[string(m.ID)] = m
	}
	if len(out) != len(elems) {
		t.Fatalf("batch reply %s: an id twice", b)
	}
	return out
}

// 2025-03-26 allows JSON-RPC batches: requests are answered by an array
// of their responses, notifications by nothing.
func TestHTTPBatch(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initializeAt("2025-03-26")

	got := decodeBatch(t, s.do("POST", sid, `[
		{"jsonrpc":"2.0","id":1,"method":"ping"},
		{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},
		{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}
	]`, nil))
	if len(got) != 2 || got["1"] == nil || string(got["1"].Result) != "{}" || got[`"two"`] == nil || !strings.Contains(string(got[`"two"`].Result), `"hi"`) {
		t.Fatalf("batch reply %v", got)
	}
	s.fake.mu.Lock()
	notes := slices.Clone(s.fake.notes)
	s.fake.mu.Unlock()
	if !slices.Contains(notes, "notifications/roots/list_changed") {
		t.Fatalf("the notification was not handled: %v", notes)
	}

	// Only notifications (or responses): 202, no body.
	resp := s.do("POST", sid, `[{"jsonrpc":"2.0","method":"notifications/a"},{"jsonrpc":"2.0","id":"x","result":{}}]`, nil)
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusAccepted || len(b) != 0 {
		t.Fatalf("notifications only: %d %q", resp.StatusCode, b)
	}
	resp.Body.Close()

	// Each invalid element gets an error of its own; initialize cannot be
	// batched.
	got = decodeBatch(t, s.do("POST", sid, `[1, {"jsonrpc":"2.0","id":3,"method":"ping"}, {"jsonrpc":"2.0","id":4,"method":"initialize","params":{}}, {"jsonrpc":"1.0","id":5,"method":"ping"}]`, nil))
	if len(got) != 4 || got["null"] == nil || got["null"].Error.Code != rpc.InvalidRequest || got["3"] == nil || got["3"].Error != nil ||
		got["4"] == nil || got["4"].Error == nil || got["5"] == nil || got["5"].Error.Code != rpc.InvalidRequest {
		t.Fatalf("batch with invalid elements: %v", got)
	}

	// An empty array is an Invalid Request; broken JSON a Parse error.
	for body, code := range map[string]int{`[]`: rpc.InvalidRequest, ` [ ] `: rpc.InvalidRequest, `[{"jsonrpc":"2.0","id":1,"method":"ping"},`: rpc.ParseError} {
		resp := s.do("POST", sid, body, nil)
		if m := decodeBody(t, resp); resp.StatusCode != http.StatusBadRequest || m.Error == nil || m.Error.Code != code || string(m.ID) != "null" {
			t.Errorf("%s: %d %s, want 400 and error %d", body, resp.StatusCode, m.Encode(), code)
		}
	}
}

// Related messages turn a batch's reply into an event stream carrying
// them and then every response; it ends after the last.
func TestHTTPBatchStream(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initializeAt("2025-03-26")
	resp := s.do("POST", sid, `[
		{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"progress","_meta":{"progressToken":"p"}}},
		{"jsonrpc":"2.0","id":2,"method":"ping"}
	]`, nil)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := newSSEReader(resp.Body)
	progress, answered := 0, map[string]bool{}
	for {
		ev, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := rpc.Decode([]byte(ev.data))
		if err != nil {
			t.Fatalf("event %q: %v", ev.data, err)
		}
		switch {
		case m.Method == "notifications/progress":
			if answered["1"] {
				t.Fatal("progress after its request's response")
			}
			progress++
		case m.IsResponse():
			answered[string(m.ID)] = true
		default:
			t.Fatalf("event %s", ev.data)
		}
	}
	if progress != 3 || !answered["1"] || !answered["2"] || len(answered) != 2 {
		t.Fatalf("%d progress, responses %v", progress, answered)
	}

	// A client that takes only event streams gets one, a client that
	// takes only JSON gets no related messages.
	resp = s.do("POST", sid, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, map[string]string{"Accept": "text/event-stream"})
	r = newSSEReader(resp.Body)
	for i := range 2 {
		if ev, err := r.next(); err != nil || !strings.Contains(ev.data, `"result":{}`) {
			t.Fatalf("SSE only, event %d: %+v %v", i, ev, err)
		}
	}
	if _, err := r.next(); err != io.EOF {
		t.Fatalf("SSE only: the stream did not end: %v", err)
	}
	resp.Body.Close()
	got := decodeBatch(t, s.do("POST", sid, `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"progress"}}]`, map[string]string{"Accept": "application/json"}))
	if m := got["1"]; m == nil || !strings.Contains(string(m.Result), ErrNoStream.Error()) {
		t.Fatalf("JSON only: %v", got)
	}
}

// Other revisions have no batches: a clear error, nothing handled.
func TestHTTPBatchRefused(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	for _, v := range []string{"2025-06-18", "2025-11-25"} {
		sid := s.initializeAt(v)
		resp := s.do("POST", sid, `[{"jsonrpc":"2.0","method":"notifications/from-a-batch"}]`, nil)
		m := decodeBody(t, resp)
		if resp.StatusCode != http.StatusBadRequest || m.Error == nil || m.Error.Code != rpc.InvalidRequest ||
			!strings.Contains(m.Error.Message, v) || !strings.Contains(m.Error.Message, "2025-03-26") {
			t.Errorf("batch at %s: %d %s", v, resp.StatusCode, m.Encode())
		}
	}
	// Without a session: initialize cannot be batched.
	resp := s.do("POST", "", `[`+httpInit+`]`, nil)
	if m := decodeBody(t, resp); resp.StatusCode != http.StatusBadRequest || m.Error == nil || m.Error.Code != rpc.InvalidRequest {
		t.Errorf("batch without a session: %d %s", resp.StatusCode, m.Encode())
	}
	s.fake.mu.Lock()
	defer s.fake.mu.Unlock()
	if slices.Contains(s.fake.notes, "notifications/from-a-batch") || s.fake.opened.Load() != 2 {
		t.Errorf("a refused batch was handled: %v, %d sessions", s.fake.notes, s.fake.opened.Load())
	}
}

// The requests of a batch run at the same time.
func TestHTTPBatchConcurrent(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initializeAt("2025-03-26")
	got := decodeBatch(t, s.do("POST", sid, `[
		{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"meet"}},
		{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"meet"}}
	]`, nil))
	for _, id := range []string{"1", "2"} {
		if m := got[id]; m == nil || !strings.Contains(string(m.Result), `"met"`) {
			t.Fatalf("request %s: %v", id, m)
		}
	}
}

// A batch's requests run concurrently, but no more than batchWorkers at
// once, however many the batch holds.
func TestHTTPBatchConcurrencyIsBounded(t *testing.T) {
	s := newHTTPTestServer(t, HTTPOptions{})
	sid := s.initializeAt("2025-03-26")
	got := decodeBatch(t, s.do("POST", sid, peakBatch(100), nil))
	if len(got) != 100 {
		t.Fatalf("%d responses to 100 requests", len(got))
	}
	s.fake.mu.Lock()
	peak := s.fake.peak
	s.fake.mu.Unlock()
	if peak > batchWorkers || peak < 2 {
		t.Fatalf("at most %d requests ran at once, want between 2 and %d", peak, batchWorkers)
	}
}

// peakBatch is a batch of n calls of the fake's peak tool, ids 1 to n.
func peakBatch(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"peak"}}`, i+1)
	}
	b.WriteString("]")
	return b.String()
}
