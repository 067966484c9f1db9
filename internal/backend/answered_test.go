package backend

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// A connection has answered once the gateway says its server answered a
// client's request (MarkAnswered), and not before: the handshake and
// mcpvisor's own calls are no answer.
func TestConnAnswered(t *testing.T) {
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	connect := func() *Conn {
		sc := &StdioConnector{
			Name:    "s",
			Runtime: rt,
			Spec:    proc.Spec{Command: testserver.Build(t), Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t))},
			Logger:  quiet(),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := sc.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := s.(*Conn)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var _ lifecycle.Answerer = (*Conn)(nil)

	c := connect()
	// Neither the handshake nor mcpvisor's own requests are a client's
	// answer: only the gateway, through its lease, says so.
	if _, err := c.Call(t.Context(), "tools/list", nil); err != nil {
		t.Fatal(err)
	}
	p, err := c.Start(t.Context(), "tools/call", json.RawMessage(`{"name":"echo","arguments":{"text":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Wait(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if c.Answered() {
		t.Fatal("answered before a client's request was")
	}
	c.MarkAnswered()
	c.MarkAnswered()
	if !c.Answered() {
		t.Fatal("not answered after MarkAnswered")
	}
}
