package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// world is a gateway over real fixture servers, as serve builds it.
type world struct {
	t      testing.TB
	marker string
	rt     *proc.Runtime
	fleet  *fleet.Fleet
	gw     *Gateway

	evMu   sync.Mutex
	events []fleet.Event

	store     *store.Store
	closeOnce sync.Once
}

// count is how many events of type typ server had.
func (w *world) count(server, typ string) int {
	w.evMu.Lock()
	defer w.evMu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.Server == server && string(e.Type) == typ {
			n++
		}
	}
	return n
}

// waitEvent waits until server has had n events of type typ.
func (w *world) waitEvent(server, typ string, n int, timeout time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for w.count(server, typ) < n {
		if time.Now().After(deadline) {
			w.t.Fatalf("server %s: %d %q events after %v, want %d", server, w.count(server, typ), typ, timeout, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newWorld builds a gateway from a config whose mcpServers are given as
// JSON; "$FIXTURE" in it is replaced by the fixture binary, "$CONFORMANCE"
// by the go-sdk conformance everything-server.
func newWorld(t testing.TB, servers string) *world {
	t.Helper()
	return newWorldStore(t, servers, "", "")
}

// newWorldStore is newWorld with the persisted cache at statePath ("" for
// none) and the given fixture marker ("" for a new one; the marker is part
// of the servers' environment, so of their launch hash). The store closes
// with the world.
func newWorldStore(t testing.TB, servers, statePath, marker string) *world {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return newWorldLog(t, servers, statePath, marker, log)
}

// newWorldLog is newWorldStore logging to log.
func newWorldLog(t testing.TB, servers, statePath, marker string, log *slog.Logger) *world {
	t.Helper()
	if marker == "" {
		marker = testserver.NewMarker(t)
	}
	w := &world{t: t, marker: marker}
	servers = strings.ReplaceAll(servers, "$FIXTURE", testserver.Build(t))
	if strings.Contains(servers, "$CONFORMANCE") {
		servers = strings.ReplaceAll(servers, "$CONFORMANCE", conformanceServer(t))
	}
	doc := fmt.Sprintf(`{"defaults":{"stop":{"stdinWait":"300ms","termWait":"300ms"}},"mcpServers":%s}`, servers)
	cfg, err := config.Parse([]byte(doc), "test.json", config.LoadOptions{})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	for _, s := range cfg.Servers {
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[testserver.MarkerEnv] = w.marker
	}
	opts := worldRuntime
	opts.Logger = log
	w.rt, err = proc.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	w.gw = New(log)
	w.fleet, err = fleet.New(cfg, fleet.Options{Runtime: w.rt, Hooks: w.gw, Logger: log, OnListsChanged: w.gw.ListsChanged, Interest: w.gw.Interest(),
		OnEvent: func(e fleet.Event) {
			w.evMu.Lock()
			w.events = append(w.events, e)
			w.evMu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	w.gw.SetFleet(w.fleet)
	var st *store.Store
	if statePath != "" {
		st, err = store.Open(statePath, store.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		w.fleet.SetStore(st)
	}
	w.store = st
	t.Cleanup(w.close)
	return w
}

// close stops the world: every server, the runtime, the store. Idempotent.
func (w *world) close() {
	w.closeOnce.Do(func() {
		t := w.t
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.fleet.Close(ctx)
		_ = w.rt.Close(ctx)
		_ = w.store.Close()
		testserver.WaitGone(t, w.marker, 2*time.Second)
	})
}

// conformanceServer builds the go-sdk conformance everything-server (a
// tool dependency in go.mod) once per test process.
func conformanceServer(t testing.TB) string {
	return testserver.BuildPackage(t, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server", "everything-server")
}

// stdioClient connects the official go-sdk client to ep through
// mcpvisor's stdio front.
func (w *world) stdioClient(ep Endpoint, opts *mcp.ClientOptions) *mcp.ClientSession {
	t := w.t
	t.Helper()
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = StdioOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.Serve(context.Background(), ep, c2sR, s2cW)
		s2cW.Close()
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "0"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.IOTransport{Reader: s2cR, Writer: c2sW}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		c2sW.Close()
		<-done
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		sess.Close()
		c2sW.Close()
		<-done
	})
	return sess
}

func textOf(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func toolNames(res *mcp.ListToolsResult) []string {
	var out []string
	for _, tool := range res.Tools {
		out = append(out, tool.Name)
	}
	return out
}

func mustJSONString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// stdioClientErr connects to ep and returns the connect error (nil if it
// connected, in which case the session is closed at once).
func (w *world) stdioClientErr(ep Endpoint) error {
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = StdioOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.Serve(context.Background(), ep, c2sR, s2cW)
		s2cW.Close()
	}()
	defer func() { c2sW.Close(); <-done }()
	client := mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.IOTransport{Reader: s2cR, Writer: c2sW}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err == nil {
		sess.Close()
	}
	return err
}

// pid is the host pid of the named server's running process (the shim's
// under a pid namespace), or 0.
func (w *world) pid(name string) int {
	return w.fleet.Get(name).Status().PID
}

func writeFile(path string) error  { return os.WriteFile(path, nil, 0o600) }
func removeFile(path string) error { return os.Remove(path) }

// worldRuntime is the Runtime configuration newWorld uses: everything the
// machine allows, unless a benchmark says otherwise.
var worldRuntime proc.Options

// last is the newest event of type typ of server (zero if none).
func (w *world) last(server, typ string) fleet.Event {
	w.evMu.Lock()
	defer w.evMu.Unlock()
	for i := len(w.events) - 1; i >= 0; i-- {
		if e := w.events[i]; e.Server == server && string(e.Type) == typ {
			return e
		}
	}
	return fleet.Event{}
}

// killPID SIGKILLs a process this test started.
func killPID(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("no process to kill (pid %d)", pid)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// openDeclaring opens a session on ep, as ep.Open(out) does, and
// initializes it declaring caps (a JSON object): a server's sampling,
// elicitation and roots requests reach only a client that declared them.
func openDeclaring(t testing.TB, ep Endpoint, out Sink, caps string) *Session {
	t.Helper()
	s := ep.Open(out)
	init := &rpc.Message{ID: json.RawMessage(`"init"`), Method: "initialize",
		Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":` + caps + `,"clientInfo":{"name":"test","version":"1"}}`)}
	if resp := ep.Handle(context.Background(), s, init, newRecorder()); resp == nil || resp.Error != nil {
		t.Fatalf("initialize: %v", resp)
	}
	return s
}
