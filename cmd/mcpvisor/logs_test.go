package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
)

// logsAPI serves the status API of a fleet with one server, a, whose
// stderr is buf, and records the query of each request.
func logsAPI(t *testing.T, buf *logbuf.Buffer) (addr string, queries func() []string) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{"a":{"command":"x"}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := admin.New(f, nil, admin.Options{Logs: func(string) *logbuf.Buffer { return buf }})
	var mu sync.Mutex
	var qs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		qs = append(qs, r.URL.RawQuery)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	return strings.TrimPrefix(srv.URL, "http://"), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string{}, qs...)
	}
}

// mcpvisor logs prints the kept lines, each after its local time and
// pid; --json one object a line; lines no longer kept are counted.
func TestLogsPlain(t *testing.T) {
	buf := logbuf.New(logbuf.Options{MaxLines: 2})
	at := time.Date(2026, 11, 26, 10, 0, 0, 123e6, time.UTC)
	buf.Add(logbuf.Entry{Time: at, Line: "gone", PID: 1})
	buf.Add(logbuf.Entry{Time: at, Line: "listening on stdio", PID: 1234})
	buf.Add(logbuf.Entry{Time: at.Add(time.Second), Line: "a session's", PID: 7, Session: "s1"})
	addr, _ := logsAPI(t, buf)

	out, err := run(t, "logs", "a", "--tail", "2", "--addr", addr)
	local := at.Local().Format("2006-01-02T15:04:05.000")
	next := at.Add(time.Second).Local().Format("2006-01-02T15:04:05.000")
	want := local + " [pid 1234] listening on stdio\n" + next + " [pid 7 session s1] a session's\n"
	if err != nil || out != want {
		t.Fatalf("logs: %v\n%q\nwant\n%q", err, out, want)
	}

	out, err = run(t, "logs", "a", "--tail", "3", "--json", "--addr", addr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || lines[0] != `{"dropped":1}` {
		t.Fatalf("logs --json --tail 3: %v %q", err, out)
	}
	var e logbuf.Entry
	if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Seq != 2 || e.PID != 1234 || !e.Time.Equal(at) || e.Line != "listening on stdio" {
		t.Fatalf("JSON line %q: %+v %v", lines[1], e, err)
	}
	// In text, the count goes to stderr (run merges the two).
	if out, err := run(t, "logs", "a", "--tail", "3", "--addr", addr); err != nil || !strings.HasPrefix(out, "mcpvisor: 1 line no longer kept\n") {
		t.Fatalf("logs --tail 3: %v %q", err, out)
	}
}

// --since and --tail go to serve as given; a --since serve could not read
// is a usage error (exit 2), and serve is not asked.
func TestLogsSince(t *testing.T) {
	buf := logbuf.New(logbuf.Options{})
	buf.Add(logbuf.Entry{Time: time.Now().Add(-time.Hour), Line: "old"})
	buf.Add(logbuf.Entry{Line: "new"})
	addr, queries := logsAPI(t, buf)
	out, err := run(t, "logs", "a", "--since", "10m", "--addr", addr)
	if err != nil || !strings.HasSuffix(out, " new\n") || strings.Contains(out, "old") {
		t.Fatalf("--since 10m: %v %q", err, out)
	}
	if _, err := run(t, "logs", "a", "--since", "2026-11-26T10:00:00Z", "--tail", "5", "--addr", addr); err != nil {
		t.Fatal(err)
	}
	if q := queries(); len(q) != 2 || q[0] != "since=10m" || q[1] != "since=2026-11-26T10%3A00%3A00Z&tail=5" {
		t.Fatalf("serve was asked %q", q)
	}
	for _, bad := range [][]string{{"--since", "yesterday"}, {"--tail", "-1"}} {
		_, err := run(t, append([]string{"logs", "a", "--addr", addr}, bad...)...)
		if code := exitCodeOf(err); code != 2 || !strings.Contains(err.Error(), bad[0]) {
			t.Fatalf("%q: exit %d, %v", bad, code, err)
		}
	}
	if q := queries(); len(q) != 2 {
		t.Fatalf("serve was asked %q after bad flags", q[2:])
	}
}

// logs -f prints the kept lines, then each new one as it is written,
// until interrupted (exit 0).
func TestLogsFollow(t *testing.T) {
	buf := logbuf.New(logbuf.Options{})
	buf.Add(logbuf.Entry{Line: "before", PID: 1})
	addr, queries := logsAPI(t, buf)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := newRootCmd()
	pr, pw := io.Pipe()
	cmd.SetOut(pw)
	cmd.SetArgs([]string{"logs", "a", "-f", "--json", "--since", "1h", "--addr", addr})
	done := make(chan error, 1)
	go func() {
		done <- cmd.ExecuteContext(ctx)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	line := func() logbuf.Entry {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("logs -f ended: %v", sc.Err())
		}
		var e logbuf.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		return e
	}
	if e := line(); e.Line != "before" {
		t.Fatalf("history %+v", e)
	}
	buf.Add(logbuf.Entry{Line: "after", PID: 2})
	if e := line(); e.Line != "after" || e.PID != 2 || e.Seq != 2 {
		t.Fatalf("live line %+v", e)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Fatalf("interrupted logs -f: %v", err)
	}
	if q := queries(); len(q) != 1 || q[0] != "follow=1&since=1h" {
		t.Fatalf("serve was asked %q", q)
	}
}

// logs -f on a server that a reload removes prints the lines written
// before, then a note on stderr, and ends (exit 0) without opening the
// stream again.
func TestLogsFollowServerRemoved(t *testing.T) {
	reg := logbuf.NewRegistry(logbuf.Options{})
	buf := reg.Get("a")
	buf.Add(logbuf.Entry{Line: "before", PID: 1})
	addr, queries := logsAPI(t, buf)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := newRootCmd()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	cmd.SetOut(pw)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"logs", "a", "-f", "--json", "--addr", addr})
	done := make(chan error, 1)
	go func() {
		done <- cmd.ExecuteContext(ctx)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var got []string
	for sc.Scan() {
		var e logbuf.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		got = append(got, e.Line)
		if e.Line == "before" { // it follows now
			buf.Add(logbuf.Entry{Line: "last", PID: 1})
			reg.Remove("a")
		}
	}
	err := <-done
	if ctx.Err() != nil {
		t.Fatal("logs -f went on after the server was removed")
	}
	if err != nil || strings.Join(got, ",") != "before,last" {
		t.Fatalf("logs -f: %v, printed %q", err, got)
	}
	if want := "mcpvisor: server a was removed from the configuration\n"; stderr.String() != want {
		t.Fatalf("stderr %q, want %q", stderr.String(), want)
	}
	if q := queries(); len(q) != 1 {
		t.Fatalf("serve was asked %q: the stream was opened again", q)
	}
}

// Nothing answering at --addr, and a server serve does not have, are
// errors that say so, with exit code 1, followed or not.
func TestLogsErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	ln.Close()
	addr, _ := logsAPI(t, logbuf.New(logbuf.Options{}))
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"logs", "a", "--addr", nobody}, "is mcpvisor serve running at " + nobody + "?"},
		{[]string{"logs", "a", "-f", "--addr", nobody}, "is mcpvisor serve running at " + nobody + "?"},
		{[]string{"logs", "nope", "--addr", addr}, `no server named "nope"; configured: a`},
		{[]string{"logs", "nope", "-f", "--addr", addr}, `no server named "nope"; configured: a`},
	} {
		_, err := run(t, c.args...)
		if code := exitCodeOf(err); code != 1 || !strings.HasPrefix(err.Error(), c.msg) {
			t.Errorf("%q: exit %d, %v; want 1, %q", c.args, code, err, c.msg)
		}
	}
}
