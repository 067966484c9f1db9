package admin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/sse"
)

func testFleet(t *testing.T) *fleet.Fleet {
	cfg, err := config.Parse([]byte(`{"mcpServers":{"a":{"command":"x"},"b":{"command":"y"},"off":{"command":"z","disabled":true}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(cfg, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestServersAndAuth(t *testing.T) {
	log := NewEventLog(2)
	for _, typ := range []event.Kind{"started", "dormant", "respawned"} {
		log.Add(fleet.Event{Server: "a", Type: typ})
	}
	srv := httptest.NewServer(New(testFleet(t), log, Options{Access: guard.Options{Token: "secret"}}))
	defer srv.Close()

	get := func(path, token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := get("/api/servers", ""); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", r.StatusCode)
	}
	if r := get("/api/servers", "wrong"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", r.StatusCode)
	}
	r := get("/api/servers", "secret")
	var body Servers
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.StatusCode != 200 {
		t.Fatalf("servers: %d %v", r.StatusCode, err)
	}
	if body.Totals.Total != 2 || body.Totals.ByState["new"] != 2 || body.Totals.Active != 0 || len(body.Servers) != 2 || body.Servers[0].Name != "a" {
		t.Fatalf("body %+v", body)
	}
	r = get("/api/events", "secret")
	var ev struct{ Events []fleet.Event }
	json.NewDecoder(r.Body).Decode(&ev)
	if len(ev.Events) != 2 || ev.Events[1].Type != "respawned" || log.Count("a", "dormant") != 1 {
		t.Fatalf("events kept: %+v", ev.Events)
	}
}

func TestDNSRebindingRefused(t *testing.T) {
	srv := httptest.NewServer(New(testFleet(t), nil, Options{}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/servers", nil)
	req.Host = "evil.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign Host on loopback: %d", resp.StatusCode)
	}
}

func get(t *testing.T, url string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestMetrics(t *testing.T) {
	log := NewEventLog(1) // counting does not depend on what is kept
	for _, typ := range []event.Kind{"started", "dormant", "respawned", "dormant"} {
		log.Add(fleet.Event{Server: "a", Type: typ})
	}
	log.Add(fleet.Event{Server: "gone", Type: "stopped"})
	// A type /metrics does not list for every server is counted too.
	log.Add(fleet.Event{Server: "a", Type: "definitions_changed"})
	collisions := []string{`x: "a" (also b)`}
	held := map[string]int{"a": 2}
	srv := httptest.NewServer(New(testFleet(t), log, Options{Collisions: func() []string { return collisions }, HeldCalls: func() map[string]int { return held }}))
	defer srv.Close()
	var st Servers
	if r := get(t, srv.URL+"/api/servers"); json.NewDecoder(r.Body).Decode(&st) != nil || st.HeldCalls["a"] != 2 {
		t.Fatalf("/api/servers held calls %v", st.HeldCalls)
	}
	r := get(t, srv.URL+"/metrics")
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	samples := parseExposition(t, string(body))
	for series, want := range map[string]float64{
		`mcpvisor_servers{state="new"}`:                                2,
		`mcpvisor_servers{state="running"}`:                            0,
		`mcpvisor_server_state{server="a",state="new"}`:                1,
		`mcpvisor_server_state{server="b",state="dormant"}`:            0,
		`mcpvisor_server_in_flight{server="a"}`:                        0,
		`mcpvisor_server_requests_total{server="b"}`:                   0,
		`mcpvisor_events_total{server="a",type="dormant"}`:             2,
		`mcpvisor_events_total{server="a",type="respawned"}`:           1,
		`mcpvisor_events_total{server="b",type="exited"}`:              0,
		`mcpvisor_events_total{server="gone",type="stopped"}`:          1,
		`mcpvisor_events_total{server="a",type="definitions_changed"}`: 1,
		`mcpvisor_name_collisions`:                                     1,
		`mcpvisor_held_calls{server="a"}`:                              2,
		`mcpvisor_held_calls{server="b"}`:                              0,
		`mcpvisor_server_start_time_seconds{server="a"}`:               0,
		`mcpvisor_server_dormant_since_seconds{server="a"}`:            0,
	} {
		got, ok := samples[series]
		if !ok {
			t.Errorf("no %s in\n%s", series, body)
		} else if got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if _, ok := samples[`mcpvisor_server_state{server="off",state="new"}`]; ok {
		t.Error("a disabled server has series")
	}
	if samples["mcpvisor_goroutines"] < 1 || samples["process_start_time_seconds"] < 1e9 {
		t.Errorf("process series missing or wrong:\n%s", body)
	}
	if runtime.GOOS == "linux" && samples["process_resident_memory_bytes"] < 1<<20 {
		t.Errorf("resident memory %v", samples["process_resident_memory_bytes"])
	}
}

// parseExposition checks the text format line by line (every sample
// belongs to the family declared just before it, HELP before TYPE, no
// family twice) and returns the samples by series.
func parseExposition(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	families := map[string]bool{}
	family := ""
	histogram := false
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? (\S+)$`)
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			if families[name] {
				t.Fatalf("line %d: family %s twice", i+1, name)
			}
			families[name], family = true, name
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 || f[2] != family || (f[3] != "gauge" && f[3] != "counter" && f[3] != "histogram") {
				t.Fatalf("line %d: %q", i+1, line)
			}
			histogram = f[3] == "histogram"
		default:
			m := sample.FindStringSubmatch(line)
			ok := m != nil && m[1] == family
			if m != nil && histogram {
				ok = m[1] == family+"_bucket" || m[1] == family+"_sum" || m[1] == family+"_count"
			}
			if !ok {
				t.Fatalf("line %d: %q is no sample of %s", i+1, line, family)
			}
			v, err := strconv.ParseFloat(m[len(m)-1], 64)
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			series := strings.TrimSuffix(line, " "+m[len(m)-1])
			if _, dup := out[series]; dup {
				t.Fatalf("line %d: %s twice", i+1, series)
			}
			out[series] = v
		}
	}
	return out
}

func TestLabelEscaping(t *testing.T) {
	if got, want := labels("server", "a\"b\\c\nd"), `{server="a\"b\\c\nd"}`; got != want {
		t.Fatalf("labels = %s, want %s", got, want)
	}
}

// sseReader reads an event stream with internal/sse, which skips
// comments; comment reads one byte for byte.
type sseReader struct {
	t    *testing.T
	raw  *bufio.Reader // the body, read by r
	r    *sse.Reader
	read bool // r has read: raw is no longer where the stream is
}

// sseEvent is one event as internal/sse reads it: id is the stream's last
// event ID as of the event (an id field persists until another), event
// its type ("message" when no event field names one).
type sseEvent struct {
	id, event, data string
}

func newSSEReader(t *testing.T, body io.Reader) *sseReader {
	raw := bufio.NewReader(body)
	return &sseReader{t: t, raw: raw, r: sse.NewReader(raw, 1<<20)}
}

func (s *sseReader) next() sseEvent {
	s.t.Helper()
	s.read = true
	e, err := s.r.Next()
	if err != nil {
		s.t.Fatalf("stream ended: %v", err)
	}
	return sseEvent{id: e.ID, event: e.Type, data: string(e.Data)}
}

func (s *sseReader) ended() bool {
	s.read = true
	_, err := s.r.Next()
	return err == io.EOF
}

// comment reads the comment ": text" and the blank line that ends it,
// exactly as the handler writes them, before any event was read.
func (s *sseReader) comment(text string) {
	s.t.Helper()
	if s.read {
		s.t.Fatal("a comment read after an event: the event reader may have read past it")
	}
	want := ": " + text + "\n\n"
	got := make([]byte, len(want))
	if n, err := io.ReadFull(s.raw, got); err != nil || string(got) != want {
		s.t.Fatalf("read %q, %v; want %q", got[:n], err, want)
	}
}

func stream(t *testing.T, url string, header ...string) *sseReader {
	t.Helper()
	r := get(t, url, header...)
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", url, r.StatusCode, r.Header.Get("Content-Type"))
	}
	return newSSEReader(t, r.Body)
}

// seq is the run-local part of an event id.
func seq(id string) string {
	_, n, _ := strings.Cut(id, "-")
	return n
}

func TestEventStream(t *testing.T) {
	log := NewEventLog(3)
	for _, typ := range []event.Kind{"started", "dormant", "respawned", "exited"} {
		log.Add(fleet.Event{Server: "a", Type: typ}) // 1..4; 2..4 kept
	}
	kept := log.Events()
	srv := httptest.NewServer(New(testFleet(t), log, Options{}))
	defer srv.Close()

	// An EventSource gets what is kept, then live events.
	s := stream(t, srv.URL+"/api/events", "Accept", "text/event-stream")
	for i, want := range []string{"2 dormant", "3 respawned", "4 exited"} {
		if e := s.next(); seq(e.id)+" "+e.event != want || e.id != kept[i].ID {
			t.Fatalf("replayed %+v, want %s (id %s)", e, want, kept[i].ID)
		}
	}
	// Resuming after the third, with ?follow (curl -N), gets the fourth
	// and then the same live events.
	s2 := stream(t, srv.URL+"/api/events?follow", "Last-Event-ID", kept[1].ID)
	if e := s2.next(); seq(e.id) != "4" {
		t.Fatalf("resumed at %+v, want the fourth", e)
	}
	// An id of an earlier run of mcpvisor, whatever its number, gets
	// everything kept: this run's events are all new to that client.
	s3 := stream(t, srv.URL+"/api/events?follow", "Last-Event-ID", "0earlier-3")
	if e := s3.next(); seq(e.id) != "2" {
		t.Fatalf("resumed from an earlier run at %+v, want the first kept", e)
	}
	s3.next()
	s3.next()
	log.Add(fleet.Event{Server: "b", Type: "restarted", Details: map[string]any{"pid": 7}})
	for _, s := range []*sseReader{s, s2, s3} {
		e := s.next()
		var got Entry
		if err := json.Unmarshal([]byte(e.data), &got); err != nil || seq(e.id) != "5" || e.event != "restarted" ||
			got.ID != e.id || got.Server != "b" || got.Details["pid"] != float64(7) {
			t.Fatalf("live event %+v (%+v, %v)", e, got, err)
		}
	}
	for _, bad := range []string{"x", "3", "-3", "e-x"} {
		if r := get(t, srv.URL+"/api/events?follow&after="+bad); r.StatusCode != http.StatusBadRequest {
			t.Fatalf("bad id %q: %d", bad, r.StatusCode)
		}
		// An EventSource that sends it gets the stream, from the start of
		// what is kept, not an error it would never retry after.
		r := get(t, srv.URL+"/api/events", "Accept", "text/event-stream", "Last-Event-ID", bad)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("Last-Event-ID %q: %d", bad, r.StatusCode)
		}
		if e := newSSEReader(t, r.Body).next(); seq(e.id) != "3" {
			t.Fatalf("Last-Event-ID %q replayed from %+v, want the first kept", bad, e)
		}
	}
	// Closing the log ends every stream.
	log.Close()
	if !s.ended() || !s2.ended() || !s3.ended() {
		t.Fatal("a stream outlived the log")
	}
	// The plain list carries the ids too.
	var list struct{ Events []Entry }
	if err := json.NewDecoder(get(t, srv.URL+"/api/events").Body).Decode(&list); err != nil ||
		len(list.Events) != 3 || seq(list.Events[2].ID) != "5" || list.Events[2].Type != "restarted" {
		t.Fatalf("list %+v %v", list, err)
	}
}

// A subscriber that does not keep up is dropped, told so, and can resume
// from the log.
func TestEventStreamLagged(t *testing.T) {
	defer func(n int) { streamBuffer = n }(streamBuffer)
	streamBuffer = 2
	log := NewEventLog(100)
	_, ch, lagged, cancel, err := log.Subscribe("", streamBuffer)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	for i := range 3 {
		log.Add(fleet.Event{Server: "a", Type: "started", Details: map[string]any{"n": i}})
	}
	n := 0
	for range ch {
		n++
	}
	if n != 2 || !lagged() {
		t.Fatalf("got %d events, lagged %v; want 2 and dropped", n, lagged())
	}
	replay, _, _, cancel2, err := log.Subscribe(log.Events()[1].ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel2()
	if len(replay) != 1 || seq(replay[0].ID) != "3" {
		t.Fatalf("resumed with %+v", replay)
	}

	// Over HTTP: the stream, held up at its first live event while more
	// arrive, says "lagged" and ends.
	hold := make(chan struct{})
	streamHold = func() { <-hold }
	defer func() { streamHold = func() {} }()
	srv := httptest.NewServer(New(testFleet(t), log, Options{}))
	defer srv.Close()
	s := stream(t, srv.URL+"/api/events?follow&after="+log.Events()[2].ID)
	for i := range streamBuffer + 2 {
		log.Add(fleet.Event{Server: "a", Type: "dormant", Details: map[string]any{"n": i}})
	}
	close(hold)
	for {
		e := s.next()
		if e.event == "lagged" {
			break
		}
		if e.event != "dormant" {
			t.Fatalf("event %+v", e)
		}
	}
	if !s.ended() {
		t.Fatal("the stream went on after lagged")
	}
}

// A client that stops reading is dropped when a write to it stalls, and at
// once (after the close grace) when the log closes: it holds neither a
// goroutine nor mcpvisor's shutdown.
func TestStalledStreamIsDropped(t *testing.T) {
	defer func(g time.Duration) { streamCloseGrace = g }(streamCloseGrace)
	streamCloseGrace = 100 * time.Millisecond
	blob := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name    string
		timeout time.Duration
		end     func(*EventLog)
	}{
		{"write-timeout", 2 * time.Second, func(*EventLog) {}},
		{"log-closed", time.Hour, (*EventLog).Close},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := NewEventLog(4)
			h := New(testFleet(t), log, Options{WriteTimeout: c.timeout})
			srv := httptest.NewServer(h)
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET /api/events?follow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			for h.streams.Load() != 1 {
				time.Sleep(time.Millisecond)
			}
			// 64 MB that nobody reads: more than the loopback buffers
			// hold, so a write blocks.
			for i := range 64 {
				log.Add(fleet.Event{Server: "a", Type: "started", Details: map[string]any{"n": i, "blob": blob}})
			}
			// The stream is blocked in a write once it stops taking
			// events from its queue — or, on a loaded machine, already
			// dropped by its write timeout (its queue gone with it).
			giveUp := time.Now().Add(30 * time.Second)
			for n, since := pending(log), time.Now(); (n == 0 || time.Since(since) < 300*time.Millisecond) && h.streams.Load() != 0; {
				if time.Now().After(giveUp) {
					t.Fatalf("the stream neither blocked nor ended in 30 s (%d events queued)", n)
				}
				time.Sleep(5 * time.Millisecond)
				if m := pending(log); m != n {
					n, since = m, time.Now()
				}
			}
			if h.streams.Load() == 0 && c.timeout == time.Hour {
				t.Fatal("the stream ended before the log closed")
			}
			blocked := time.Now()
			c.end(log)
			deadline := blocked.Add(10 * time.Second)
			for h.streams.Load() != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the stalled stream is still served")
				}
				time.Sleep(5 * time.Millisecond)
			}
			// A stream that was not blocked would end at once on the
			// log's close, without its grace.
			if took := time.Since(blocked); c.timeout == time.Hour && took < streamCloseGrace/2 {
				t.Fatalf("the stream ended %v after the close: it was not blocked", took)
			}
		})
	}
}

// pending counts the events queued for the log's subscribers.
func pending(l *EventLog) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for s := range l.subs {
		n += len(s.ch)
	}
	return n
}
