package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// stdioTestClient drives the stdio front by hand, line by line.
type stdioTestClient struct {
	t     *testing.T
	fake  *httpFake
	stdin *io.PipeWriter
	lines chan string // what the front wrote, one line each
}

func newStdioTestClient(t *testing.T) *stdioTestClient {
	f := newHTTPFake()
	c := newStdioTestClientOn(t, f)
	c.fake = f
	return c
}

// newStdioTestClientOn serves ep to a client driven by hand.
func newStdioTestClientOn(t *testing.T, ep Endpoint) *stdioTestClient {
	t.Helper()
	inR, stdin := io.Pipe()
	outR, outW := io.Pipe()
	c := &stdioTestClient{t: t, stdin: stdin, lines: make(chan string, 64)}
	done := make(chan error, 1)
	go func() { done <- StdioOptions{}.Serve(context.Background(), ep, inR, outW) }()
	go func() {
		defer close(c.lines)
		r := bufio.NewReader(outR)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			c.lines <- strings.TrimSuffix(line, "\n")
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		if err := <-done; err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("Serve: %v", err)
		}
		outR.Close()
	})
	return c
}

func (c *stdioTestClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// next is the next line the front wrote, within 10 s.
func (c *stdioTestClient) next() string {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatal("the front closed its output")
		}
		return l
	case <-time.After(10 * time.Second):
		c.t.Fatal("no line from the front within 10 s")
	}
	return ""
}

// message is the next line, which must be one message.
func (c *stdioTestClient) message() *rpc.Message {
	c.t.Helper()
	l := c.next()
	m, err := rpc.Decode([]byte(l))
	if err != nil {
		c.t.Fatalf("line %s: %v", l, err)
	}
	return m
}

// batch is the next line, which must be an array of responses, by id.
func (c *stdioTestClient) batch() map[string]*rpc.Message {
	c.t.Helper()
	l := c.next()
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(l), &elems); err != nil {
		c.t.Fatalf("batch reply %s: %v", l, err)
	}
	out := map[string]*rpc.Message{}
	for _, e := range elems {
		m, err := rpc.Decode(e)
		if err != nil || !m.IsResponse() {
			c.t.Fatalf("batch reply element %s: %v", e, err)
		}
		if out[string(m.ID)] != nil {
			c.t.Fatalf("batch reply %s: id %s twice", l, m.ID)
		}
		out[string(m.ID)] = m
	}
	return out
}

func (c *stdioTestClient) initializeAt(version string) {
	c.t.Helper()
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := c.message(); m.Error != nil || !strings.Contains(string(m.Result), version) {
		c.t.Fatalf("initialize at %s: %s", version, m.Encode())
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// A stdio session at 2025-03-26 may send JSON-RPC batches: the requests
// are answered by one line, an array of their responses; an invalid
// element or an initialize gets an error of its own; notifications are
// handled and answered by nothing.
func TestStdioBatch(t *testing.T) {
	c := newStdioTestClient(t)
	c.initializeAt("2025-03-26")
	c.send(`[{"jsonrpc":"2.0","id":1,"method":"ping"},` +
		`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},` +
		`{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}},` +
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}},` +
		`{"foo":1}]`)
	got := c.batch()
	if len(got) != 4 || got["1"] == nil || string(got["1"].Result) != "{}" ||
		got[`"two"`] == nil || !strings.Contains(string(got[`"two"`].Result), `"hi"`) ||
		got["3"] == nil || got["3"].Error == nil || got["3"].Error.Code != rpc.InvalidRequest ||
		got["null"] == nil || got["null"].Error == nil {
		t.Fatalf("batch reply %v", got)
	}
	c.fake.mu.Lock()
	notes := slices.Clone(c.fake.notes)
	c.fake.mu.Unlock()
	if !slices.Contains(notes, "notifications/roots/list_changed") {
		t.Fatalf("the notification was not handled: %v", notes)
	}

	// Only notifications: no line at all. The next line is the answer to
	// the ping that follows.
	c.send(`[{"jsonrpc":"2.0","method":"notifications/a"},{"jsonrpc":"2.0","method":"notifications/b"}]`)
	c.send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	if m := c.message(); string(m.ID) != "9" || m.Error != nil {
		t.Fatalf("after a batch of notifications: %s", m.Encode())
	}

	// Malformed batches get one error with a null id, and the session
	// goes on.
	for _, tc := range []struct {
		line string
		code int
	}{
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}`, rpc.ParseError},
		{`[]`, rpc.InvalidRequest},
	} {
		c.send(tc.line)
		if m := c.message(); string(m.ID) != "null" || m.Error == nil || m.Error.Code != tc.code {
			t.Fatalf("%s answered %s, want error %d", tc.line, m.Encode(), tc.code)
		}
	}
	c.send(`[{"jsonrpc":"2.0","id":10,"method":"ping"}]`)
	if got := c.batch(); got["10"] == nil || got["10"].Error != nil {
		t.Fatalf("a batch after malformed ones: %v", got)
	}
}

// A batch is refused, with nothing in it handled, before initialize and
// in a session at a revision without batches.
func TestStdioBatchRefusedOutsideItsRevision(t *testing.T) {
	const batch = `[{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":1,"method":"ping"}]`
	c := newStdioTestClient(t)
	c.send(batch)
	if m := c.message(); string(m.ID) != "null" || m.Error == nil || m.Error.Code != rpc.InvalidRequest || !strings.Contains(m.Error.Message, "before initialize") {
		t.Fatalf("batch before initialize: %s", m.Encode())
	}
	c.initializeAt("2025-11-25")
	c.send(batch)
	if m := c.message(); m.Error == nil || !strings.Contains(m.Error.Message, `"2025-11-25"`) || !strings.Contains(m.Error.Message, batchVersion) {
		t.Fatalf("batch at 2025-11-25: %s", m.Encode())
	}
	c.fake.mu.Lock()
	notes := slices.Clone(c.fake.notes)
	c.fake.mu.Unlock()
	if slices.Contains(notes, "notifications/x") {
		t.Fatal("a notification of a refused batch was handled")
	}
}

// The requests of a stdio batch run concurrently, no more than
// batchWorkers at once; a request's related messages — here a sampling
// request to the client — go out as lines of their own before the batch
// is answered.
func TestStdioBatchConcurrencyAndRelated(t *testing.T) {
	c := newStdioTestClient(t)
	c.initializeAt("2025-03-26")
	c.send(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"meet"}},` +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"meet"}}]`)
	for id, m := range c.batch() {
		if !strings.Contains(string(m.Result), `"met"`) {
			t.Fatalf("request %s ran alone: %s", id, m.Encode())
		}
	}

	c.send(peakBatch(100))
	if got := c.batch(); len(got) != 100 {
		t.Fatalf("%d responses to 100 requests", len(got))
	}
	c.fake.mu.Lock()
	peak := c.fake.peak
	c.fake.mu.Unlock()
	if peak > batchWorkers || peak < 2 {
		t.Fatalf("at most %d requests ran at once, want between 2 and %d", peak, batchWorkers)
	}

	c.send(`[{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"sample"}}]`)
	req := c.message()
	if req.Method != "sampling/createMessage" || !req.IsRequest() {
		t.Fatalf("expected the sampling request first, got %s", req.Encode())
	}
	c.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"role":"assistant","content":{"type":"text","text":"yes"},"model":"m"}}`)
	if got := c.batch(); got[`"s"`] == nil || !strings.Contains(string(got[`"s"`].Result), "sampled: yes") {
		t.Fatalf("the batch with a sampling request: %v", got)
	}
}
