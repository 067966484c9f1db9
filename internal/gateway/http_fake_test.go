package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/sse"
)

// httpFake is a small Endpoint for the transport tests. Tools: echo
// (returns arguments.text), progress (3 related progress notifications,
// then a result), sample (a related sampling/createMessage request; the
// result is the client's answer), flood (related progress notifications
// of 1 MB each until the stream refuses them: closed, not full), big (a
// result of arguments.mb MB), meet (returns "met" if another meet call
// runs at the same time, "alone" after 5 s), wait (returns after arguments.ms
// milliseconds unless its ctx ends first), block (waits until its ctx
// ends), peak (20 ms, counting how many run at once).
type httpFake struct {
	mu       sync.Mutex
	sessions []*Session
	pending  map[string]chan *rpc.Message // server→client request id → response
	nextID   int
	notes    []string      // methods of notifications received
	modern   []*Modern     // the _meta of every modern request
	meeting  chan struct{} // a meet call waiting for another
	running  int           // peak calls in flight now
	peak     int           // the most peak calls ever in flight at once

	opened, closed atomic.Int32
	closedCh       chan *Session // every Close, if set
	cancelled      chan struct{} // a block call saw its ctx end, if set
	blocked        chan struct{} // a block call began, if set
}

func newHTTPFake() *httpFake {
	return &httpFake{
		pending:   make(map[string]chan *rpc.Message),
		closedCh:  make(chan *Session, 16),
		cancelled: make(chan struct{}, 16),
	}
}

func (f *httpFake) Open(out Sink) *Session {
	s := NewSession(out)
	f.mu.Lock()
	f.sessions = append(f.sessions, s)
	f.mu.Unlock()
	f.opened.Add(1)
	return s
}

// Stateless serves a modern request as Handle does, on a session of its
// own, and records its _meta; server/discover names the fake.
func (f *httpFake) Stateless(ctx context.Context, m *rpc.Message, mo *Modern, related Sink) *rpc.Message {
	f.mu.Lock()
	f.modern = append(f.modern, mo)
	f.mu.Unlock()
	if m.Method == "server/discover" {
		return discover(m, json.RawMessage(`{"tools":{}}`), json.RawMessage(`{"name":"fake","version":"1.0.0"}`), "", scopePublic)
	}
	resp := f.Handle(ctx, NewSession(noSink), m, related)
	completeResultTTL(m.Method, resp, scopePublic, 0)
	return resp
}

func (f *httpFake) Close(s *Session) {
	f.closed.Add(1)
	select {
	case f.closedCh <- s:
	default:
	}
}

// session returns the session with the given id.
func (f *httpFake) session(id string) *Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if s.ID == id {
			return s
		}
	}
	return nil
}

func (f *httpFake) Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message {
	switch {
	case m.IsResponse():
		f.mu.Lock()
		ch := f.pending[string(m.ID)]
		delete(f.pending, string(m.ID))
		f.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		return nil
	case m.IsNotification():
		f.mu.Lock()
		f.notes = append(f.notes, m.Method)
		f.mu.Unlock()
		return nil
	}
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.ProtocolVersion == "refuse" {
			return httpFakeError(m, rpc.InvalidParams, "refused")
		}
		v := p.ProtocolVersion
		switch v {
		case "2025-11-25", "2025-06-18", "2025-03-26":
		default:
			v = "2025-11-25"
		}
		return httpFakeResult(m, map[string]any{
			"protocolVersion": v,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": true}},
			"serverInfo":      map[string]any{"name": "fake", "version": "1.0.0"},
		})
	case "ping":
		return &rpc.Message{ID: m.ID, Result: json.RawMessage(`{}`)}
	case "tools/list":
		tools := []map[string]any{}
		for _, name := range []string{"echo", "progress", "sample", "block"} {
			tools = append(tools, map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}})
		}
		return httpFakeResult(m, map[string]any{"tools": tools})
	case "tools/call":
		var p struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			return httpFakeError(m, rpc.InvalidParams, err.Error())
		}
		switch p.Name {
		case "echo":
			text, _ := p.Arguments["text"].(string)
			return httpFakeText(m, text)
		case "progress":
			tok := rpc.ProgressToken(m.Params)
			if tok == nil {
				tok = json.RawMessage(`"none"`)
			}
			for i := 1; i <= 3; i++ {
				params := `{"progressToken":` + string(tok) + `,"progress":` + strconv.Itoa(i) + `,"total":3}`
				if err := related.Send(&rpc.Message{Method: "notifications/progress", Params: json.RawMessage(params)}); err != nil {
					return httpFakeText(m, "progress not sent: "+err.Error())
				}
			}
			return httpFakeText(m, "done")
		case "sample":
			f.mu.Lock()
			f.nextID++
			id := `"s-` + strconv.Itoa(f.nextID) + `"`
			ch := make(chan *rpc.Message, 1)
			f.pending[id] = ch
			f.mu.Unlock()
			req := &rpc.Message{ID: json.RawMessage(id), Method: "sampling/createMessage",
				Params: json.RawMessage(`{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10}`)}
			if err := related.Send(req); err != nil {
				return httpFakeError(m, rpc.InternalError, err.Error())
			}
			select {
			case r := <-ch:
				if r.Error != nil {
					return httpFakeError(m, rpc.InternalError, "sampling failed: "+r.Error.Message)
				}
				var res struct {
					Content struct {
						Text string `json:"text"`
					} `json:"content"`
				}
				_ = json.Unmarshal(r.Result, &res)
				return httpFakeText(m, "sampled: "+res.Content.Text)
			case <-ctx.Done():
				return httpFakeError(m, rpc.InternalError, "cancelled")
			}
		case "flood":
			// Related notifications of about 1 MB until the stream
			// refuses them for good.
			params := json.RawMessage(`{"progressToken":"f","progress":1,"message":"` + strings.Repeat("x", 1<<20) + `"}`)
			for {
				switch err := related.Send(&rpc.Message{Method: "notifications/progress", Params: params}); err {
				case nil:
				case ErrStreamFull:
					time.Sleep(time.Millisecond)
				default:
					return httpFakeText(m, "flood ended: "+err.Error())
				}
			}
		case "big":
			// A result of arguments.mb megabytes.
			mb, _ := p.Arguments["mb"].(float64)
			return &rpc.Message{ID: m.ID, Result: json.RawMessage(`{"content":[{"type":"text","text":"` + strings.Repeat("x", int(mb)<<20) + `"}]}`)}
		case "peak":
			// Counts how many peak calls run at once, for 20 ms each.
			f.mu.Lock()
			f.running++
			f.peak = max(f.peak, f.running)
			f.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			f.mu.Lock()
			f.running--
			f.mu.Unlock()
			return httpFakeText(m, "peaked")
		case "meet":
			// Returns "met" once another meet call is in flight at the
			// same time (within 5 s), else "alone".
			f.mu.Lock()
			if f.meeting == nil {
				f.meeting = make(chan struct{})
				ch := f.meeting
				f.mu.Unlock()
				select {
				case <-ch:
					return httpFakeText(m, "met")
				case <-time.After(5 * time.Second):
					f.mu.Lock()
					f.meeting = nil
					f.mu.Unlock()
					return httpFakeText(m, "alone")
				}
			}
			close(f.meeting)
			f.meeting = nil
			f.mu.Unlock()
			return httpFakeText(m, "met")
		case "wait":
			ms, _ := p.Arguments["ms"].(float64)
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return httpFakeText(m, "waited")
			case <-ctx.Done():
				return httpFakeError(m, rpc.InternalError, "cancelled while waiting")
			}
		case "block":
			if f.blocked != nil {
				f.blocked <- struct{}{}
			}
			<-ctx.Done()
			f.cancelled <- struct{}{}
			return httpFakeError(m, rpc.InternalError, "cancelled")
		}
		return httpFakeError(m, rpc.InvalidParams, "unknown tool "+p.Name)
	}
	return httpFakeError(m, rpc.MethodNotFound, "method not found: "+m.Method)
}

func httpFakeResult(m *rpc.Message, v any) *rpc.Message {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &rpc.Message{ID: m.ID, Result: b}
}

func httpFakeText(m *rpc.Message, text string) *rpc.Message {
	return httpFakeResult(m, map[string]any{"content": []map[string]any{{"type": "text", "text": text}}})
}

func httpFakeError(m *rpc.Message, code int, msg string) *rpc.Message {
	return &rpc.Message{ID: m.ID, Error: &rpc.Error{Code: code, Message: msg}}
}

// httpTestServer serves a fake endpoint over a real listener.
type httpTestServer struct {
	t    *testing.T
	fake *httpFake
	h    *StreamableHandler
	srv  *httptest.Server
	url  string
}

func newHTTPTestServer(t *testing.T, opts HTTPOptions) *httpTestServer {
	t.Helper()
	return newHTTPTestServerWith(t, opts, nil)
}

// newHTTPTestServerWith is newHTTPTestServer with the http.Server
// configured by config (if not nil) before it starts.
func newHTTPTestServerWith(t *testing.T, opts HTTPOptions, config func(*httptest.Server)) *httpTestServer {
	t.Helper()
	f := newHTTPFake()
	h := NewStreamableHandler(f, opts)
	srv := httptest.NewUnstartedServer(h)
	if config != nil {
		config(srv)
	}
	srv.Start()
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	return &httpTestServer{t: t, fake: f, h: h, srv: srv, url: srv.URL}
}

const httpAccept = "application/json, text/event-stream"

// do sends one request; hdr holds extra headers ("Accept" defaults to
// httpAccept, "" deletes a header).
func (s *httpTestServer) do(method, sid, body string, hdr map[string]string) *http.Response {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Accept", httpAccept)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp
}

// status sends a request and returns its status, closing the body.
func (s *httpTestServer) status(method, sid, body string, hdr map[string]string) int {
	s.t.Helper()
	resp := s.do(method, sid, body, hdr)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

const httpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// initialize opens a session and returns its id.
func (s *httpTestServer) initialize() string {
	s.t.Helper()
	resp := s.do("POST", "", httpInit, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		s.t.Fatalf("initialize: %d %q session %q", resp.StatusCode, body, sid)
	}
	if s.status("POST", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil) != http.StatusAccepted {
		s.t.Fatal("notifications/initialized not accepted")
	}
	return sid
}

// sseMax bounds an event the tests read: above the largest they send
// (8 MB).
const sseMax = 64 << 20

// sseEvent is one event of a stream, as internal/sse reads it.
type sseEvent struct {
	id   string // the stream's last event ID as of this event
	name string // the event's type ("message" when it names none)
	data string
}

// sseReader reads an event stream with internal/sse, which skips
// comments; the ones the handler writes (": ok" as a GET stream opens,
// ": ping" to keep it alive) are read byte for byte by comment.
type sseReader struct {
	raw  *bufio.Reader // the body, read by r
	r    *sse.Reader
	read bool // r has read: raw is no longer where the stream is
}

func newSSEReader(body io.Reader) *sseReader {
	raw := bufio.NewReader(body)
	return &sseReader{raw: raw, r: sse.NewReader(raw, sseMax)}
}

// next returns the next event; io.EOF at the end of the stream.
func (s *sseReader) next() (sseEvent, error) {
	s.read = true
	ev, err := s.r.Next()
	if err != nil {
		return sseEvent{}, err
	}
	return sseEvent{id: ev.ID, name: ev.Type, data: string(ev.Data)}, nil
}

// lastID is the stream's last event ID, and whether it set one.
func (s *sseReader) lastID() (string, bool) { return s.r.LastID() }

// comment reads the comment ": text" and the blank line that ends it,
// exactly as the handler writes them, before any event was read.
func (s *sseReader) comment(text string) error {
	if s.read {
		return errors.New("a comment read after an event: the event reader may have read past it")
	}
	want := ": " + text + "\n\n"
	got := make([]byte, len(want))
	if n, err := io.ReadFull(s.raw, got); err != nil {
		return fmt.Errorf("%q, then %w; want %q", got[:n], err, want)
	}
	if string(got) != want {
		return fmt.Errorf("%q, want %q", got, want)
	}
	return nil
}

// replyMessages decodes the reply b to a POST: the one message of a JSON
// reply, or each event's of an event stream (read with internal/sse).
func replyMessages(t testing.TB, resp *http.Response, b []byte) []*rpc.Message {
	t.Helper()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		m, err := rpc.Decode(b)
		if err != nil {
			t.Fatalf("reply %q: %v", b, err)
		}
		return []*rpc.Message{m}
	}
	var ms []*rpc.Message
	for r := newSSEReader(bytes.NewReader(b)); ; {
		ev, err := r.next()
		if err == io.EOF {
			return ms
		}
		if err != nil {
			t.Fatalf("reply %q: %v", b, err)
		}
		m, err := rpc.Decode([]byte(ev.data))
		if err != nil {
			t.Fatalf("event %q of reply %q: %v", ev.data, b, err)
		}
		ms = append(ms, m)
	}
}

// waitFor waits for a condition that becomes true asynchronously.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
