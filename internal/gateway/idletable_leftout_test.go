package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/store"
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
	ft := reflect.TypeOf(fleet.ConnectorFunc(nil))
	return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		c := reflect.New(ft.Out(0)).Elem()
		if args[0].Interface().(*config.Server).Name == name {
			c.Set(reflect.ValueOf(hangingConnector{starts}))
		} else {
			c.Set(reflect.ValueOf(refusingConnector{&atomic.Int32{}}))
		}
		return []reflect.Value{c}
	}).Interface().(fleet.ConnectorFunc)
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
		cfg, err := config.Parse([]byte(`{"defaults":{"prefix":""},"mcpServers":{"a":{"command":"fake-a"},"c":{"command":"fake-c","initTimeout":"20s"}}}`), "test.json", config.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		starts := &atomic.Int32{}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		g := New(log)
		f, err := fleet.New(cfg, fleet.Options{Hooks: g, Logger: log, OnListsChanged: g.ListsChanged, Connector: hangingFor("c", starts)})
		if err != nil {
			t.Fatal(err)
		}
		g.SetFleet(f)
		defer f.Close(context.Background())
		st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		items := []json.RawMessage{json.RawMessage(`{"name":"echo","inputSchema":{"type":"object"}}`)}
		if err := st.PutLists("a", f.Get("a").Config().LaunchHash(), store.Lists{Items: map[store.Kind][]json.RawMessage{store.Tools: items}}); err != nil {
			t.Fatal(err)
		}
		f.SetStore(st)

		ep := g.Aggregate()
		s := ep.Open(newRecorder())
		defer ep.Close(s)
		list := func(id int) time.Duration {
			t.Helper()
			t0 := time.Now()
			resp := ep.Handle(t.Context(), s, request(id, "tools/list", nil), newRecorder())
			if resp.Error != nil {
				t.Fatalf("tools/list: %v", resp.Error)
			}
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
		time.Sleep(tableIdle + time.Second)
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
