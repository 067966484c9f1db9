package gateway

import (
	"sync"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A session opened through WithClientHint carries the hint, readable
// while other goroutines read it; the endpoint stays its gateway's, so
// what a front refuses on it is still counted there.
func TestWithClientHint(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	g := w.gw
	for _, ep := range []Endpoint{g.Aggregate(), g.Single("a")} {
		h := WithClientHint(ep, "claude")
		if gatewayOf(h) != g {
			t.Fatal("the hinted endpoint lost its gateway")
		}
		s := h.Open(SinkFunc(func(*rpc.Message) error { return nil }))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if got := s.ClientHint(); got != "claude" {
					t.Errorf("ClientHint %q", got)
				}
			})
		}
		wg.Wait()
		h.Close(s)
		if plain := ep.Open(SinkFunc(func(*rpc.Message) error { return nil })); plain.ClientHint() != "" {
			t.Errorf("a session opened without a hint has %q", plain.ClientHint())
		} else {
			ep.Close(plain)
		}
	}
}
