package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/fleet/fleettest"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// lateFirstConn is c's running connection: its first tools/list waits
// for gate and then gives late (an error when late.Result is nil); every
// later one answers with "conly" at once.
type lateFirstConn struct {
	*learnedConn
	lists atomic.Int32
	gate  chan struct{}
	late  *rpc.Message
}

func (c *lateFirstConn) Call(ctx context.Context, method string, params json.RawMessage) (*rpc.Message, error) {
	if method == "tools/list" && c.lists.Add(1) == 1 {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if c.late.Result == nil {
			return nil, errors.New("the first list failed")
		}
		return c.late, nil
	}
	return c.learnedConn.Call(ctx, method, params)
}

// staleBuild runs a table build (gen 0) that c holds up in its first
// tools/list, then a newer one (after an invalidation) that lists c's
// "conly" at once, then lets the first finish with late; it returns the
// gateway, the session's recorder and what the session's second list got.
func staleBuild(t *testing.T, late *rpc.Message, logs *testserver.Buffer) (*Gateway, Endpoint, *Session, *recorder, string) {
	t.Helper()
	init, err := fleettest.ParseInit(json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"c","version":"1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	conns := &atomic.Int32{}
	connector := connectorFunc(func(s *config.Server, onConnect func(context.Context, fleet.Live)) lifecycle.Connector {
		if s.Name != "c" {
			return refusingConnector{&atomic.Int32{}}
		}
		return connectFunc(func(ctx context.Context) (lifecycle.Session, error) {
			conns.Add(1)
			l := &lateFirstConn{learnedConn: &learnedConn{init: init, done: make(chan struct{})}, gate: gate, late: late}
			onConnect(ctx, l)
			return l, nil
		})
	})
	g, _ := cachedWorld(t, `{"a":{"command":"fake-a"},"c":{"command":"fake-c","idleTimeout":"1h"}}`, connector,
		map[string][]json.RawMessage{"a": {json.RawMessage(`{"name":"echo","inputSchema":{"type":"object"}}`)}}, logs, nil)
	ep := g.Aggregate()
	out := newRecorder()
	s := ep.Open(out)
	t.Cleanup(func() { ep.Close(s) })

	first := make(chan struct{})
	go func() {
		defer close(first)
		ep.Handle(context.Background(), s, request(1, "tools/list", nil), newRecorder())
	}()
	synctest.Wait() // the first build waits in c's first tools/list
	select {
	case <-first:
		t.Fatal("the first list did not wait for c")
	default:
	}
	g.agg.invalidate()
	second := listTools(t, ep, s, 2)
	if !strings.Contains(second, "conly") {
		t.Fatalf("the newer table does not list c: %s", second)
	}
	close(gate)
	<-first
	synctest.Wait() // what the first start set off (a refresh of c) is done
	if conns.Load() != 1 {
		t.Fatalf("c was started %d times, not once", conns.Load())
	}
	return g, ep, s, out, second
}

// A build begun before an invalidation that finishes after a newer one
// does not overwrite what the newer one found: c, listed by the newer
// table, is not recorded as left out by the older build's late failure —
// so the next table, which lists it as every one since did, does not tell
// the clients that c is back.
func TestAStaleBuildDoesNotMarkAServerLeftOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, ep, s, out, _ := staleBuild(t, &rpc.Message{}, &testserver.Buffer{})
		told := out.count("notifications/tools/list_changed")
		g.agg.invalidate()
		if got := listTools(t, ep, s, 3); !strings.Contains(got, "conly") {
			t.Fatalf("the third table does not list c: %s", got)
		}
		synctest.Wait()
		if n := out.count("notifications/tools/list_changed") - told; n != 0 {
			t.Fatalf("the client was told %d times that c's tools changed, though every table it got listed them", n)
		}
	})
}

// A build begun before an invalidation that finishes after a newer one
// logs no collision of its own: its late list of c (which then exported
// a's "echo") is not what any table serves, and the newer build found no
// collision.
func TestAStaleBuildLogsNoCollision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testserver.Buffer
		late := &rpc.Message{Result: json.RawMessage(`{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`)}
		g, _, _, _, _ := staleBuild(t, late, &logs)
		if n := strings.Count(logs.String(), "name collision"); n != 0 {
			t.Fatalf("%d collisions logged from a build no table came from:\n%s", n, logs.String())
		}
		if c := g.Collisions(); len(c) != 0 {
			t.Fatalf("collisions reported from a stale build: %q", c)
		}
	})
}

// connectFunc is a lifecycle.Connector made of a function.
type connectFunc func(context.Context) (lifecycle.Session, error)

func (f connectFunc) Connect(ctx context.Context) (lifecycle.Session, error) { return f(ctx) }
