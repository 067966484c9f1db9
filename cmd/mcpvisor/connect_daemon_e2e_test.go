package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The daemon's socket sessions are client sessions under the config's
// maxSessions, with the HTTP ones, by the same rule: under maxSessions 1
// a second connect evicts the first, idle, which is told why (a
// notifications/message naming maxSessions) and exits 1; while the
// second has a call in flight, a third connect is refused, saying so,
// and so is an HTTP initialize (503); once the call has ended, an HTTP
// initialize evicts the second in turn.
func TestSocketSessionsTakeMaxSessions(t *testing.T) {
	w := newConnectWorld(t)
	if err := os.WriteFile(w.cfg, []byte(fmt.Sprintf(`{"listen":"127.0.0.1:0","maxSessions":1,"mcpServers":{"x":{"command":%q}}}`, testserver.Build(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeFile(t, w.cfg, "", "--state-dir", w.state)
	first := w.raw(t, "--start=never")
	first.initialize(t)

	second := w.raw(t, "--start=never")
	second.initialize(t)
	evicted := func(p *rawConnect, who string) {
		t.Helper()
		// List changes the session was told of before (serve learns its
		// servers' tools, prompts and resources as it starts) may come
		// first, in any order.
		line, err := p.out.ReadString('\n')
		for err == nil && strings.Contains(line, `/list_changed"`) {
			line, err = p.out.ReadString('\n')
		}
		if err != nil || !strings.Contains(line, `"method":"notifications/message"`) || !strings.Contains(line, "maxSessions (1)") {
			t.Fatalf("%s, evicted: %q %v, want a notifications/message naming maxSessions (1); stderr:\n%s", who, line, err, p.stderr)
		}
		if code := p.exit(t, 10*time.Second); code != 1 {
			t.Fatalf("%s, evicted: exit %d, want 1; stderr:\n%s", who, code, p.stderr)
		}
	}
	evicted(first, "the first connect")

	fmt.Fprintf(second.in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x__sleep","arguments":{"ms":2000}}}`+"\n")
	scrapeUntil(t, s.base, `mcpvisor_server_in_flight{server="x"}`, 1)
	third := w.raw(t, "--start=never")
	defer third.in.Close()
	if code := third.exit(t, 10*time.Second); code != 1 || !strings.Contains(third.stderr.String(), "maxSessions is 1") {
		t.Errorf("a third connect while the second has a call in flight: exit %d, want 1 and a refusal naming maxSessions; stderr:\n%s", code, third.stderr)
	}
	if resp, body := postMCP(t, http.DefaultClient, s.base+"/mcp", "", mcpInitialize); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "maxSessions is 1") {
		t.Errorf("an HTTP initialize while the socket session has a call in flight: %d %s, want 503 naming maxSessions", resp.StatusCode, body)
	}
	if line := second.response(t, 2); !strings.Contains(line, "slept 2000 ms") {
		t.Fatalf("the second session's call: %q", line)
	}
	// The answer is written before the daemon counts the call out: an
	// initialize may come a moment too soon.
	waitUntil(t, 5*time.Second, "an HTTP initialize once the socket session is idle", func() bool {
		resp, body := postMCP(t, http.DefaultClient, s.base+"/mcp", "", mcpInitialize)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("an HTTP initialize: %d %s", resp.StatusCode, body)
		}
		return resp.StatusCode == http.StatusOK
	})
	evicted(second, "the second connect")
	m := scrape(t, s.base)
	if n, open := m[`mcpvisor_session_evictions_total{reason="limit"}`], m["mcpvisor_sessions"]; n != 2 || open != 1 {
		t.Errorf("metrics after two evictions: %v evictions, %v sessions; want 2 and the HTTP session", n, open)
	}
	if n := m[`mcpvisor_gateway_requests_total{method="initialize",outcome="unavailable"}`]; n < 1 {
		t.Errorf("the refused HTTP initialize not counted: %v", n)
	}
}

// A daemon that accepts the connection but goes away before answering
// the preface (an auto-started daemon reaching its --exit-when-unused
// deadline as the client dials) is no failure with --start=auto: connect
// says so and starts a daemon of its own, which serves the client.
func TestConnectStartsADaemonWhenOneGoesAway(t *testing.T) {
	w := newConnectWorld(t)
	path := w.socket(t)
	if err := os.MkdirAll(w.state, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		defer ln.Close() // and gone
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = bufio.NewReader(c).ReadString('\n') // the preface
		_ = c.Close()                              // shutting down
	}()
	p := w.raw(t)
	p.initialize(t)
	<-gone
	if d := w.daemons(); len(d) != 1 {
		t.Errorf("daemons after connect met one going away: %v, want the one it started", d)
	}
	p.in.Close()
	if code := p.exit(t, 10*time.Second); code != 0 || !strings.Contains(p.stderr.String(), "starting one") {
		t.Errorf("connect with --start=auto, against a daemon that went away mid-preface: exit %d, want 0 and a word on stderr; stderr:\n%s", code, p.stderr)
	}
}

// A client that sends a call and closes its input gets the answer: the
// daemon's session reads the EOF connect passes on only once the answers
// under way are written, and connect copies them before it exits 0.
func TestConnectAnswersUnderWayAtEOF(t *testing.T) {
	w := newConnectWorld(t)
	startServeFile(t, w.cfg, "", "--state-dir", w.state)
	p := w.raw(t, "--start=never", "--server", "x")
	p.initialize(t)
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":300}}}`+"\n")
	p.in.Close()
	var got []string
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			break
		}
		got = append(got, line)
	}
	if code := p.exit(t, 5*time.Second); code != 0 {
		t.Errorf("connect after stdin EOF: exit %d; stderr:\n%s", code, p.stderr)
	}
	for _, l := range got {
		if strings.Contains(l, `"id":2,`) && !strings.Contains(l, `"error"`) {
			return
		}
	}
	t.Errorf("a 300 ms call sent before stdin EOF: no result within connect's 2 s flush; stdout after initialize: %q", got)
}

// mcpInitialize is an initialize request at 2025-11-25.
const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}`

// postMCP POSTs body to an MCP endpoint (in session sid, if not "") and
// returns the reply, read, and its body.
func postMCP(t *testing.T, client *http.Client, url, sid, body string) (*http.Response, string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", url, err) // not Fatal: called from the bench's workers too
		return &http.Response{Header: http.Header{}}, ""
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}
