package observe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
)

// A follower that serve says lagged, or whose stream goes quiet, opens
// the stream again after the last event it printed, and prints nothing
// twice.
func TestFollowEventsResumes(t *testing.T) {
	old := eventsQuiet
	eventsQuiet = 300 * time.Millisecond
	t.Cleanup(func() { eventsQuiet = old })
	var mu sync.Mutex
	var lastIDs []string
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(lastIDs)
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(id, typ string) {
			fmt.Fprintf(w, "id: %s\nevent: %s\ndata: {\"id\":%q,\"server\":\"a\",\"type\":%q,\"time\":\"2026-01-01T00:00:00Z\"}\n\n", id, typ, id, typ)
		}
		switch n {
		case 0: // two events, then lagged
			ev("1-1", "started")
			ev("1-2", "dormant")
			fmt.Fprint(w, "event: lagged\ndata: {}\n\n")
		case 1: // one event, then silence
			ev("1-3", "respawned")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		default: // the end of the stream: serve stops
			ev("1-4", "stopped")
		}
	}))
	defer srv.Close()
	defer close(release)
	api := &adminclient.Client{Addr: srv.URL}
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := followEvents(ctx, api, func(e admin.Entry) { got = append(got, e.ID+" "+string(e.Type)) })
	if err != nil && err != io.EOF {
		t.Fatalf("followEvents: %v", err)
	}
	want := "1-1 started,1-2 dormant,1-3 respawned,1-4 stopped"
	if strings.Join(got, ",") != want || strings.Join(lastIDs, ",") != ",1-2,1-3" {
		t.Fatalf("printed %q after Last-Event-IDs %q; want %q after \",1-2,1-3\"", got, lastIDs, want)
	}
}

// A serve that takes the connection and never answers is given up on
// after the quiet bound, with an error that says so.
func TestFollowEventsConnectBounded(t *testing.T) {
	old := eventsQuiet
	eventsQuiet = 200 * time.Millisecond
	t.Cleanup(func() { eventsQuiet = old })
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // no headers, ever
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := followEvents(ctx, &adminclient.Client{Addr: srv.URL}, func(admin.Entry) { t.Error("an event from nowhere") })
	if err == nil || !strings.Contains(err.Error(), "no word from") || ctx.Err() != nil {
		t.Fatalf("followEvents against a silent serve: %v (test context: %v)", err, ctx.Err())
	}
}

// A serve that says "lagged" on every connect is asked again after a
// pause each time, not in a tight loop: in 500 ms, at most a dozen
// connects where lagPause (100 ms) allows five or six.
func TestFollowEventsLagIsPaced(t *testing.T) {
	var mu sync.Mutex
	connects := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		connects++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: lagged\ndata: {}\n\n")
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background()) // an interrupt, 500 ms in
	defer time.AfterFunc(500*time.Millisecond, cancel).Stop()
	if err := followEvents(ctx, &adminclient.Client{Addr: srv.URL}, func(admin.Entry) {}); err != nil {
		t.Fatalf("followEvents: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if connects < 2 || connects > 12 {
		t.Fatalf("%d connects in 500 ms; want a reconnect after each lag, paced by %v", connects, lagPause)
	}
}

// An event whose data spans lines (JSON written over two data lines) is
// printed whole, and keep-alive comments are word from serve: the stream
// that carries only them for longer than the quiet bound is not opened
// again.
func TestFollowEventsMultiLineDataAndKeepAlives(t *testing.T) {
	old := eventsQuiet
	eventsQuiet = 300 * time.Millisecond
	t.Cleanup(func() { eventsQuiet = old })
	var mu sync.Mutex
	connects := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		connects++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: 1-1\nevent: started\ndata: {\"id\":\"1-1\",\"server\":\"a\",\ndata: \"type\":\"started\",\"time\":\"2026-01-01T00:00:00Z\"}\n\n")
		for range 8 { // 800 ms of keep-alives, the quiet bound 300 ms
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			fmt.Fprint(w, ": keep-alive\n")
		}
		fmt.Fprint(w, "id: 1-2\nevent: stopped\ndata: {\"id\":\"1-2\",\"server\":\"a\",\"type\":\"stopped\",\"time\":\"2026-01-01T00:00:01Z\"}\n\n")
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	if err := followEvents(ctx, &adminclient.Client{Addr: srv.URL}, func(e admin.Entry) { got = append(got, e.ID+" "+string(e.Type)) }); err != nil && err != io.EOF {
		t.Fatalf("followEvents: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, ",") != "1-1 started,1-2 stopped" || connects != 1 {
		t.Fatalf("printed %q in %d connects; want both events in one", got, connects)
	}
}
