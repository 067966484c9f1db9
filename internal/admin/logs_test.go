package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcpvisor/mcpvisor/internal/logbuf"
)

// logServer serves the admin API over testFleet with a's stderr in
// buf (b's logs are not kept).
func logServer(t *testing.T, buf *logbuf.Buffer) (*Handler, *httptest.Server) {
	t.Helper()
	h := New(testFleet(t), nil, Options{Logs: func(name string) *logbuf.Buffer {
		if name == "a" {
			return buf
		}
		return nil
	}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

func getLogs(t *testing.T, url string) Logs {
	t.Helper()
	r := get(t, url)
	var l Logs
	if err := json.NewDecoder(r.Body).Decode(&l); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, r.StatusCode, err)
	}
	return l
}

// logText renders lines as "seq:line" items.
func logText(es []logbuf.Entry) string {
	var s []string
	for _, e := range es {
		s = append(s, fmt.Sprintf("%d:%s", e.Seq, e.Line))
	}
	return strings.Join(s, " ")
}

// The kept lines: the newest 100 by default, ?tail=n, ?since (a duration
// back from now or an RFC 3339 time), both; what the buffer discarded is
// counted.
func TestLogsHistory(t *testing.T) {
	buf := logbuf.New(logbuf.Options{MaxLines: 150})
	now := time.Now()
	for i := range 200 {
		buf.Add(logbuf.Entry{Time: now.Add(time.Duration(i-200) * time.Minute), Line: fmt.Sprint("line ", i+1), PID: 42})
	}
	_, srv := logServer(t, buf)
	base := srv.URL + "/api/servers/a/logs"

	l := getLogs(t, base)
	if l.Server != "a" || len(l.Lines) != DefaultLogTail || l.Lines[0].Seq != 101 || l.Lines[99].Line != "line 200" || l.Lines[0].PID != 42 || l.Dropped != 0 {
		t.Fatalf("default: %s: %d lines from %d, dropped %d", l.Server, len(l.Lines), l.Lines[0].Seq, l.Dropped)
	}
	for _, c := range []struct {
		query   string
		want    string
		dropped uint64
	}{
		{"tail=2", "199:line 199 200:line 200", 0},
		{"tail=0", "", 0},
		{"tail=160", "", 10}, // 150 kept, 10 of the 160 discarded
		{"since=190s", "198:line 198 199:line 199 200:line 200", 0},
		{"since=" + url.QueryEscape(now.Add(-2*time.Minute).UTC().Format(time.RFC3339Nano)), "199:line 199 200:line 200", 0},
		{"since=3m&tail=1", "200:line 200", 0},
		{"since=1000h", "", 50}, // every line: the 50 discarded too
		{"since=1000h&tail=155", "", 5},
	} {
		l := getLogs(t, base+"?"+c.query)
		got := logText(l.Lines)
		if c.want == "" { // only the count and the first are checked
			got = ""
		}
		if got != c.want || l.Dropped != c.dropped {
			t.Errorf("?%s: %q dropped %d; want %q dropped %d", c.query, logText(l.Lines), l.Dropped, c.want, c.dropped)
		}
	}
	if l := getLogs(t, base+"?since=1000h"); len(l.Lines) != 150 || l.Lines[0].Seq != 51 {
		t.Errorf("since=1000h: %d lines from %d", len(l.Lines), l.Lines[0].Seq)
	}
	if l := getLogs(t, base+"?tail=160"); len(l.Lines) != 150 {
		t.Errorf("tail=160: %d lines", len(l.Lines))
	}
	// An empty buffer: an empty list, not null.
	_, srv2 := logServer(t, logbuf.New(logbuf.Options{}))
	if r := get(t, srv2.URL+"/api/servers/a/logs"); !strings.Contains(readAll(t, r), `"lines": []`) {
		t.Error("an empty buffer is not listed as []")
	}
}

func readAll(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Unknown servers, servers whose logs are not kept and bad parameters are
// answered as such, in JSON, whether streamed or not.
func TestLogsErrors(t *testing.T) {
	_, srv := logServer(t, logbuf.New(logbuf.Options{}))
	noLogs := httptest.NewServer(New(testFleet(t), nil, Options{}))
	defer noLogs.Close()
	for _, c := range []struct {
		url    string
		status int
		msg    string
	}{
		{srv.URL + "/api/servers/nope/logs", 404, `no server named "nope"; configured: a, b`},
		{srv.URL + "/api/servers/nope/logs?follow=1", 404, `no server named "nope"; configured: a, b`},
		{srv.URL + "/api/servers/b/logs", 404, "logs are not kept"},
		{noLogs.URL + "/api/servers/a/logs?follow=1", 404, "logs are not kept"},
		{srv.URL + "/api/servers/a/logs?since=yesterday", 400, `since: bad value "yesterday"`},
		{srv.URL + "/api/servers/a/logs?since=-5m&follow=1", 400, `since: bad value "-5m"`},
		{srv.URL + "/api/servers/a/logs?tail=many", 400, `tail: bad value "many"`},
		{srv.URL + "/api/servers/a/logs?tail=-1", 400, `tail: bad value "-1"`},
	} {
		r := get(t, c.url)
		var e struct{ Error string }
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil || r.StatusCode != c.status || !strings.HasPrefix(e.Error, c.msg) {
			t.Errorf("GET %s: %d %q (%v); want %d %q", c.url, r.StatusCode, e.Error, err, c.status, c.msg)
		}
	}
	// The same 404 as the server's own route.
	var detail, logs struct{ Error string }
	json.NewDecoder(get(t, srv.URL+"/api/servers/nope").Body).Decode(&detail)
	json.NewDecoder(get(t, srv.URL+"/api/servers/nope/logs").Body).Decode(&logs)
	if detail.Error == "" || detail != logs {
		t.Errorf("404s differ: %q and %q", detail.Error, logs.Error)
	}
}

// A follower gets the lines asked for, then each line as it is written;
// it resumes after the Last-Event-ID it was given, and is told how many
// lines the buffer discarded in between.
func TestLogsFollow(t *testing.T) {
	buf := logbuf.New(logbuf.Options{MaxLines: 5})
	for i := range 3 {
		buf.Add(logbuf.Entry{Line: fmt.Sprint("old ", i+1)})
	}
	_, srv := logServer(t, buf)

	s := stream(t, srv.URL+"/api/servers/a/logs?follow=1&tail=2")
	line := func(s *sseReader) logbuf.Entry {
		t.Helper()
		e := s.next()
		var got logbuf.Entry
		if err := json.Unmarshal([]byte(e.data), &got); err != nil || e.event != "message" || e.id != fmt.Sprintf("%s-%d", buf.Epoch(), got.Seq) {
			t.Fatalf("line %+v: %+v %v", e, got, err)
		}
		return got
	}
	for _, want := range []string{"old 2", "old 3"} {
		if e := line(s); e.Line != want {
			t.Fatalf("history: %+v, want %q", e, want)
		}
	}
	buf.Add(logbuf.Entry{Line: "new", PID: 9})
	if e := line(s); e.Line != "new" || e.Seq != 4 || e.PID != 9 {
		t.Fatalf("live line %+v", e)
	}

	// Resuming after line 2 gets 3 and 4, whatever the query asks.
	s2 := stream(t, srv.URL+"/api/servers/a/logs?tail=0", "Accept", "text/event-stream", "Last-Event-ID", buf.Epoch()+"-2")
	if a, b := line(s2), line(s2); a.Seq != 3 || b.Seq != 4 {
		t.Fatalf("resumed with %d, %d; want 3, 4", a.Seq, b.Seq)
	}
	// Resuming after a line the buffer has discarded since: told so.
	for i := range 6 {
		buf.Add(logbuf.Entry{Line: fmt.Sprint("burst ", i+1)}) // 5..10; 6..10 kept
	}
	s3 := stream(t, srv.URL+"/api/servers/a/logs?follow=1", "Last-Event-ID", buf.Epoch()+"-3")
	if e := s3.next(); e.event != "dropped" || e.data != `{"dropped":2}` {
		t.Fatalf("after a discarded position: %+v, want 2 dropped (4 and 5)", e)
	}
	if e := line(s3); e.Seq != 6 {
		t.Fatalf("then %+v, want line 6", e)
	}
	// An id of another buffer (another run of mcpvisor), or none of
	// ours: every kept line, and the count of those discarded.
	for _, id := range []string{"0other.1-8", "garbage", buf.Epoch() + "-99"} {
		s4 := stream(t, srv.URL+"/api/servers/a/logs?follow=1", "Last-Event-ID", id)
		if e := s4.next(); e.event != "dropped" || e.data != `{"dropped":5}` {
			t.Fatalf("Last-Event-ID %q: %+v, want the 5 discarded counted", id, e)
		}
		if e := line(s4); e.Seq != 6 {
			t.Fatalf("Last-Event-ID %q: then %+v, want line 6", id, e)
		}
	}
	// The first follower, live all along, accounts for every line of
	// the burst, seen or counted as dropped (the buffer may have
	// discarded line 5 before it was sent).
	for next := uint64(5); next <= 10; {
		e := s.next()
		var got struct{ Seq, Dropped uint64 }
		if err := json.Unmarshal([]byte(e.data), &got); err != nil {
			t.Fatal(err)
		}
		switch {
		case e.event == "dropped" && got.Dropped > 0:
			next += got.Dropped
		case e.event == "message" && got.Seq == next:
			next++
		default:
			t.Fatalf("live burst: %+v, want line %d", e, next)
		}
	}
}

// Closing the handler ends every live stream, log and event streams
// alike, at once, and leaves no goroutine behind.
func TestLogStreamEndsOnClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	buf := logbuf.New(logbuf.Options{})
	h := New(testFleet(t), NewEventLog(4), Options{Logs: func(string) *logbuf.Buffer { return buf }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	s := stream(t, srv.URL+"/api/servers/a/logs?follow=1")
	events := stream(t, srv.URL+"/api/events?follow")
	buf.Add(logbuf.Entry{Line: "hello"})
	if e := s.next(); !strings.Contains(e.data, `"line":"hello"`) {
		t.Fatalf("live line %+v", e)
	}
	h.Close()
	if !s.ended() || !events.ended() {
		t.Fatal("a stream outlived the handler's Close")
	}
	if h.streams.Load() != 0 {
		t.Fatalf("%d streams still served", h.streams.Load())
	}
	// A stream opened after Close ends at once.
	if s := stream(t, srv.URL+"/api/servers/a/logs?follow=1"); !s.ended() {
		t.Fatal("a stream opened after Close was served")
	}
	srv.Close()
	http.DefaultClient.CloseIdleConnections()
}

// A quiet stream gets a keepalive comment every streamKeepalive, and
// still each line as it comes.
func TestLogStreamKeepalive(t *testing.T) {
	old := streamKeepalive
	t.Cleanup(func() { streamKeepalive = old }) // after the server's Close
	streamKeepalive = 20 * time.Millisecond
	buf := logbuf.New(logbuf.Options{})
	_, srv := logServer(t, buf)
	s := stream(t, srv.URL+"/api/servers/a/logs?follow=1")
	for range 2 {
		s.comment("keepalive")
	}
	buf.Add(logbuf.Entry{Line: "after the quiet"})
	if e := s.next(); !strings.Contains(e.data, "after the quiet") {
		t.Fatalf("then %+v", e)
	}
}

// A follower of a server that a reload removes (the registry closes its
// buffer) gets the lines written before, then an "event: end" saying so,
// and the response ends; so does one that comes to the buffer after it
// was closed. Every read is bounded by the test's context.
func TestLogStreamEndsWhenServerRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	reg := logbuf.NewRegistry(logbuf.Options{})
	buf := reg.Get("a")
	h, srv := logServer(t, buf)
	open := func(header ...string) *sseReader {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/servers/a/logs?follow=1", nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Body.Close() })
		if r.StatusCode != 200 || r.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("follow: %d %s", r.StatusCode, r.Header.Get("Content-Type"))
		}
		return newSSEReader(t, r.Body)
	}
	wantLines := func(s *sseReader, want ...string) {
		t.Helper()
		for _, w := range want {
			e := s.next()
			var got logbuf.Entry
			if err := json.Unmarshal([]byte(e.data), &got); err != nil || e.event != "message" || got.Line != w {
				t.Fatalf("%+v, want the line %q", e, w)
			}
		}
	}
	// The end sets no event id: the stream's last stays the last line's,
	// lastLine.
	wantEnd := func(s *sseReader, lastLine string) {
		t.Helper()
		e := s.next()
		var end struct{ Reason, Message string }
		if err := json.Unmarshal([]byte(e.data), &end); err != nil || e.event != "end" || e.id != lastLine ||
			end.Reason != "removed" || end.Message != "server a was removed from the configuration" {
			t.Fatalf("%+v, want the end: removed", e)
		}
		if !s.ended() {
			t.Fatal("the stream goes on after its end")
		}
	}

	buf.Add(logbuf.Entry{Line: "first"})
	s := open()
	wantLines(s, "first") // it waits now
	buf.Add(logbuf.Entry{Line: "last words"})
	buf.Add(logbuf.Entry{Line: "goodbye"})
	reg.Remove("a")
	buf.Add(logbuf.Entry{Line: "from the grave"}) // dropped
	wantLines(s, "last words", "goodbye")
	wantEnd(s, buf.Epoch()+"-3")

	// One that got the buffer just before it was removed: its kept lines
	// (after Last-Event-ID), then the end, at once.
	s = open("Last-Event-ID", buf.Epoch()+"-2")
	wantLines(s, "goodbye")
	wantEnd(s, buf.Epoch()+"-3")
	if n := h.streams.Load(); n != 0 {
		t.Fatalf("%d streams still served", n)
	}
}
