package fleet

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// A run — the supervisor and the connector it drives — is made by the
// start that begins it and dropped when the instance goes dormant: a
// server never started and a dormant one keep neither. A restart within
// the run keeps its connector; the restarts of the run a dormancy ended
// are still reported while dormant; the wake makes a new run.
func TestADormantInstanceKeepsNoRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parseDoc(t, `{"mcpServers":{"s":{"command":"fake","idleTimeout":"0"}}}`)
		var built, connects atomic.Int32
		var fail atomic.Bool
		var lives []*fakeLive
		f, err := New(cfg, Options{Logger: discardLogger(),
			Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
				built.Add(1)
				return &fakeConnector{connects: &connects, fail: &fail, onConnect: func(ctx context.Context, l Live) {
					lives = append(lives, l.(*fakeLive))
					onConnect(ctx, l)
				}}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		s := f.Get("s")
		in := s.sharedIn()
		if in.supervisor() != nil || built.Load() != 0 {
			t.Fatalf("never started: supervisor %v, %d connectors built", in.supervisor(), built.Load())
		}

		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		first := in.supervisor()
		if first == nil || built.Load() != 1 {
			t.Fatalf("started: supervisor %v, %d connectors built", first, built.Load())
		}
		lives[0].crash() // the supervisor restarts it, with the run's connector
		synctest.Wait()
		time.Sleep(time.Minute) // past the backoff
		synctest.Wait()
		if st := s.Status(); st.State != "running" || st.Restarts != 1 || connects.Load() != 2 || built.Load() != 1 {
			t.Fatalf("after a crash: %+v, %d connects, %d connectors built", st, connects.Load(), built.Load())
		}

		if err := s.Sleep(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := s.Status(); st.State != "dormant" || st.Restarts != 1 {
			t.Fatalf("dormant: %+v, want its run's restart still reported", st)
		}
		if in.supervisor() != nil {
			t.Fatal("a dormant instance kept its supervisor")
		}

		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		if sup := in.supervisor(); sup == nil || sup == first || built.Load() != 2 {
			t.Fatalf("woken: supervisor %p (first %p), %d connectors built", sup, first, built.Load())
		}
		if st := s.Status(); st.State != "running" || st.Restarts != 0 {
			t.Fatalf("woken: %+v", st)
		}
	})
}

// A connector made for a later run is told what the runs before learned
// of the server's era: a connection that answered as a legacy server makes
// the era hint legacy even when no list (nor initialize result) of the
// server is cached, as one connector remembered it across its connects.
func TestTheEraHintOutlivesTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newListFleet(t, `,"idleTimeout":"0"`, nil)
		defer lf.close(t)
		in := lf.f.Get("s").sharedIn()
		if v := in.eraHint(); v != "" {
			t.Fatalf("before any run: hint %q", v)
		}
		modern, err := backend.ParseInit(json.RawMessage(`{"protocolVersion":"` + backend.ModernVersion + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		in.connected(t.Context(), listConn{&fakeLive{done: make(chan struct{})}, &listServer{init: modern}})
		if v := in.eraHint(); v != "" {
			t.Fatalf("after a modern connection: hint %q", v)
		}
		in.connected(t.Context(), listConn{&fakeLive{done: make(chan struct{})}, lf.srv}) // 2025-11-25
		if v := in.eraHint(); v != backend.ProtocolVersion {
			t.Fatalf("after a legacy connection: hint %q, want %q", v, backend.ProtocolVersion)
		}
	})
}

// gatedConnector connects as fakeConnector does, but its connects after
// the first wait at gate once the connection is made (onConnect called),
// before Connect returns: a start caught between the two.
type gatedConnector struct {
	onConnect func(context.Context, Live)
	connects  atomic.Int32
	gate      chan struct{}
	lives     chan *fakeLive
}

func (c *gatedConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	n := c.connects.Add(1)
	l := &fakeLive{done: make(chan struct{})}
	c.onConnect(ctx, l)
	c.lives <- l
	if n > 1 {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l, nil
}

// A start under way is not put to sleep by Rest, even when the request
// that began it left: the connection it made is there before the start
// ends, but the run is the start's — a sleep then would stop it under the
// start and drop the supervisor the start still uses. Once the start
// ends, the server runs on its run, and Rest may put it to sleep.
func TestRestLeavesAStartUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parseDoc(t, `{"mcpServers":{"s":{"command":"fake","idleTimeout":"0","restart":{"policy":"never"}}}}`)
		gc := &gatedConnector{gate: make(chan struct{}), lives: make(chan *fakeLive, 4)}
		f, err := New(cfg, Options{Logger: discardLogger(),
			Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
				gc.onConnect = onConnect
				return gc
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		s := f.Get("s")
		in := s.sharedIn()
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		(<-gc.lives).crash() // not restarted: the next request starts it again, on the same run
		synctest.Wait()
		sup := in.supervisor()

		// A caller whose context ends leaves the start it began, which
		// goes on with no request in flight.
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { _, err := use(s.Acquire(ctx, "")); done <- err }()
		<-gc.lives // connected; the start waits at the gate
		synctest.Wait()
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the caller that left got a lease")
		}
		if s.rest(t.Context(), s.requests()) {
			t.Fatal("Rest put a server to sleep while it started")
		}
		close(gc.gate)
		synctest.Wait()
		if st := s.Status(); st.State != "running" || in.supervisor() != sup || sup == nil {
			t.Fatalf("after the start: %+v, supervisor %p (was %p)", st, in.supervisor(), sup)
		}
		if !s.rest(t.Context(), s.requests()) {
			t.Fatal("Rest did not put the started server to sleep")
		}
		synctest.Wait()
		if st := s.Status(); st.State != "dormant" || in.supervisor() != nil {
			t.Fatalf("after Rest: %+v, supervisor %p", st, in.supervisor())
		}
	})
}
