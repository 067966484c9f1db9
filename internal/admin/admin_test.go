package admin

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
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
	for _, typ := range []string{"started", "dormant", "respawned"} {
		log.Add(fleet.Event{Server: "a", Type: typ})
	}
	srv := httptest.NewServer(New(testFleet(t), log, Options{Token: "secret"}))
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
	for _, typ := range []string{"started", "dormant", "respawned", "dormant"} {
		log.Add(fleet.Event{Server: "a", Type: typ})
	}
	log.Add(fleet.Event{Server: "gone", Type: "stopped"})
	collisions := []string{`x: "a" (also b)`}
	srv := httptest.NewServer(New(testFleet(t), log, Options{Collisions: func() []string { return collisions }}))
	defer srv.Close()
	r := get(t, srv.URL+"/metrics")
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	samples := parseExposition(t, string(body))
	for series, want := range map[string]float64{
		`mcpvisor_servers{state="new"}`:                       2,
		`mcpvisor_servers{state="running"}`:                   0,
		`mcpvisor_server_state{server="a",state="new"}`:       1,
		`mcpvisor_server_state{server="b",state="dormant"}`:   0,
		`mcpvisor_server_in_flight{server="a"}`:               0,
		`mcpvisor_server_requests_total{server="b"}`:          0,
		`mcpvisor_events_total{server="a",type="dormant"}`:    2,
		`mcpvisor_events_total{server="a",type="respawned"}`:  1,
		`mcpvisor_events_total{server="b",type="exited"}`:     0,
		`mcpvisor_events_total{server="gone",type="stopped"}`: 1,
		`mcpvisor_name_collisions`:                            1,
		`mcpvisor_server_start_time_seconds{server="a"}`:      0,
		`mcpvisor_server_dormant_since_seconds{server="a"}`:   0,
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
			if len(f) != 4 || f[2] != family || (f[3] != "gauge" && f[3] != "counter") {
				t.Fatalf("line %d: %q", i+1, line)
			}
		default:
			m := sample.FindStringSubmatch(line)
			if m == nil || m[1] != family {
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

// sseReader reads Server-Sent Events.
type sseReader struct {
	t *testing.T
	r *bufio.Reader
}

type sseEvent struct {
	id, event, data string
}

func (s *sseReader) next() sseEvent {
	s.t.Helper()
	var e sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if e.event != "" || e.data != "" {
				return e
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			e.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			e.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			e.data = strings.TrimPrefix(line, "data: ")
		default:
			s.t.Fatalf("unexpected line %q", line)
		}
	}
}

func (s *sseReader) ended() bool {
	_, err := s.r.ReadString('\n')
	return err == io.EOF
}

func stream(t *testing.T, url string, header ...string) *sseReader {
	t.Helper()
	r := get(t, url, header...)
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", url, r.StatusCode, r.Header.Get("Content-Type"))
	}
	return &sseReader{t: t, r: bufio.NewReader(r.Body)}
}

func TestEventStream(t *testing.T) {
	log := NewEventLog(3)
	for _, typ := range []string{"started", "dormant", "respawned", "exited"} {
		log.Add(fleet.Event{Server: "a", Type: typ}) // ids 1..4; 2..4 kept
	}
	srv := httptest.NewServer(New(testFleet(t), log, Options{}))
	defer srv.Close()

	// An EventSource gets what is kept, then live events.
	s := stream(t, srv.URL+"/api/events", "Accept", "text/event-stream")
	for _, want := range []string{"2 dormant", "3 respawned", "4 exited"} {
		if e := s.next(); e.id+" "+e.event != want {
			t.Fatalf("replayed %+v, want %s", e, want)
		}
	}
	// Resuming after id 3, with ?follow (curl -N), gets 4 and then the
	// same live events.
	s2 := stream(t, srv.URL+"/api/events?follow", "Last-Event-ID", "3")
	if e := s2.next(); e.id != "4" {
		t.Fatalf("resumed at %+v, want id 4", e)
	}
	log.Add(fleet.Event{Server: "b", Type: "restarted", Details: map[string]any{"pid": 7}})
	for _, s := range []*sseReader{s, s2} {
		e := s.next()
		var got Entry
		if err := json.Unmarshal([]byte(e.data), &got); err != nil || e.id != "5" || e.event != "restarted" ||
			got.ID != 5 || got.Server != "b" || got.Details["pid"] != float64(7) {
			t.Fatalf("live event %+v (%+v, %v)", e, got, err)
		}
	}
	// Closing the log ends every stream.
	log.Close()
	if !s.ended() || !s2.ended() {
		t.Fatal("a stream outlived the log")
	}
	if r := get(t, srv.URL+"/api/events?after=x", "Accept", "text/event-stream"); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad id: %d", r.StatusCode)
	}
	// The plain list carries the ids too.
	var list struct{ Events []Entry }
	if err := json.NewDecoder(get(t, srv.URL+"/api/events").Body).Decode(&list); err != nil ||
		len(list.Events) != 3 || list.Events[2].ID != 5 || list.Events[2].Type != "restarted" {
		t.Fatalf("list %+v %v", list, err)
	}
}

// A subscriber that does not keep up is dropped, told so, and can resume
// from the log.
func TestEventStreamLagged(t *testing.T) {
	defer func(n int) { streamBuffer = n }(streamBuffer)
	streamBuffer = 2
	log := NewEventLog(100)
	_, ch, lagged, cancel := log.Subscribe(0, streamBuffer)
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
	replay, _, _, cancel2 := log.Subscribe(2, 1)
	defer cancel2()
	if len(replay) != 1 || replay[0].ID != 3 {
		t.Fatalf("resumed with %+v", replay)
	}

	// Over HTTP: the stream, held up at its first live event while more
	// arrive, says "lagged" and ends.
	hold := make(chan struct{})
	streamHold = func() { <-hold }
	defer func() { streamHold = func() {} }()
	srv := httptest.NewServer(New(testFleet(t), log, Options{}))
	defer srv.Close()
	s := stream(t, srv.URL+"/api/events?follow&after=3")
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
