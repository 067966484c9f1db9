package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// TestReview15SocketSessionsIgnoreMaxSessions: the config bounds client
// sessions at 1 (maxSessions), yet the daemon's socket front opens any
// number: three connects each hold a live session.
func TestReview15SocketSessionsIgnoreMaxSessions(t *testing.T) {
	w := newConnectWorld(t)
	if err := os.WriteFile(w.cfg, []byte(fmt.Sprintf(`{"listen":"127.0.0.1:0","maxSessions":1,"mcpServers":{"x":{"command":%q}}}`, testserver.Build(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	startServeFile(t, w.cfg, "", "--state-dir", w.state)
	for i := range 3 {
		p := w.raw(t, "--start=never")
		p.initialize(t) // fatal if refused
		t.Logf("socket session %d of a maxSessions 1 daemon: open", i+1)
	}
	t.Errorf("3 socket sessions open under maxSessions 1: the socket front is bounded by nothing")
}

// TestReview15ConnectDoesNotRetryADaemonGoingAway: a daemon that accepts
// the connection but goes away before answering the preface (an
// auto-started daemon reaching its --exit-when-unused deadline as the
// client dials: the connection sat in the listen backlog, uncounted) makes
// connect fail, exit 1, although --start=auto could start a new one.
func TestReview15ConnectDoesNotRetryADaemonGoingAway(t *testing.T) {
	w := newConnectWorld(t)
	path := w.socket(t)
	if err := os.MkdirAll(w.state, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = bufio.NewReader(c).ReadString('\n') // the preface
		_ = c.Close()                               // shutting down
		_ = ln.Close()                              // and gone
	}()
	p := w.raw(t)
	defer p.in.Close()
	code := p.exit(t, 20*time.Second)
	if code != 0 || strings.Contains(p.stderr.String(), "closed") {
		t.Errorf("connect with --start=auto, against a daemon that went away mid-preface: exit %d, did not start a new daemon; stderr:\n%s", code, p.stderr)
	}
}

// TestReview15AnswerUnderWayAtEOFIsLost: connect promises to copy the
// answers under way for up to 2 s after stdin EOF (Relay's FlushTimeout),
// but the daemon's stdio front ends the session at the EOF it is passed
// (rpc.Conn: EOF closes the connection and cancels every request): a
// client that sends a call and closes its input gets no answer.
func TestReview15AnswerUnderWayAtEOFIsLost(t *testing.T) {
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
	p.exit(t, 5*time.Second)
	for _, l := range got {
		if strings.Contains(l, `"id":2,`) && !strings.Contains(l, `"error"`) {
			return
		}
	}
	t.Errorf("a 300 ms call sent before stdin EOF: no result within connect's 2 s flush; stdout after initialize: %q", got)
}
