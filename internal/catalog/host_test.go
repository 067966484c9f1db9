package catalog

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// testHost is a server that never runs, as its catalog sees it: its
// configuration (swapped by the tests), no live connection, nothing to
// lease; what it reports of its lists is dropped.
type testHost struct {
	cfg atomic.Pointer[config.Server]
	env *Env
}

func (h *testHost) Config() *config.Server                 { return h.cfg.Load() }
func (h *testHost) Init() *backend.InitResult              { return nil }
func (h *testHost) Env() *Env                              { return h.env }
func (h *testHost) ListsChanged([]ListKind)                {}
func (h *testHost) Peek() (Lease, bool)                    { return nil, false }
func (h *testHost) Acquire(context.Context) (Lease, error) { return nil, context.Canceled }

// serverConfig is the configuration of server "s" with the given command.
func serverConfig(t *testing.T, command string) *config.Server {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"`+command+`","idleTimeout":"10m"}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Server("s")
}

// newTestCatalog is the catalog of server "s" (command "fake") on st
// (nil: none), and its host.
func newTestCatalog(t *testing.T, st *store.Store) (*Catalog, *testHost) {
	t.Helper()
	h := &testHost{env: &Env{
		Store: st,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Spawn: func(fn func(context.Context)) bool { go fn(context.Background()); return true },
	}}
	h.cfg.Store(serverConfig(t, "fake"))
	c := new(Catalog)
	c.Bind(h)
	return c, h
}

// openStore is a state file of the test's own.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
