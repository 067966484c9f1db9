package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func TestPercentile(t *testing.T) {
	s := Stats{Latency: []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	for p, want := range map[float64]time.Duration{50: 5, 90: 9, 99: 10, 100: 10, 1: 1} {
		if got := s.Percentile(p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
}

func TestHTTPFloor(t *testing.T) {
	srv := httptest.NewServer(CannedHandler([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}`)))
	defer srv.Close()
	c := NewHTTPClient(4)
	defer c.CloseIdleConnections()
	sess, err := OpenHTTP(t.Context(), c, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	st := Run(t.Context(), Options{Callers: 4, Warmup: 20 * time.Millisecond, Measure: 100 * time.Millisecond},
		func(int) func() error { return sess.Echo(t.Context(), "echo", "hi") })
	if st.Errors != 0 || st.Calls == 0 || st.Percentile(50) <= 0 {
		t.Fatalf("%d calls, %d errors (%v)", st.Calls, st.Errors, st.FirstErr)
	}
	bad := sess.Echo(t.Context(), "echo", "other")
	if err := bad(); err == nil {
		t.Fatal("a reply without the echoed text passed the check")
	}
}

// TestStdioFixture multiplexes callers on one connection to the fixture
// server, run in-process.
func TestStdioFixture(t *testing.T) {
	c, inW, exited := inProcessFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st := Run(ctx, Options{Callers: 8, Warmup: 20 * time.Millisecond, Measure: 100 * time.Millisecond},
		func(w int) func() error { return c.Echo(ctx, "echo", "hello") })
	if st.Errors != 0 || st.Calls == 0 {
		t.Fatalf("%d calls, %d errors (%v)", st.Calls, st.Errors, st.FirstErr)
	}
	inW.Close()
	if code := <-exited; code != 0 {
		t.Errorf("fixture exited %d", code)
	}
	<-c.Done()
	if err := c.Echo(ctx, "echo", "x")(); err == nil {
		t.Error("call after the server ended succeeded")
	}
}

// TestRawRelay relays HTTP callers to the in-process fixture and checks
// that every caller gets its own id back with the echoed text.
func TestRawRelay(t *testing.T) {
	c, inW, exited := inProcessFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	srv := httptest.NewServer(RawRelayHandler(c))
	defer srv.Close()
	hc := NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	sess, err := OpenHTTP(ctx, hc, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	st := Run(ctx, Options{Callers: 4, Warmup: 20 * time.Millisecond, Measure: 100 * time.Millisecond},
		func(int) func() error { return sess.Echo(ctx, "echo", "relayed") })
	if st.Errors != 0 || st.Calls == 0 {
		t.Fatalf("%d calls, %d errors (%v)", st.Calls, st.Errors, st.FirstErr)
	}
	var buf bytes.Buffer
	if _, err := sess.post(ctx, AppendCall(nil, 4242, "echo", "mine"), &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte(`{"jsonrpc":"2.0","id":4242,"result":`)) || !bytes.Contains(buf.Bytes(), EchoWant("mine")) {
		t.Errorf("relayed reply %s", buf.Bytes())
	}
	// A 2026-07-28 client through the same relay: the fixture takes the
	// call without the version key.
	if err := OpenModernHTTP(srv.URL, hc).Echo(ctx, "echo", "modern")(); err != nil {
		t.Errorf("2026-07-28 call: %v", err)
	}
	inW.Close()
	if code := <-exited; code != 0 {
		t.Errorf("fixture exited %d", code)
	}
}

// inProcessFixture runs the fixture server in this process on pipes and
// returns an initialized connection to it, the fixture's stdin (closing it
// ends the fixture) and its exit code.
func inProcessFixture(t *testing.T) (*StdioConn, io.Closer, <-chan int) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		code := testserver.Main(nil, inR, outW, io.Discard)
		outW.Close()
		exited <- code
	}()
	c := NewStdio(outR, inW)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	return c, inW, exited
}

// A modern call is the same call with its _meta: valid JSON, the id and
// tool in place.
func TestAppendModernCall(t *testing.T) {
	b := AppendModernCall(nil, 7, "x__echo", "hi")
	var m struct {
		ID     int `json:"id"`
		Params struct {
			Name string                     `json:"name"`
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.ID != 7 || m.Params.Name != "x__echo" || string(m.Params.Meta["io.modelcontextprotocol/protocolVersion"]) != `"2026-07-28"` {
		t.Fatalf("%s: %v", b, err)
	}
}

// The server gets the request as sent, under its own id, except a
// 2026-07-28 request's version key, which goes — as mcpvisor drops it for a
// legacy server — in the form AppendModernCall writes only.
func TestRelayLine(t *testing.T) {
	const call = `{"name":"echo","arguments":{"text":"hi"}`
	for _, tc := range []struct{ params, want string }{
		{"", ""},
		{call + "}", call + "}"},
		{call + `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`,
			call + `,"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}`},
		// Not the form AppendModernCall writes: left alone.
		{call + `,"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`,
			call + `,"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`},
		// Inside a string, the member's quotes are escaped: no match.
		{`{"name":"echo","arguments":{"text":"\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","}}`,
			`{"name":"echo","arguments":{"text":"\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","}}`},
	} {
		want := `{"jsonrpc":"2.0","id":9,"method":"tools/call"`
		if tc.want != "" {
			want += `,"params":` + tc.want
		}
		want += "}\n"
		params := []byte(tc.params)
		if tc.params == "" {
			params = nil
		}
		if got := relayLine([]byte("stale"), 9, "tools/call", params)[len("stale"):]; string(got) != want {
			t.Errorf("params %s:\n got %s\nwant %s", tc.params, got, want)
		}
		if tc.params != "" && string(params) != tc.params {
			t.Errorf("relayLine changed its params to %s", params)
		}
	}
}

// TestRawRelayForwards puts RawRelayHandler in front of a fake server that
// records every line it gets: a session-era call arrives unchanged, a
// 2026-07-28 call without its version key, each under the relay's id, and
// each reply goes back under the client's.
func TestRawRelayForwards(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	got := make(chan []byte, 4)
	go func() {
		defer outW.Close()
		br := bufio.NewReader(inR)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(line, &m) != nil {
				return
			}
			got <- line
			fmt.Fprintf(outW, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"hi"}]}}`+"\n", m.ID)
		}
	}()
	c := NewStdio(outR, inW)
	defer inW.Close()
	srv := httptest.NewServer(RawRelayHandler(c))
	defer srv.Close()
	hc := NewHTTPClient(1)
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const params = `"params":{"name":"echo","arguments":{"text":"hi"}`
	for _, tc := range []struct {
		name string
		id   string // the client's
		body []byte
		want string // the line the server gets, after its id
	}{
		{"session", "31", AppendCall(nil, 31, "echo", "hi"), `,"method":"tools/call",` + params + "}}\n"},
		{"2026-07-28", "32", AppendModernCall(nil, 32, "echo", "hi"), `,"method":"tools/call",` + params + `,"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}}` + "\n"},
	} {
		s := OpenModernHTTP(srv.URL, hc)
		var buf bytes.Buffer
		resp, err := s.post(ctx, tc.body, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !bytes.HasPrefix(buf.Bytes(), []byte(`{"jsonrpc":"2.0","id":`+tc.id+`,"result":`)) {
			t.Errorf("%s: reply %s %s", tc.name, resp.Status, buf.Bytes())
		}
		line := <-got
		rest, ok := bytes.CutPrefix(line, []byte(`{"jsonrpc":"2.0","id":`))
		if i := bytes.IndexByte(rest, ','); !ok || i < 0 || string(rest[i:]) != tc.want {
			t.Errorf("%s: the server got\n%s\nwant the id, then\n%s", tc.name, line, tc.want)
		}
	}
}
