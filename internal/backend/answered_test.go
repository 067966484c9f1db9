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

// A connection has answered once its server answered a request after the
// handshake — with a result or with a JSON-RPC error, through Call or a
// started call — and not before: the handshake alone is no answer.
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
	if c.Answered() {
		t.Fatal("answered after the handshake alone")
	}
	resp, err := c.Call(t.Context(), "no/such/method", nil)
	if err != nil || resp.Error == nil {
		t.Fatalf("call: %v %v", resp, err)
	}
	if !c.Answered() {
		t.Fatal("not answered after a JSON-RPC error answer")
	}

	c = connect()
	p, err := c.Start(t.Context(), "tools/call", json.RawMessage(`{"name":"echo","arguments":{"text":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Wait(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if !c.Answered() {
		t.Fatal("not answered after a started call's answer")
	}
}
