package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/drift"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// The tests' tools in three versions (v2 changes echo's description and
// the type of its text, v3 its description again), and two more.
var (
	echoV1  = `{"name":"echo","description":"Returns text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`
	echoV2  = `{"name":"echo","description":"Returns text, loudly.","inputSchema":{"type":"object","properties":{"text":{"type":"integer"}}}}`
	echoV3  = `{"name":"echo","description":"Returns text, quietly.","inputSchema":{"type":"object","properties":{"text":{"type":"integer"}}}}`
	pidTool = `{"name":"pid","inputSchema":{"type":"object"}}`
)

// defaultInit is what a testServer answers to initialize unless told
// otherwise.
const defaultInit = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}}}`

// testHost is one server as its catalog sees it, run the way the fleet
// runs it (internal/fleet's serverHost, and what the fleet calls on the
// catalog at each turn of the server's life): its configuration (a
// reload swaps it), its shared instance — processes of srv, started by
// Acquire, put to sleep by sleep —, the lists it reported changed, the
// events it reported, and the fleet's background work (Env.Spawn), ended
// with the test.
type testHost struct {
	cfg atomic.Pointer[config.Server]
	env *Env
	c   *Catalog
	srv *testServer

	mu       sync.Mutex
	in       *testInstance
	starts   int
	reported [][]ListKind
	events   []Event

	// The fleet's lifetime, for Env.Spawn: ended (and waited for) when
	// the test ends.
	ctx     context.Context
	stop    context.CancelFunc
	spawnMu sync.Mutex
	closed  bool
	work    sync.WaitGroup
}

// testInstance is the server's shared instance: the launch it was made
// under (a relaunch makes a fresh one), its running process's connection
// (nil: not running), whether it went dormant, and what CheckTool learned
// of its process.
type testInstance struct {
	launched *config.Server
	conn     *testConn
	dormant  bool
	tools    LiveTools
}

func (h *testHost) Config() *config.Server { return h.cfg.Load() }
func (h *testHost) Env() *Env              { return h.env }

func (h *testHost) Init() *backend.InitResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.in.conn == nil {
		return nil
	}
	return h.in.conn.Init()
}

func (h *testHost) ListsChanged(kinds []ListKind) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reported = append(h.reported, kinds)
}

// Acquire leases the shared instance's process, starting it if it does
// not run. As the fleet's start does, a shared instance that woke, or
// started with lists cached, has them looked at again (Refresh) — unless
// a relaunch's relearn will.
func (h *testHost) Acquire(ctx context.Context) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	in := h.in
	started := in.conn == nil
	woke := started && in.dormant
	if started {
		in.conn = h.srv.connect()
		in.dormant = false
		h.starts++
	}
	l := &testLease{p: processOf(in)}
	h.mu.Unlock()
	if started && (woke || h.c.Cached(Tools)) && !h.c.RelaunchPending() {
		h.c.Refresh(allKinds...)
	}
	return l, nil
}

// Peek leases the shared instance's process if it runs.
func (h *testHost) Peek() (Lease, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.in.conn == nil {
		return nil, false
	}
	return &testLease{p: processOf(h.in)}, true
}

// processOf is the process of in as a lease shows it (in.conn is set).
func processOf(in *testInstance) Process {
	return Process{Conn: in.conn, Launched: in.launched, Tools: &in.tools}
}

// testLease is a lease on a process: releasing it does nothing (the
// host puts nothing to sleep on its own).
type testLease struct{ p Process }

func (l *testLease) Process() Process { return l.p }
func (l *testLease) Release()         {}

// instance is the shared instance.
func (h *testHost) instance() *testInstance {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.in
}

// state reports whether the shared instance runs a process, and whether
// it is dormant.
func (h *testHost) state() (running, dormant bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.in.conn != nil, h.in.dormant
}

// startCount counts the processes started.
func (h *testHost) startCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts
}

// sleep puts the running shared instance to sleep, as the fleet's idle
// timer or Sleep does: its process ends, and the server gone dormant,
// its catalog spills.
func (h *testHost) sleep() {
	h.mu.Lock()
	conn := h.in.conn
	if conn == nil {
		h.mu.Unlock()
		return
	}
	h.in.conn, h.in.dormant = nil, true
	h.mu.Unlock()
	conn.close()
	h.c.Spill()
}

// relaunch is a reload without learning that gives the server the launch
// cfg, as the fleet's does: the new launch in force and everything held
// marked as of the earlier one, in one step (Catalog.Relaunch); a fresh
// instance of the new launch, the old one's process ended; the store's
// entries of other launches pruned; then, the old process drained, the
// lists still of the earlier launch dropped, and reported.
func (h *testHost) relaunch(cfg *config.Server) {
	h.c.Relaunch(func() { h.cfg.Store(cfg) })
	h.mu.Lock()
	old := h.in
	h.in = &testInstance{launched: cfg}
	h.mu.Unlock()
	if old.conn != nil {
		old.conn.close()
	}
	h.prune()
	if k := h.c.DropRelaunched(); len(k) > 0 {
		h.ListsChanged(k)
	}
}

// remove is a reload that removes the server, as the fleet's does: its
// catalog retired, its process ended, the store's entry of its lists
// pruned (its definitions record is kept for definitionsGrace).
func (h *testHost) remove() {
	h.c.Retire()
	h.mu.Lock()
	conn := h.in.conn
	h.in.conn = nil
	h.mu.Unlock()
	if conn != nil {
		conn.close()
	}
	if _, err := h.env.Store.Prune(map[string]string{}); err != nil {
		h.env.Log.Warn("could not prune", "err", err)
	}
	h.env.PruneDefinitions(map[string]bool{})
}

// prune drops what the store keeps of the server under another launch
// than its current one, as the fleet's reload does once it applied.
func (h *testHost) prune() {
	if _, err := h.env.Store.Prune(map[string]string{h.Config().Name: h.Config().LaunchHash()}); err != nil {
		h.env.Log.Warn("could not prune", "err", err)
	}
}

// eventsOf returns the events of type typ reported so far.
func (h *testHost) eventsOf(typ string) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if string(e.Type) == typ {
			out = append(out, e)
		}
	}
	return out
}

// spawn is Env.Spawn: fn runs on a goroutine of its own with the host's
// lifetime, unless that ended.
func (h *testHost) spawn(fn func(context.Context)) bool {
	h.spawnMu.Lock()
	defer h.spawnMu.Unlock()
	if h.closed {
		return false
	}
	h.work.Go(func() { fn(h.ctx) })
	return true
}

// close ends the host's lifetime, as the fleet's Close does, and waits
// for its background work.
func (h *testHost) close() {
	h.spawnMu.Lock()
	h.closed = true
	h.spawnMu.Unlock()
	h.stop()
	h.work.Wait()
}

// restart is mcpvisor started again on the same store: a new catalog of
// the same server, with its configuration and server, loaded as the
// fleet's SetStore loads it.
func (h *testHost) restart(t *testing.T) (*Catalog, *testHost) {
	t.Helper()
	return newTestCatalogOf(t, h.env.Store, h.Config(), h.srv)
}

// testServer is the server behind a testHost's processes: it answers
// initialize with init and tools/list with tools (any other request with
// an empty result), and counts what it is asked.
type testServer struct {
	mu    sync.Mutex
	init  *backend.InitResult
	tools []json.RawMessage
	// gate, when set, holds every tools/list until it is closed.
	gate chan struct{}
	// listing counts the tools/list calls in flight, lists all of them.
	listing, lists int
}

// newTestServer is a server whose initialize result is init ("":
// defaultInit).
func newTestServer(t *testing.T, init string) *testServer {
	t.Helper()
	s := &testServer{}
	if init == "" {
		init = defaultInit
	}
	s.setInit(t, init)
	return s
}

// setInit makes raw what the server's next processes answer to
// initialize.
func (s *testServer) setInit(t *testing.T, raw string) {
	t.Helper()
	in, err := backend.ParseInit(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.init = in
	s.mu.Unlock()
}

func (s *testServer) setItems(items ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools = nil
	for _, it := range items {
		s.tools = append(s.tools, json.RawMessage(it))
	}
}

// holdLists holds every tools/list from now until release is called
// (safe to call more than once).
func (s *testServer) holdLists() (release func()) {
	gate := make(chan struct{})
	s.mu.Lock()
	s.gate = gate
	s.mu.Unlock()
	return sync.OnceFunc(func() { close(gate) })
}

// listStats counts the tools/list calls, and those in flight.
func (s *testServer) listStats() (lists, listing int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists, s.listing
}

// connect is a new process of the server: its live connection, whose
// initialize result is the server's now.
func (s *testServer) connect() *testConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &testConn{srv: s, init: s.init, done: make(chan struct{})}
}

// errEnded is the error of a request to a process that ended.
var errEnded = errors.New("the server's process ended")

// testConn is one live connection to a testServer.
type testConn struct {
	srv  *testServer
	init *backend.InitResult
	done chan struct{}
	once sync.Once
}

func (c *testConn) Init() *backend.InitResult { return c.init }

// close ends the connection's process: a request it holds fails.
func (c *testConn) close() { c.once.Do(func() { close(c.done) }) }

func (c *testConn) Call(ctx context.Context, method string, _ json.RawMessage) (*rpc.Message, error) {
	s := c.srv
	s.mu.Lock()
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if method != "tools/list" {
		s.mu.Unlock()
		return &rpc.Message{Result: json.RawMessage(`{}`)}, nil
	}
	s.lists++
	s.listing++
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
			return nil, errEnded
		}
	}
	s.mu.Lock()
	body, _ := json.Marshal(map[string]any{"tools": s.tools})
	s.mu.Unlock()
	return &rpc.Message{Result: body}, nil
}

// serverConfig is the configuration of server "s" with the given command
// (idle timeout 10m).
func serverConfig(t *testing.T, command string) *config.Server {
	t.Helper()
	return serverConfigWith(t, command, `,"idleTimeout":"10m"`)
}

// serverConfigWith is the configuration of server "s" with the given
// command and settings (JSON members, each after a comma).
func serverConfigWith(t *testing.T, command, settings string) *config.Server {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"`+command+`"`+settings+`}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Server("s")
}

// newTestCatalog is the catalog of server "s" (command "fake", idle
// timeout 10m, a server answering defaultInit, not running) on st (nil:
// none), and its host.
func newTestCatalog(t *testing.T, st *store.Store) (*Catalog, *testHost) {
	t.Helper()
	return newTestCatalogOf(t, st, serverConfig(t, "fake"), newTestServer(t, ""))
}

// newTestCatalogOf is the catalog of the server configured as cfg, whose
// processes srv serves (none running), on st (nil: none), and its host;
// with a store, loaded as the fleet's SetStore loads it. Its background
// work ends with the test.
func newTestCatalogOf(t *testing.T, st *store.Store, cfg *config.Server, srv *testServer) (*Catalog, *testHost) {
	t.Helper()
	h := &testHost{srv: srv, in: &testInstance{launched: cfg}, c: new(Catalog)}
	h.ctx, h.stop = context.WithCancel(context.Background())
	h.env = &Env{
		Store:  st,
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Spawn:  h.spawn,
		Closed: errors.New("the fleet is closing"),
		Emit: func(e Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		},
	}
	h.cfg.Store(cfg)
	h.c.Bind(h)
	if st != nil {
		if sum, ok := st.Index(map[string]string{cfg.Name: cfg.LaunchHash()})[cfg.Name]; ok {
			h.c.Load(&sum)
		} else {
			h.c.Load(nil)
		}
	}
	t.Cleanup(h.close)
	return h.c, h
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

// learnTools learns the server's tools (starting it: it then stays
// running), and waits for what follows (in a synctest bubble).
func learnTools(t *testing.T, c *Catalog) {
	t.Helper()
	if _, err := c.List(t.Context(), Tools); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
}

// sleepNow puts the server to sleep (host.sleep), and waits.
func sleepNow(h *testHost) {
	h.sleep()
	synctest.Wait()
}

// wake starts the dormant server under a lease, released at once, and
// waits for the relearn its start makes.
func wake(t *testing.T, h *testHost) {
	t.Helper()
	l, err := h.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	synctest.Wait()
}

// relearn has the running server's tools learned again, as its
// list_changed does, and waits for it.
func relearn(c *Catalog) {
	c.ListChanged("notifications/tools/list_changed")
	synctest.Wait()
}

// initState is what the lists hold of the initialize result: the bytes
// in memory, whether it is cold, and whether it is known to be on disk
// under the server's current launch hash.
func initState(c *Catalog) (raw string, cold, saved bool) {
	cur, _ := c.launchKey()
	l := &c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.init, l.initCold, sameLaunch(l.initHash, cur)
}

// inMemory reports whether the server holds its tools list and its
// definitions in memory.
func inMemory(c *Catalog) (list, defs bool) {
	l := &c.lists
	l.mu.Lock()
	_, list = l.items[Tools.Member]
	l.mu.Unlock()
	cold, known := defsState(c)
	return list, !cold || known // cold keeps none of them
}

// defsState reports whether the definitions are cold, and whether they
// are in memory.
func defsState(c *Catalog) (cold, inMemory bool) {
	d := c.defs()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cold, d.defsMem != nil
}

// knownTool is the fingerprint of the known definition of tool name.
func knownTool(c *Catalog, name string) string {
	d := c.lockDefs()
	defer d.mu.Unlock()
	return d.known[drift.Tool][name].Fingerprint
}

// liveConn is the connection whose list t holds (nil: none).
func liveConn(t *LiveTools) Conn {
	b := t.p.Load()
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.v == nil {
		return nil
	}
	return b.v.conn
}

// wantInitKnown fails the test unless the server's initialize result
// (defaultInit) is known: readable, with its version and the changes it
// announces.
func wantInitKnown(t *testing.T, c *Catalog, what string) {
	t.Helper()
	if c.CachedInit() == nil || c.Era() != "2025-11-25" || !c.AnnouncesChanges("tools") {
		t.Fatalf("%s: the initialize result is lost: %s, era %q, announces tools %v", what, c.CachedInit(), c.Era(), c.AnnouncesChanges("tools"))
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
