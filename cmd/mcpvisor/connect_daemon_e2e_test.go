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

// The daemon's socket sessions are client sessions under the config's
// maxSessions, as HTTP ones are: under maxSessions 1 a second connect is
// refused, saying so; once the first has gone, another is admitted.
func TestSocketSessionsTakeMaxSessions(t *testing.T) {
	w := newConnectWorld(t)
	if err := os.WriteFile(w.cfg, []byte(fmt.Sprintf(`{"listen":"127.0.0.1:0","maxSessions":1,"mcpServers":{"x":{"command":%q}}}`, testserver.Build(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	startServeFile(t, w.cfg, "", "--state-dir", w.state)
	first := w.raw(t, "--start=never")
	first.initialize(t)

	second := w.raw(t, "--start=never")
	defer second.in.Close()
	if code := second.exit(t, 10*time.Second); code != 1 || !strings.Contains(second.stderr.String(), "maxSessions is 1") {
		t.Errorf("a second connect under maxSessions 1: exit %d, want 1 and a refusal naming maxSessions; stderr:\n%s", code, second.stderr)
	}

	first.in.Close()
	if code := first.exit(t, 5*time.Second); code != 0 {
		t.Fatalf("the first connect at stdin EOF: exit %d; stderr:\n%s", code, first.stderr)
	}
	// The first session's place is given back as its connection closes,
	// which follows connect's exit: a third may have to try again.
	waitUntil(t, 10*time.Second, "a third connect admitted", func() bool {
		third := w.raw(t, "--start=never")
		defer third.in.Close()
		fmt.Fprintf(third.in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":%s}`+"\n", initLine)
		line, _ := third.out.ReadString('\n')
		if strings.Contains(line, `"protocolVersion":"2025-11-25"`) {
			return true
		}
		if third.exit(t, 5*time.Second) != 1 || !strings.Contains(third.stderr.String(), "maxSessions") {
			t.Fatalf("a third connect: %q; stderr:\n%s", line, third.stderr)
		}
		return false
	})
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
