package fleet

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
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

// listServer is the fake server behind every connection of a listFleet:
// it answers tools/list with tools, and counts what it is asked.
type listServer struct {
	init *InitResult

	mu    sync.Mutex
	tools []json.RawMessage
	calls []string // the calls made within a live context, in order
	// gate, when set, holds every tools/list until it is closed.
	gate chan struct{}
	// listing counts the tools/list calls in flight, maxListing the most
	// at once and lists all of them.
	listing, maxListing, lists int
}

func (s *listServer) setTools(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools = nil
	for _, n := range names {
		s.tools = append(s.tools, json.RawMessage(`{"name":"`+n+`"}`))
	}
}

func (s *listServer) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c == method {
			n++
		}
	}
	return n
}

// listConn is one live connection to a listServer.
type listConn struct {
	*fakeLive
	srv *listServer
}

func (c listConn) Name() string      { return "s" }
func (c listConn) Init() *InitResult { return c.srv.init }
func (c listConn) Start(ctx context.Context, method string, params json.RawMessage) (rpc.Waiter, error) {
	return callWaiter(func(ctx context.Context) (*rpc.Message, error) { return c.Call(ctx, method, params) }), nil
}

// callWaiter is a fake's pending request: Wait makes the call (it is
// never interrupted).
type callWaiter func(ctx context.Context) (*rpc.Message, error)

func (w callWaiter) Wait(ctx context.Context, _ <-chan struct{}) (*rpc.Message, bool, error) {
	m, err := w(ctx)
	return m, false, err
}

func (c listConn) Call(ctx context.Context, method string, _ json.RawMessage) (*rpc.Message, error) {
	s := c.srv
	s.mu.Lock()
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.calls = append(s.calls, method)
	if method != "tools/list" {
		s.mu.Unlock()
		return &rpc.Message{Result: json.RawMessage(`{}`)}, nil
	}
	s.lists++
	s.listing++
	s.maxListing = max(s.maxListing, s.listing)
	gate := s.gate
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.listing--
		s.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, lifecycle.ErrServerCrashed
		}
	}
	s.mu.Lock()
	body, _ := json.Marshal(map[string]any{"tools": s.tools})
	s.mu.Unlock()
	return &rpc.Message{Result: body}, nil
}
func (c listConn) Notify(string, json.RawMessage) error          { return nil }
func (c listConn) Reply(json.RawMessage, json.RawMessage) error  { return nil }
func (c listConn) ReplyError(json.RawMessage, int, string) error { return nil }

type listConnector struct {
	onConnect func(context.Context, Live)
	srv       *listServer
	connects  *int
	beforeEnd func(n int) // runs after onConnect of the nth connect
}

func (lc *listConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	lc.srv.mu.Lock()
	*lc.connects++
	n := *lc.connects
	lc.srv.mu.Unlock()
	l := listConn{&fakeLive{done: make(chan struct{})}, lc.srv}
	lc.onConnect(ctx, l)
	if lc.beforeEnd != nil {
		lc.beforeEnd(n)
	}
	return l, nil
}

// listFleet is a fleet of one server "s" served by a listServer with the
// tools, logging and resources capabilities; it records the lists the
// fleet reports changed.
type listFleet struct {
	f   *Fleet
	srv *listServer

	mu       sync.Mutex
	reported [][]catalog.ListKind
	connects int
}

func newListFleet(t *testing.T, settings string, beforeEnd func(n int)) *listFleet {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake"`+settings+`}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	init, err := backend.ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"logging":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	lf := &listFleet{srv: &listServer{init: init}}
	lf.f, err = New(cfg, Options{
		Logger:   discardLogger(),
		Interest: interest.New(discardLogger()),
		Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
			return &listConnector{onConnect: onConnect, srv: lf.srv, connects: &lf.connects, beforeEnd: beforeEnd}
		},
		OnListsChanged: func(_ *Server, kinds []catalog.ListKind) {
			lf.mu.Lock()
			lf.reported = append(lf.reported, kinds)
			lf.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return lf
}

func (lf *listFleet) close(t *testing.T) {
	if err := lf.f.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func toolNames(t *testing.T, items []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, it := range items {
		var tool struct{ Name string }
		if err := json.Unmarshal(it, &tool); err != nil {
			t.Fatal(err)
		}
		out = append(out, tool.Name)
	}
	return out
}

// An init and a request timeout of 0 mean no deadline: learning the lists,
// refreshing them after a wake and telling a new process a log level set
// during its start all work, none of them with an expired context.
func TestZeroTimeoutsMeanNoDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lf *listFleet
		lf = newListFleet(t, `,"idleTimeout":"0","initTimeout":"0","requestTimeout":"0"`, func(n int) {
			if n == 2 {
				// After the replay of the wake's process, before it serves:
				// the catch-up tells it.
				lf.f.Get("s").setLogLevel("A", "debug")
			}
		})
		defer lf.close(t)
		s := lf.f.Get("s")
		lf.srv.setTools("v1")

		lf.f.Learn(t.Context(), 1)
		synctest.Wait()
		items, ok := s.cat.CachedList(catalog.Tools)
		if !ok {
			t.Fatal("learning with no deadline cached no tools")
		}
		if got := toolNames(t, items); len(got) != 1 || got[0] != "v1" {
			t.Fatalf("learned tools %v, want [v1]", got)
		}
		if st := state(s); st != "dormant" {
			t.Fatalf("state %s after learning, want dormant", st)
		}

		lf.srv.setTools("v2")
		if _, err := use(s.Acquire(t.Context(), "A")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		items, _ = s.cat.CachedList(catalog.Tools)
		if got := toolNames(t, items); len(got) != 1 || got[0] != "v2" {
			t.Fatalf("tools after the wake's refresh %v, want [v2]", got)
		}
		if n := lf.srv.count("logging/setLevel"); n != 1 {
			t.Fatalf("the level set during the start was told %d times, want once", n)
		}
	})
}

// holdLists makes every tools/list wait until the returned release is
// called (release is safe to call more than once).
func (lf *listFleet) holdLists() (release func()) {
	gate := make(chan struct{})
	lf.srv.mu.Lock()
	lf.srv.gate = gate
	lf.srv.mu.Unlock()
	return sync.OnceFunc(func() { close(gate) })
}

func (lf *listFleet) listStats() (lists, maxListing int) {
	lf.srv.mu.Lock()
	defer lf.srv.mu.Unlock()
	return lf.srv.lists, lf.srv.maxListing
}

// refreshGoroutines counts the goroutines of the process that are in a
// refresh of a server's lists.
func refreshGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "fleet.(*Server).refresh") {
			count++
		}
	}
	return count
}

// A storm of list_changed notifications from a server coalesces: while a
// refresh runs, any number of notifications make exactly one more refresh
// after it (so the last change is not lost), never a goroutine or a fetch
// each; and once nothing is pending nothing of the refresh stays running.
func TestListChangedStormCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newListFleet(t, `,"idleTimeout":"0"`, nil)
		defer lf.close(t)
		s := lf.f.Get("s")
		lf.srv.setTools("v1")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		release := lf.holdLists()
		defer release()
		base := runtime.NumGoroutine()

		s.listChanged("notifications/tools/list_changed")
		synctest.Wait() // the refresh waits in tools/list
		if n, _ := lf.listStats(); n != 1 {
			t.Fatalf("%d tools/list calls after one notification, want 1", n)
		}
		const storm = 1000
		for range storm - 1 {
			s.listChanged("notifications/tools/list_changed")
		}
		lf.srv.setTools("v2")
		if n := refreshGoroutines(); n > 1 {
			t.Fatalf("%d goroutines refresh the lists during a storm of %d notifications, want one", n, storm)
		}
		if extra := runtime.NumGoroutine() - base; extra > storm/10 {
			t.Fatalf("%d more goroutines during a storm of %d notifications", extra, storm)
		}
		release()
		synctest.Wait()

		lists, most := lf.listStats()
		if lists != 2 || most != 1 {
			t.Fatalf("%d notifications: %d tools/list calls, at most %d at once; want 2 calls, one at a time", storm, lists, most)
		}
		items, ok := s.cat.CachedList(catalog.Tools)
		if got := toolNames(t, items); !ok || len(got) != 1 || got[0] != "v2" {
			t.Fatalf("cached tools %v, want the last change [v2]", got)
		}
		lf.mu.Lock()
		reported := len(lf.reported)
		lf.mu.Unlock()
		if reported != 1 {
			t.Fatalf("the change was reported %d times, want once", reported)
		}
		if n := refreshGoroutines(); n != 0 {
			t.Fatalf("%d goroutines refresh the lists once nothing is pending", n)
		}
	})
}

// Close ends a refresh in progress, and what was pending, before it
// returns: once it has returned nothing is fetched or reported any more,
// not even for a notification that comes after it.
func TestCloseEndsTheRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newListFleet(t, `,"idleTimeout":"0","initTimeout":"0","requestTimeout":"0"`, nil)
		s := lf.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		release := lf.holdLists()
		defer release()
		s.listChanged("notifications/tools/list_changed")
		synctest.Wait()
		if n, _ := lf.listStats(); n != 1 {
			t.Fatalf("%d tools/list calls, want 1", n)
		}
		s.listChanged("notifications/tools/list_changed") // pending
		lf.close(t)
		lf.mu.Lock()
		reported := len(lf.reported)
		lf.mu.Unlock()
		s.listChanged("notifications/tools/list_changed")
		release()
		synctest.Wait()
		if n, _ := lf.listStats(); n != 1 {
			t.Fatalf("%d tools/list calls: a refresh fetched after Close", n)
		}
		lf.mu.Lock()
		defer lf.mu.Unlock()
		if len(lf.reported) != reported {
			t.Fatalf("%d reports after Close returned (%d before)", len(lf.reported)-reported, reported)
		}
	})
}

// The refresh of the lists after a wake waits until the requests that
// waited for the wake have ended: the new process answers them first. It is
// asked for once the last of them ends — answered, or left because its
// context ended — and exactly once.
func TestTheWakesRefreshComesAfterTheWakingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		lf := newListFleet(t, `,"idleTimeout":"0"`, func(n int) {
			if n == 2 { // the wake's start: held until the requests wait
				<-started
			}
		})
		defer lf.close(t)
		s := lf.f.Get("s")
		lf.srv.setTools("v1")
		lf.f.Learn(t.Context(), 1)
		synctest.Wait()
		if st := state(s); st != "dormant" {
			t.Fatalf("state %s after learning, want dormant", st)
		}
		lists := func() int { n, _ := lf.listStats(); return n }
		learned := lists()

		// Three requests wake it: one is answered, one leaves while it
		// starts, one is still being answered.
		lf.srv.setTools("v2")
		leases := make(chan *Lease, 2)
		short, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for _, ctx := range []context.Context{t.Context(), t.Context()} {
			wg.Go(func() {
				l, err := s.Acquire(ctx, "")
				if err != nil {
					t.Error(err)
					return
				}
				leases <- l
			})
		}
		wg.Go(func() {
			if _, err := s.Acquire(short, ""); err == nil {
				t.Error("a request whose context ended got a lease")
			}
		})
		synctest.Wait() // all three wait for the start, which has begun
		cancel()
		synctest.Wait()
		close(started)
		wg.Wait()
		synctest.Wait()
		if n := lists(); n != learned {
			t.Fatalf("%d tools/list calls while the waking requests are answered, want none", n-learned)
		}
		(<-leases).Release()
		synctest.Wait()
		if n := lists(); n != learned {
			t.Fatalf("%d tools/list calls while a waking request is still answered, want none", n-learned)
		}
		(<-leases).Release()
		synctest.Wait()
		if n := lists(); n != learned+1 {
			t.Fatalf("%d tools/list calls once the waking requests ended, want 1", n-learned)
		}
		items, _ := s.cat.CachedList(catalog.Tools)
		if got := toolNames(t, items); len(got) != 1 || got[0] != "v2" {
			t.Fatalf("tools after the wake's refresh %v, want [v2]", got)
		}
		// Later requests owe nothing more.
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := lists(); n != learned+1 {
			t.Fatalf("%d tools/list calls after a later request, want still 1", n-learned)
		}
	})
}
