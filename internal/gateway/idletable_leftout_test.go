package gateway

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/fleet/fleettest"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// hangingConnector never finishes a start: Connect waits for its
// context (the start's InitTimeout), counting the starts.
type hangingConnector struct{ starts *atomic.Int32 }

func (c hangingConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	c.starts.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// hangingFor is a fleet connector whose server name hangs and whose
// others refuse.
func hangingFor(name string, starts *atomic.Int32) fleet.ConnectorFunc {
	return connectorFunc(func(s *config.Server, _ func(context.Context, fleet.Live)) lifecycle.Connector {
		if s.Name == name {
			return hangingConnector{starts}
		}
		return refusingConnector{&atomic.Int32{}}
	})
}

// A table dropped idle is built again without starting anything: a
// server left out of it (its start failed, so nothing of it is cached) is
// not started again by the rebuild, which would hold up the first request
// after every lull — a tools/call of a healthy server's tool included —
// for the left-out server's InitTimeout. Before idle tables were dropped,
// such a server was tried again only when the tables were invalidated,
// and it still is.
func TestAnIdleTableRebuildStartsNothingLeftOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		starts := &atomic.Int32{}
		g, _ := cachedWorld(t, `{"a":{"command":"fake-a"},"c":{"command":"fake-c","initTimeout":"20s"}}`, hangingFor("c", starts),
			map[string][]json.RawMessage{"a": {json.RawMessage(`{"name":"echo","inputSchema":{"type":"object"}}`)}}, io.Discard, nil)

		ep := g.Aggregate()
		s := ep.Open(newRecorder())
		defer ep.Close(s)
		list := func(id int) time.Duration {
			t.Helper()
			t0 := time.Now()
			listTools(t, ep, s, id)
			return time.Since(t0)
		}
		list(1) // c is left out, after its InitTimeout
		before := starts.Load()
		if before == 0 {
			t.Fatal("c was never started: the test does not test anything")
		}
		if d := list(2); d > time.Second {
			t.Fatalf("a list from the kept table took %v", d)
		}
		time.Sleep(TableIdle + time.Second)
		synctest.Wait()
		if keptTable(g) != nil {
			t.Fatal("the idle table is still kept")
		}
		d := list(3)
		if n := starts.Load() - before; n != 0 || d > time.Second {
			t.Fatalf("the rebuild after an idle drop started c %d times and took %v (the kept table answered at once)", n, d)
		}
		// An invalidation (a list_changed, a reload, a missing name)
		// tries it again, as it did a kept table.
		g.agg.invalidate()
		list(4)
		if starts.Load() == before {
			t.Fatal("c was not tried again after an invalidation")
		}
	})
}

// learnedConn is a live connection of a server that answers tools/list
// with one tool, "conly" (and anything else with an empty result).
type learnedConn struct {
	fleet.Conn // not called: the methods a list needs are below
	init       *fleet.InitResult
	done       chan struct{}
	once       sync.Once
}

func (c *learnedConn) Name() string            { return "c" }
func (c *learnedConn) Init() *fleet.InitResult { return c.init }
func (c *learnedConn) Call(_ context.Context, method string, _ json.RawMessage) (*rpc.Message, error) {
	if method == "tools/list" {
		return &rpc.Message{Result: json.RawMessage(`{"tools":[{"name":"conly","inputSchema":{"type":"object"}}]}`)}, nil
	}
	return &rpc.Message{Result: json.RawMessage(`{}`)}, nil
}
func (c *learnedConn) Notify(string, json.RawMessage) error { return nil }
func (c *learnedConn) Wait() error                          { <-c.done; return nil }
func (c *learnedConn) Close() error                         { c.once.Do(func() { close(c.done) }); return nil }
func (c *learnedConn) Alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}
func (c *learnedConn) Done() <-chan struct{} { return c.done }

// learningConnector refuses c's starts until up is set, then serves it
// with a learnedConn; the other servers are refused. starts counts c's.
type learningConnector struct {
	onConnect func(context.Context, fleet.Live)
	init      *fleet.InitResult
	up        *atomic.Bool
	starts    *atomic.Int32
}

func (c learningConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	c.starts.Add(1)
	if !c.up.Load() {
		return nil, lifecycle.ErrServerUnavailable
	}
	l := &learnedConn{init: c.init, done: make(chan struct{})}
	c.onConnect(ctx, l)
	return l, nil
}

func learningFor(name string, init *fleet.InitResult, up *atomic.Bool, starts *atomic.Int32) fleet.ConnectorFunc {
	return connectorFunc(func(s *config.Server, onConnect func(context.Context, fleet.Live)) lifecycle.Connector {
		if s.Name == name {
			return learningConnector{onConnect, init, up, starts}
		}
		return refusingConnector{&atomic.Int32{}}
	})
}

// A server the dropped table left out whose lists were learned since by a
// path that reports no change (its own endpoint's check of a tools/call's
// Mcp-Param headers learns its tools list, as a pinned server's first
// per-session process learns its baseline) has its lists to be had without
// starting it: the rebuild lists it, and tells the client it is back,
// rather than keep it out as if nothing could be had of it.
func TestAnIdleTableRebuildListsALeftOutServerLearnedSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		init, err := fleettest.ParseInit(json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"c","version":"1"}}`))
		if err != nil {
			t.Fatal(err)
		}
		up, starts := &atomic.Bool{}, &atomic.Int32{}
		g, f := cachedWorld(t, `{"a":{"command":"fake-a"},"c":{"command":"fake-c","idleTimeout":"1h"}}`, learningFor("c", init, up, starts),
			map[string][]json.RawMessage{"a": {json.RawMessage(`{"name":"echo","inputSchema":{"type":"object"}}`)}}, io.Discard, nil)

		ep := g.Aggregate()
		out := newRecorder()
		s := ep.Open(out)
		defer ep.Close(s)
		list := func(id int) string { return listTools(t, ep, s, id) }
		if got := list(1); strings.Contains(got, "conly") || starts.Load() != 1 {
			t.Fatalf("c refused its start (%d starts), yet is listed: %s", starts.Load(), got)
		}
		up.Store(true)
		if _, err := g.Single("c").(*single).toolSchema(t.Context(), "conly"); err != nil {
			t.Fatal(err)
		}
		if !f.Get("c").Catalog().Cached(kindTools) {
			t.Fatal("c's tools were not learned: the test does not test anything")
		}
		told := out.count("notifications/tools/list_changed")
		time.Sleep(TableIdle + time.Second)
		synctest.Wait()
		if keptTable(g) != nil {
			t.Fatal("the idle table is still kept")
		}
		before := starts.Load()
		if got := list(2); !strings.Contains(got, "conly") {
			t.Fatalf("the rebuild left out c, whose tools are known: %s", got)
		}
		if n := starts.Load() - before; n != 0 {
			t.Fatalf("the rebuild started c %d times", n)
		}
		if out.count("notifications/tools/list_changed") == told {
			t.Fatal("the client was not told c is back")
		}
	})
}
