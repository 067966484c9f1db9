package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// refusingConnector fails every start, counting them: the servers of
// these tests are served from the lists cached on disk, never started.
type refusingConnector struct{ starts *atomic.Int32 }

func (c refusingConnector) Connect(context.Context) (lifecycle.Session, error) {
	c.starts.Add(1)
	return nil, lifecycle.ErrServerUnavailable
}

// connectorFunc is a fleet connector that asks pick for each instance's
// connector. (Made with reflect: its signature names backend's hooks, a
// package the gateway's files, tests included, do not import.)
func connectorFunc(pick func(s *config.Server, onConnect func(context.Context, fleet.Live)) lifecycle.Connector) fleet.ConnectorFunc {
	ft := reflect.TypeOf(fleet.ConnectorFunc(nil))
	return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		c := reflect.New(ft.Out(0)).Elem() // a lifecycle.Connector
		c.Set(reflect.ValueOf(pick(args[0].Interface().(*config.Server), args[2].Interface().(func(context.Context, fleet.Live)))))
		return []reflect.Value{c}
	}).Interface().(fleet.ConnectorFunc)
}

// refusing is a fleet connector of refusingConnectors.
func refusing(starts *atomic.Int32) fleet.ConnectorFunc {
	return connectorFunc(func(*config.Server, func(context.Context, fleet.Live)) lifecycle.Connector {
		return refusingConnector{starts}
	})
}

// cachedWorld is a gateway over a fleet of the servers of the mcpServers
// object servers (with no prefix by default), started by connector, whose
// tools lists are the ones tools gives, cached in a store; the log goes to
// logs, the fleet's Options.Trim calls to trim (if set). The fleet closes
// before its store, when the test ends.
func cachedWorld(t testing.TB, servers string, connector fleet.ConnectorFunc, tools map[string][]json.RawMessage, logs io.Writer, trim func(bool)) (*Gateway, *fleet.Fleet) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"defaults":{"prefix":""},"mcpServers":`+servers+`}`), "test.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logs, nil))
	g := New(log)
	f, err := fleet.New(cfg, fleet.Options{Hooks: g, Logger: log, OnListsChanged: g.ListsChanged, Interest: g.Interest(), Connector: connector, Trim: trim})
	if err != nil {
		t.Fatal(err)
	}
	g.SetFleet(f)
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t.Cleanup(func() { _ = f.Close(context.Background()) }) // first: the fleet before its store
	for name, items := range tools {
		if err := st.PutLists(name, f.Get(name).Config().LaunchHash(), store.Lists{Items: map[store.Kind][]json.RawMessage{store.Tools: items}}); err != nil {
			t.Fatal(err)
		}
	}
	f.SetStore(st)
	return g, f
}

// cachedFleet is a gateway over a fleet of two dormant servers, a and b,
// whose tools lists are cached in a store, and which cannot start; both
// export "echo", unprefixed (a collision: a's is served). trims counts the
// fleet's calls of Options.Trim; the log goes to logs.
func cachedFleet(t *testing.T, logs io.Writer) (g *Gateway, f *fleet.Fleet, starts, trims *atomic.Int32) {
	t.Helper()
	starts, trims = &atomic.Int32{}, &atomic.Int32{}
	tools := map[string][]json.RawMessage{}
	for _, name := range []string{"a", "b"} {
		tools[name] = []json.RawMessage{json.RawMessage(`{"name":"echo","inputSchema":{"type":"object"}}`), json.RawMessage(`{"name":"` + name + `only","inputSchema":{"type":"object"}}`)}
	}
	g, f = cachedWorld(t, `{"a":{"command":"fake-a"},"b":{"command":"fake-b"}}`, refusing(starts), tools, logs, func(bool) { trims.Add(1) })
	return g, f, starts, trims
}

// listTools lists ep's tools in session s (request id id), failing t on
// an error, and returns the result.
func listTools(t testing.TB, ep Endpoint, s *Session, id int) string {
	t.Helper()
	resp := ep.Handle(t.Context(), s, request(id, "tools/list", nil), newRecorder())
	if resp.Error != nil {
		t.Fatalf("tools/list: %v", resp.Error)
	}
	return string(resp.Result)
}

// keptTable is the aggregate's kept tools table, if any.
func keptTable(g *Gateway) *routeTable {
	g.agg.mu.Lock()
	defer g.agg.mu.Unlock()
	return g.agg.routes[kindTools.Member]
}

// A kept table goes once it has gone unused for TableIdle — a use within
// it keeps it that much longer —, the fleet is asked for a trim after it
// went, and the next list builds it again, the same, from the lists on
// disk, logging its collision no second time; the sweeper starts again
// with the new table, and ends with the fleet.
func TestAnIdleTableIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testserver.Buffer
		g, f, starts, trims := cachedFleet(t, &logs)
		collisions := func() int { return strings.Count(logs.String(), "name collision") }
		ep := g.Aggregate()
		s := ep.Open(newRecorder())
		defer ep.Close(s)
		list := func(id int) string { return listTools(t, ep, s, id) }
		builds := func() int64 { return g.agg.builds.Load() }

		first := list(1)
		if builds() != 1 || keptTable(g) == nil || collisions() != 1 {
			t.Fatalf("after the first list: %d builds, table kept: %v, %d collisions logged", builds(), keptTable(g) != nil, collisions())
		}
		used := keptTable(g).used.Load()
		time.Sleep(500 * time.Millisecond)
		list(2)
		if keptTable(g).used.Load() != used {
			t.Fatal("a use within a second of the last one wrote the table's last use again")
		}
		time.Sleep(TableIdle - time.Second - 500*time.Millisecond)
		if list(2) != first || builds() != 1 {
			t.Fatalf("a list within TableIdle built the table again (%d builds)", builds())
		}
		time.Sleep(TableIdle - time.Second) // TableIdle after the first list, not after the second
		synctest.Wait()
		if keptTable(g) == nil {
			t.Fatal("a table used within TableIdle was dropped")
		}
		trimsBefore := trims.Load()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if keptTable(g) != nil {
			t.Fatal("a table unused for TableIdle is still kept")
		}
		time.Sleep(5 * time.Second) // the fleet's trim, once quiet
		synctest.Wait()
		if trims.Load() == trimsBefore {
			t.Fatal("no trim after a table was dropped")
		}
		if got := list(3); got != first || builds() != 2 {
			t.Fatalf("the list after the drop (%d builds): %s, want %s", builds(), got, first)
		}
		if n := collisions(); n != 1 {
			t.Fatalf("the collision was logged %d times, want once: %s", n, logs.String())
		}
		time.Sleep(TableIdle + time.Second)
		synctest.Wait()
		if keptTable(g) != nil {
			t.Fatal("the table built again was never dropped: no sweeper after the first one ended")
		}
		if n := starts.Load(); n != 0 {
			t.Fatalf("%d servers started: a table is built from the lists on disk", n)
		}

		list(4) // a table kept, its sweeper waiting
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.Close(ctx); err != nil {
			t.Fatalf("the fleet's Close did not end the sweeper: %v", err)
		}
	})
}

// The refusing connector refuses: a start fails, counted (what makes
// TestAnIdleTableIsDropped's count of starts mean something).
func TestRefusingConnectorRefuses(t *testing.T) {
	_, _, starts, _ := cachedFleet(t, io.Discard)
	var conn fleet.ConnectorFunc = refusing(starts)
	if _, err := conn(nil, nil, nil).Connect(t.Context()); !errors.Is(err, lifecycle.ErrServerUnavailable) || starts.Load() != 1 {
		t.Fatalf("Connect: %v, %d starts", err, starts.Load())
	}
}
