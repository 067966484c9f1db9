package fleet

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// replayConn is a Conn that records the requests it is sent; during its
// first call it runs during (a session changing what it asked meanwhile).
type replayConn struct {
	init   *InitResult
	mu     sync.Mutex
	calls  []string
	during func()
	ctxs   []context.Context
}

func (c *replayConn) Name() string      { return "s" }
func (c *replayConn) Init() *InitResult { return c.init }
func (c *replayConn) Start(ctx context.Context, method string, params json.RawMessage) (rpc.Waiter, error) {
	return callWaiter(func(ctx context.Context) (*rpc.Message, error) { return c.Call(ctx, method, params) }), nil
}

func (c *replayConn) Call(ctx context.Context, method string, params json.RawMessage) (*rpc.Message, error) {
	c.mu.Lock()
	c.calls = append(c.calls, method+" "+string(params))
	c.ctxs = append(c.ctxs, ctx)
	during := c.during
	c.during = nil
	c.mu.Unlock()
	if during != nil {
		during()
	}
	return &rpc.Message{Result: json.RawMessage(`{}`)}, ctx.Err()
}
func (c *replayConn) Notify(string, json.RawMessage) error          { return nil }
func (c *replayConn) Reply(json.RawMessage, json.RawMessage) error  { return nil }
func (c *replayConn) ReplyError(json.RawMessage, int, string) error { return nil }

// What sessions asked of a server is told to its new process within the
// connect's context, and what they ask while that replay runs is told too.
func TestReplayIncludesWhatChangedMeanwhile(t *testing.T) {
	ff := newFakeFleet(t, `,"idleTimeout":"0"`)
	defer ff.close(t)
	s := ff.f.Get("s")
	s.setLogLevel("A", "error")
	s.subscribe("A", "file:///x")
	init, err := backend.ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"logging":{},"resources":{"subscribe":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := &replayConn{init: init, during: func() { s.setLogLevel("B", "debug") }}
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "connect")
	s.sharedIn().replayTo(ctx, c)
	c.mu.Lock()
	defer c.mu.Unlock()
	want := []string{
		`logging/setLevel {"level":"error"}`,
		`resources/subscribe {"uri":"file:///x"}`,
		`logging/setLevel {"level":"debug"}`,
		`resources/subscribe {"uri":"file:///x"}`,
	}
	if len(c.calls) != len(want) {
		t.Fatalf("replayed %q, want %q", c.calls, want)
	}
	for i := range want {
		if c.calls[i] != want[i] {
			t.Fatalf("replayed %q, want %q", c.calls, want)
		}
		if v, _ := c.ctxs[i].Value(key{}).(string); v != "connect" {
			t.Fatalf("call %d did not run within the connect's context", i)
		}
	}
}

// A replay stops when the connect's context ends (a Stop during the start).
func TestReplayStopsWithTheConnect(t *testing.T) {
	ff := newFakeFleet(t, `,"idleTimeout":"0"`)
	defer ff.close(t)
	s := ff.f.Get("s")
	s.subscribe("A", "file:///x")
	s.subscribe("A", "file:///y")
	init, _ := backend.ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"resources":{"subscribe":true}}}`))
	ctx, cancel := context.WithCancel(context.Background())
	c := &replayConn{init: init, during: cancel}
	s.sharedIn().replayTo(ctx, c)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) != 1 {
		t.Fatalf("replay went on after its context ended: %q", c.calls)
	}
}

// connLive is a fake live session that is also a Conn.
type connLive struct {
	*fakeLive
	*replayConn
}

// connConnector connects connLives whose Conn is c, after onConnect.
type connConnector struct {
	onConnect func(context.Context, Live)
	c         *replayConn
	beforeEnd func() // runs after onConnect, before Connect returns
}

func (cc *connConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	l := connLive{&fakeLive{done: make(chan struct{})}, cc.c}
	cc.onConnect(ctx, l)
	if cc.beforeEnd != nil {
		cc.beforeEnd()
	}
	return l, nil
}

// A log level a session sets after the replay but before the instance
// serves (no request can reach the server then) is told to it as soon as
// it serves.
func TestLevelSetDuringTheStartIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake","idleTimeout":"0"}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
		init, _ := backend.ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"logging":{}}}`))
		rc := &replayConn{init: init}
		var f *Fleet
		f, err = New(cfg, Options{Logger: discardLogger(), Interest: interest.New(discardLogger()), Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
			return &connConnector{onConnect: onConnect, c: rc, beforeEnd: func() { f.Get("s").setLogLevel("A", "debug") }}
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		if _, err := use(f.Get("s").Acquire(t.Context(), "A")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if len(rc.calls) != 1 || rc.calls[0] != `logging/setLevel {"level":"debug"}` {
			t.Fatalf("the server was told %q, want the level set during its start", rc.calls)
		}
	})
}

// A list_changed of a server that is not running drops the list it names
// and reports it changed (Options.OnListsChanged). (The catalog's
// TestListFetchedBeforeAChangeIsNotStored also sees that a list fetched
// before it is not stored.)
func TestAListChangedWhileNotRunningIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var reported [][]catalog.ListKind
		ff := newFakeFleet(t, `,"idleTimeout":"0"`)
		ff.f.opts.OnListsChanged = func(_ *Server, kinds []catalog.ListKind) {
			mu.Lock()
			reported = append(reported, kinds)
			mu.Unlock()
		}
		defer ff.close(t)
		s := ff.f.Get("s")
		s.listChanged("notifications/tools/list_changed")
		synctest.Wait()
		if s.Catalog().Cached(catalog.Tools) {
			t.Fatal("the list is cached")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reported) != 1 || len(reported[0]) != 1 || reported[0][0] != catalog.Tools {
			t.Fatalf("reported %v, want one report of tools (the server is not running: its list is dropped)", reported)
		}
	})
}
