package fleet

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// hintConnector records, at each Connect, what its era hint says, and
// makes connections that answer as srv.
type hintConnector struct {
	onConnect func(context.Context, Live)
	srv       *listServer
	hint      func() string
	mu        *sync.Mutex
	seen      *[]string
}

func (c *hintConnector) SetEraHint(h func() string) { c.hint = h }
func (c *hintConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	v := "<no hint set>"
	if c.hint != nil {
		v = c.hint()
	}
	c.mu.Lock()
	*c.seen = append(*c.seen, v)
	c.mu.Unlock()
	l := listConn{&fakeLive{done: make(chan struct{})}, c.srv}
	c.onConnect(ctx, l)
	return l, nil
}

// The era a run learned reaches the connector of the next run
// (through runLocked's SetEraHint), with no list cached.
func TestTheEraHintReachesTheNextRunsConnector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parseDoc(t, `{"mcpServers":{"s":{"command":"fake","idleTimeout":"0"}}}`)
		legacy, _ := backend.ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25"}`))
		srv := &listServer{init: legacy}
		var mu sync.Mutex
		var seen []string
		f, err := New(cfg, Options{Logger: discardLogger(),
			Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
				return &hintConnector{onConnect: onConnect, srv: srv, mu: &mu, seen: &seen}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		s := f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		if err := s.Sleep(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("hints seen: %q", seen)
		if len(seen) != 2 || seen[1] != backend.ProtocolVersion {
			t.Fatalf("hints %q: the second run's connector was not told the server is legacy", seen)
		}
	})
}
