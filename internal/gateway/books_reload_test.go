package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/fleet/fleettest"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// keptConn is a running connection of a fake server that keeps the
// requests it gets ("method params") and answers each with an empty
// result; a resources/read waits for hold to be closed first.
type keptConn struct {
	fleet.Conn // not called: the methods the tests need are below
	name       string
	init       *fleet.InitResult
	hold       chan struct{}
	done       chan struct{}
	once       sync.Once

	mu  sync.Mutex
	got []string
}

func (c *keptConn) Name() string            { return c.name }
func (c *keptConn) Init() *fleet.InitResult { return c.init }
func (c *keptConn) Call(ctx context.Context, method string, params json.RawMessage) (*rpc.Message, error) {
	c.mu.Lock()
	c.got = append(c.got, method+" "+string(params))
	c.mu.Unlock()
	if method == "resources/read" {
		select {
		case <-c.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &rpc.Message{Result: json.RawMessage(`{}`)}, nil
}
func (c *keptConn) Notify(string, json.RawMessage) error { return nil }
func (c *keptConn) Wait() error                          { <-c.done; return nil }
func (c *keptConn) Close() error                         { c.once.Do(func() { close(c.done) }); return nil }
func (c *keptConn) Alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}
func (c *keptConn) Done() <-chan struct{} { return c.done }

// requests are the requests c got.
func (c *keptConn) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// keptServers starts every server as a keptConn (their resources/read
// held until hold is closed) and keeps each server's connections, in the
// order they were made.
type keptServers struct {
	init *fleet.InitResult
	hold chan struct{}

	mu    sync.Mutex
	conns map[string][]*keptConn
}

func newKeptServers(t *testing.T) *keptServers {
	t.Helper()
	init, err := fleettest.ParseInit(json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"resources":{"subscribe":true},"logging":{}},"serverInfo":{"name":"kept","version":"1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return &keptServers{init: init, hold: make(chan struct{}), conns: map[string][]*keptConn{}}
}

func (k *keptServers) connector() fleet.ConnectorFunc {
	return connectorFunc(func(s *config.Server, onConnect func(context.Context, fleet.Live)) lifecycle.Connector {
		return connectFunc(func(ctx context.Context) (lifecycle.Session, error) {
			c := &keptConn{name: s.Name, init: k.init, hold: k.hold, done: make(chan struct{})}
			k.mu.Lock()
			k.conns[s.Name] = append(k.conns[s.Name], c)
			k.mu.Unlock()
			onConnect(ctx, c)
			return c, nil
		})
	})
}

// of is the server's connections so far.
func (k *keptServers) of(name string) []*keptConn {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.conns[name])
}

const (
	keptA = `"a":{"command":"fake-a","idleTimeout":"1h"}`
	keptC = `"c":{"command":"fake-c","idleTimeout":"1h"}`
)

// handle sends ep the request of session s, failing t on an error.
func handle(t *testing.T, ep Endpoint, s *Session, id int, method string, params any) {
	t.Helper()
	if resp := ep.Handle(t.Context(), s, request(id, method, params), newRecorder()); resp.Error != nil {
		t.Fatalf("%s: %v", method, resp.Error)
	}
}

// A config reload that removes a server drops it from the gateway's
// books — the clients that used it and what its sessions asked of it —
// as the reload is applied (serve's applied hook calls Reloaded), though
// its sessions live on; a kept server's entries stay. A request of the
// removed server still in flight at the reload, which ends after, counts
// nowhere: the removed server's client table is not made again, so the
// book does not hold the server for good; nor is a subscription its
// endpoint gets after the reload kept.
func TestReloadSweepsTheBooksOfARemovedServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeptServers(t)
		g, f := cachedWorld(t, `{`+keptA+`,`+keptC+`}`, k.connector(), nil, io.Discard, nil)
		const uri = "test://x"
		a, c := f.Get("a"), f.Get("c")
		epA, epC := g.Single("a"), g.Single("c")
		sA, sC := epA.Open(newRecorder()), epC.Open(newRecorder())
		defer epA.Close(sA)
		defer epC.Close(sC)
		handle(t, epA, sA, 1, "resources/subscribe", map[string]any{"uri": uri})
		handle(t, epC, sC, 1, "resources/subscribe", map[string]any{"uri": uri})
		if g.Clients(a) == nil || g.Clients(c) == nil || len(g.Interest().Subscribers(c, uri)) != 1 {
			t.Fatalf("before the reload: clients of a %v, of c %v; subscribers of c %v", g.Clients(a), g.Clients(c), g.Interest().Subscribers(c, uri))
		}
		inFlight := make(chan *rpc.Message, 1)
		go func() {
			inFlight <- epC.Handle(context.Background(), sC, request(2, "resources/read", map[string]any{"uri": uri}), newRecorder())
		}()
		synctest.Wait() // the read waits in c

		cfg, err := config.Parse([]byte(`{"defaults":{"prefix":""},"mcpServers":{`+keptA+`}}`), "test.json", config.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		applied := make(chan struct{})
		reloaded := make(chan error, 1)
		go func() {
			_, err := f.Reload(context.Background(), cfg, false, func(fleet.Applied) {
				g.Reloaded() // as serve's reloader does
				close(applied)
			})
			reloaded <- err
		}()
		<-applied
		if !c.Removed() || f.Get("c") != nil {
			t.Fatal("the reload did not remove c")
		}
		if cs := g.Clients(c); cs != nil {
			t.Errorf("the removed server's clients are kept: %+v", cs)
		}
		if subs := g.Interest().Subscribers(c, uri); len(subs) != 0 {
			t.Errorf("the removed server's subscribers are kept: %v", subs)
		}
		if g.Clients(a) == nil || !slices.Equal(g.Interest().Subscribers(a, uri), []string{sA.Key()}) {
			t.Errorf("the kept server lost its entries: clients %+v, subscribers %v", g.Clients(a), g.Interest().Subscribers(a, uri))
		}

		close(k.hold) // the read in flight ends, after the sweep
		if resp := <-inFlight; resp.Error != nil {
			t.Fatalf("the read in flight at the reload: %v", resp.Error)
		}
		if err := <-reloaded; err != nil {
			t.Fatalf("reload: %v", err)
		}
		synctest.Wait()
		if cs := g.Clients(c); cs != nil {
			t.Errorf("the read in flight at the reload, ended after the sweep, made the removed server's client table again: %+v", cs)
		}
		resp := epC.Handle(t.Context(), sC, request(3, "resources/subscribe", map[string]any{"uri": uri}), newRecorder())
		if resp.Error == nil {
			t.Fatal("the removed server's endpoint took a subscription")
		}
		synctest.Wait()
		if cs := g.Clients(c); cs != nil {
			t.Errorf("a request refused after the removal made the removed server's client table again: %+v", cs)
		}
		if subs := g.Interest().Subscribers(c, uri); len(subs) != 0 {
			t.Errorf("a subscription after the removal is kept: %v", subs)
		}
	})
}

// The gateway's interest book (Interest) is the one the fleet replays
// (fleet.Options.Interest): a subscription and a log level a client sets
// through the gateway are recorded there, and the fleet tells them to
// the server's next process, which no client asked anything.
func TestTheGatewaysInterestIsReplayedByTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeptServers(t)
		close(k.hold)
		g, f := cachedWorld(t, `{`+keptC+`}`, k.connector(), nil, io.Discard, nil)
		const uri = "test://x"
		c := f.Get("c")
		ep := g.Single("c")
		s := ep.Open(newRecorder())
		defer ep.Close(s)
		handle(t, ep, s, 1, "resources/subscribe", map[string]any{"uri": uri})
		handle(t, ep, s, 2, "logging/setLevel", map[string]any{"level": "debug"})
		if subs, levels := g.Interest().Subscribers(c, uri), g.Interest().LogLevels(c); !slices.Equal(subs, []string{s.Key()}) || levels[s.Key()] != "debug" {
			t.Errorf("the gateway's Interest holds subscribers %v, levels %v", subs, levels)
		}
		if _, err := c.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		conns := k.of("c")
		if len(conns) != 2 {
			t.Fatalf("%d connections of c after its restart, want 2", len(conns))
		}
		got := conns[1].requests()
		for _, want := range []string{`resources/subscribe {"uri":"` + uri + `"}`, `logging/setLevel {"level":"debug"}`} {
			if !slices.Contains(got, want) {
				t.Errorf("the restarted process was not told %s: it got %q", want, got)
			}
		}
	})
}

// A fleet that reads sessions' interest from another book than the
// gateway's (or from none) is refused when attached: the gateway leaves
// the forgetting of an ended session's interest to the fleet, so with
// another book it would be kept and replayed for ever.
func TestSetFleetRefusesAnotherInterestBook(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake"}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := New(log)
	for _, tc := range []struct {
		name string
		it   fleet.Interest
	}{
		{"none", nil},
		{"another book", interest.New(log)},
	} {
		f, err := fleet.New(cfg, fleet.Options{Interest: tc.it})
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: SetFleet took a fleet whose interest is not the gateway's book", tc.name)
				}
			}()
			g.SetFleet(f)
		}()
		f.Close(context.Background())
	}
	f, err := fleet.New(cfg, fleet.Options{Interest: g.Interest()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	g.SetFleet(f) // the gateway's own book: taken
}
