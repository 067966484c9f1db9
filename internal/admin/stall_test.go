package admin

import (
	"github.com/mcpvisor/mcpvisor/internal/event"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// A plain reply — a long event list, a /metrics exposition written as it
// is made — to a client that does not read it is given
// Options.WriteTimeout, then the connection is dropped.
func TestStalledReplyIsDropped(t *testing.T) {
	t.Run("events", func(t *testing.T) {
		log := NewEventLog(16)
		blob := strings.Repeat("x", 1<<20)
		for i := range 16 {
			log.Add(fleet.Event{Server: "a", Type: "started", Details: map[string]any{"n": i, "blob": blob}})
		}
		stalledReplyIsDropped(t, log, "/api/events")
	})
	t.Run("metrics", func(t *testing.T) {
		log := NewEventLog(16)
		name := strings.Repeat("s", 200)
		for i := range 40000 { // counted per server: a megabyte of series
			log.Add(fleet.Event{Server: name + strconv.Itoa(i), Type: event.Kind("x" + strconv.Itoa(i%3))})
		}
		stalledReplyIsDropped(t, log, "/metrics")
	})
}

func stalledReplyIsDropped(t *testing.T, log *EventLog, path string) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(New(testFleet(t), log, Options{WriteTimeout: 200 * time.Millisecond}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The bound only ends a failing run: the reply (16 MB of events,
	// marshalled under the race detector on a busy machine) can take
	// several seconds to reach the stalled write, which is then dropped
	// after WriteTimeout.
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatalf("the server still writes %s to a client that does not read", path)
	}
}
