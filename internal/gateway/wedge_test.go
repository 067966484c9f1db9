package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A server that stops reading its stdin does not stall the stdio front's
// read loop nor any other server: notifications the client sends towards
// it are queued or dropped, and a request to another server is answered
// at once.
func TestAWedgedServerStallsNothingElse(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE"}}`)
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = StdioOptions{Logger: slog.New(slog.DiscardHandler)}.Serve(context.Background(), w.gw.Aggregate(), c2sR, s2cW)
		s2cW.Close()
	}()
	defer func() { c2sW.Close(); <-done }()
	answers := make(chan map[string]json.RawMessage, 16)
	go func() {
		sc := bufio.NewScanner(s2cR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["id"] != nil {
				answers <- m
			}
		}
		close(answers)
	}()
	send := func(line string) {
		if _, err := io.WriteString(c2sW, line+"\n"); err != nil {
			t.Error(err)
		}
	}
	answer := func(id string, within time.Duration) map[string]json.RawMessage {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case m, ok := <-answers:
				if !ok {
					t.Fatal("the front closed its output")
				}
				if string(m["id"]) == id {
					return m
				}
			case <-deadline:
				t.Fatalf("no answer to request %s within %v", id, within)
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"t","version":"0"}}}`)
	answer("1", 20*time.Second)
	for i, name := range []string{"a__echo", "b__echo"} {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":"x"}}}`, 10+i, name))
		answer(fmt.Sprint(10+i), 20*time.Second)
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__wedge"}}`)
	if m := answer("2", 20*time.Second); !strings.Contains(string(m["result"]), "wedged") {
		t.Fatalf("wedge: %s", m["result"])
	}
	// Enough to fill a's stdin pipe many times over.
	pad := strings.Repeat("x", 256<<10)
	start := time.Now()
	go func() {
		for range 16 {
			send(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":{"pad":"` + pad + `"}}`)
		}
		send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"b__echo","arguments":{"text":"still here"}}}`)
	}()
	m := answer("3", 5*time.Second)
	if !strings.Contains(string(m["result"]), "still here") {
		t.Fatalf("b__echo: %s %s", m["result"], m["error"])
	}
	t.Logf("a request to another server answered %v after 4 MiB of notifications towards a wedged one", time.Since(start).Round(time.Millisecond))
}
