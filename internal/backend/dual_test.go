package backend

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// samplingHooks answer every sampling request with a text naming the
// connection it came on, and record the notifications.
type samplingHooks struct {
	mu    sync.Mutex
	on    []*Conn // the connection of each sampling request
	notes []string
}

func (h *samplingHooks) Request(c *Conn, m *rpc.Message) {
	h.mu.Lock()
	h.on = append(h.on, c)
	h.mu.Unlock()
	go func() {
		_ = c.Reply(m.ID, json.RawMessage(`{"role":"assistant","model":"m","content":{"type":"text","text":"sampled by the legacy client"}}`))
	}()
}

func (h *samplingHooks) Notification(c *Conn, m *rpc.Message) {
	h.mu.Lock()
	h.notes = append(h.notes, m.Method)
	h.mu.Unlock()
}

// openRuntime opens a process runtime closed when the test ends.
func openRuntime(t *testing.T) *proc.Runtime {
	t.Helper()
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// dualConnector is an "auto" connector of the go-sdk conformance server
// (dual-era), with hooks.
func dualConnector(t *testing.T, hooks Hooks) (*StdioConnector, string) {
	t.Helper()
	rt := openRuntime(t)
	marker := testserver.NewMarker(t)
	return &StdioConnector{
		Name: "dual", Runtime: rt, Logger: quiet(), Hooks: hooks,
		Spec: proc.Spec{Command: everythingServer(t), Env: append(proc.Environ(), testserver.MarkerEnv+"="+marker)},
	}, marker
}

func connectWith(t *testing.T, sc *StdioConnector) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sc.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*Conn)
}

// serverProcesses counts the live processes of the conformance server
// with marker (not the pid-namespace shims that carry it too).
func serverProcesses(marker string) int {
	n := 0
	for _, pid := range testserver.LiveProcesses(marker) {
		if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); strings.HasPrefix(string(b), "everything") {
			n++
		}
	}
	return n
}

// modernParams are a modern client's tools/call params of tool.
func modernParams(tool string) json.RawMessage {
	return json.RawMessage(`{"name":"` + tool + `","arguments":{"prompt":"p"},"_meta":{"` + metaProtocolVersion + `":"` + ModernVersion + `","` + metaClientCaps + `":{"sampling":{}},"` + metaClientInfo + `":{"name":"c","version":"0"}}}`)
}

// A dual-era server serves each request in its client's era: the
// initialized process answers a legacy call with its own sampling
// request, and the process started for modern clients a modern call with
// an input_required result; the era learned is recorded, and told once.
func TestDualServerServesEachEra(t *testing.T) {
	hooks := &samplingHooks{}
	sc, marker := dualConnector(t, hooks)
	var told []Era
	sc.OnEra = func(c *Conn) { told = append(told, c.Init().Era()) }
	c := connectWith(t, sc)
	defer c.Close()
	if c.Modern() || c.Init().ProtocolVersion != ProtocolVersion || c.Init().Era() != EraUnknown {
		t.Fatalf("the primary: modern %v, init %s", c.Modern(), c.Init().Raw)
	}
	ctx := t.Context()
	resp, err := c.Call(ctx, "tools/call", json.RawMessage(`{"name":"test_sampling","arguments":{"prompt":"p"}}`))
	if err != nil || resp.Error != nil || !strings.Contains(string(resp.Result), "sampled by the legacy client") {
		t.Fatalf("legacy call: %v %s", err, resp.Encode())
	}

	// Eight modern clients at once: one process starts for them all.
	var wg sync.WaitGroup
	conns := make([]*Conn, 8)
	for i := range conns {
		wg.Go(func() {
			m, err := c.ModernConn(ctx)
			if err != nil {
				t.Error(err)
			}
			conns[i] = m
		})
	}
	wg.Wait()
	m := conns[0]
	if m == nil || m == c || !m.Modern() || slices.ContainsFunc(conns, func(x *Conn) bool { return x != m }) {
		t.Fatalf("modern connections %v (the primary %p)", conns, c)
	}
	if n := serverProcesses(marker); n != 2 && n != 0 { // 0: no /proc
		t.Errorf("%d server processes, want 2", n)
	}
	resp, err = m.Call(ctx, "tools/call", modernParams("test_input_required_result_sampling"))
	if err != nil || resp.Error != nil || !strings.Contains(string(resp.Result), `"resultType":"input_required"`) {
		t.Fatalf("modern call: %v %s", err, resp.Encode())
	}
	hooks.mu.Lock()
	on := slices.Clone(hooks.on)
	hooks.mu.Unlock()
	if len(on) != 1 || on[0] != c {
		t.Errorf("sampling requests came on %v, want one, on the primary %p", on, c)
	}
	if c.Init().Era() != EraDual || !slices.Contains(c.Init().SupportedVersions, ModernVersion) || c.Init().ProtocolVersion != ProtocolVersion {
		t.Errorf("the primary's result after the probe: %s", c.Init().Raw)
	}
	if !slices.Equal(told, []Era{EraDual}) {
		t.Errorf("OnEra told %v, want dual once", told)
	}
	if p := c.ModernProcess(); p == nil || p.Pid() != m.Process().Pid() {
		t.Errorf("ModernProcess %v, want pid %d", p, m.Process().Pid())
	}

	// The process for modern clients ends with the primary, and leaves
	// nothing.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	default:
		t.Error("the process for modern clients outlived the primary's Close")
	}
	testserver.WaitGone(t, marker, 2*time.Second)
}

// The process for modern clients that ended (here, killed) is started
// again by the next modern request; the primary serves on meanwhile. When
// the primary ends unasked, its twin ends with it.
func TestDualServerTwinStartsAgain(t *testing.T) {
	sc, marker := dualConnector(t, nil)
	c := connectWith(t, sc)
	defer c.Close()
	ctx := t.Context()
	m, err := c.ModernConn(ctx)
	if err != nil || m == nil {
		t.Fatal(m, err)
	}
	pid := m.Process().Pid()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-m.Done()
	if _, err := c.Call(ctx, "tools/list", nil); err != nil {
		t.Fatalf("the primary after its twin died: %v", err)
	}
	m2, err := c.ModernConn(ctx)
	if err != nil || m2 == nil || m2.Process().Pid() == pid {
		t.Fatalf("after the kill: %v %v", m2, err)
	}
	if resp, err := m2.Call(ctx, "tools/list", nil); err != nil || resp.Error != nil {
		t.Fatalf("the new twin: %v %v", err, resp)
	}
	// The primary crashes: its twin is stopped before the connection
	// counts as ended, and nothing is left.
	_ = syscall.Kill(c.Process().Pid(), syscall.SIGKILL)
	<-c.Done()
	select {
	case <-m2.Done():
	default:
		t.Error("the twin outlived the primary's end")
	}
	testserver.WaitGone(t, marker, 2*time.Second)
}

// A twin that cannot start fails the modern requests that wait for it;
// the first failure is tried again at once, the second makes a crash loop
// that answers at once, without another spawn, until the restart
// policy's next attempt is due; a request's own context bounds its wait.
func TestDualServerTwinStartFailure(t *testing.T) {
	sc, _ := dualConnector(t, nil)
	sc.RetryDelay = func(n int) time.Duration { return time.Duration(n-1) * time.Hour } // 0, then an hour
	c := connectWith(t, sc)
	defer c.Close()
	c.tw.spec.Command = filepath.Join(t.TempDir(), "gone") // the next spawn fails
	ctx := t.Context()
	for i := range 2 {
		_, err := c.ModernConn(ctx)
		if err == nil || errors.Is(err, lifecycle.ErrCrashLoop) || !strings.Contains(err.Error(), "process for MCP "+ModernVersion+" clients did not start") {
			t.Fatalf("start %d: %v", i+1, err)
		}
	}
	start := time.Now()
	_, err := c.ModernConn(ctx)
	var cl *lifecycle.CrashLoopError
	if !errors.As(err, &cl) || cl.Failures != 2 || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("in the crash loop: %v after %v", err, time.Since(start))
	}
	if c.Init().Era() != EraUnknown {
		t.Errorf("a failed start recorded %v", c.Init().Era())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	c.tw.streak.Reset() // the next attempt is due
	c.tw.mu.Lock()
	c.tw.spec.Command = testserver.Build(t)
	c.tw.spec.Env = append(proc.Environ(), "FIXTURE_NEVER_ANSWER=1") // never answers the probe
	c.tw.mu.Unlock()
	if _, err := c.ModernConn(cctx); err == nil {
		t.Fatal("a cancelled request waited for the twin")
	}
}

// A twin that ends before it answered a client is a failure too: two in
// a row make a crash loop; one that answered a client ends none.
func TestDualServerTwinThatDiesUnanswered(t *testing.T) {
	sc, _ := dualConnector(t, nil)
	sc.RetryDelay = func(n int) time.Duration { return time.Duration(n-1) * time.Hour }
	c := connectWith(t, sc)
	defer c.Close()
	ctx := t.Context()
	kill := func() {
		t.Helper()
		m, err := c.ModernConn(ctx)
		if err != nil || m == nil {
			t.Fatalf("modern connection: %v %v", m, err)
		}
		_ = syscall.Kill(m.Process().Pid(), syscall.SIGKILL)
		<-m.Done()
	}
	kill()
	m, err := c.ModernConn(ctx) // one failure: started again at once
	if err != nil || m == nil {
		t.Fatalf("after one: %v %v", m, err)
	}
	m.MarkAnswered() // it answers a client, then dies: no failure
	_ = syscall.Kill(m.Process().Pid(), syscall.SIGKILL)
	<-m.Done()
	kill() // failures: 0, then 1 for this one
	kill() // 2: a crash loop
	if _, err := c.ModernConn(ctx); !errors.Is(err, lifecycle.ErrCrashLoop) {
		t.Fatalf("after two unanswered deaths in a row: %v", err)
	}
}

// A server that refuses initialize and answers server/discover is served
// as modern-only by "auto": no second process, its connection is the
// modern one, and its next start probes first, without initialize.
func TestModernOnlyServer(t *testing.T) {
	rt := openRuntime(t)
	log := filepath.Join(t.TempDir(), "methods")
	var last json.RawMessage
	sc := &StdioConnector{
		Name: "m", Runtime: rt, Logger: quiet(), LastInit: func() json.RawMessage { return last },
		Spec: proc.Spec{Command: testserver.Build(t), Env: append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t),
			"FIXTURE_MODERN_ONLY=1", "FIXTURE_STRICT_INIT_LOG="+log)},
	}
	c := connectWith(t, sc)
	if !c.Modern() || c.Init().Era() != EraModern {
		t.Fatalf("modern %v, init %s", c.Modern(), c.Init().Raw)
	}
	if m, err := c.ModernConn(t.Context()); m != c || err != nil {
		t.Fatalf("modern connection %v %v, want the connection itself", m, err)
	}
	last = c.Init().Raw
	_ = c.Close()
	// A new connector (the next run) told what the last one recorded.
	sc = &StdioConnector{Name: "m", Runtime: rt, Logger: quiet(), LastInit: sc.LastInit, Spec: sc.Spec}
	c = connectWith(t, sc)
	_ = c.Close()
	if b, _ := os.ReadFile(log); string(b) != "initialize\nserver/discover\nserver/discover\n" {
		t.Fatalf("methods %q: the second start initialized", b)
	}
}

// The era of a result as recorded.
func TestInitEra(t *testing.T) {
	for raw, want := range map[string]Era{
		`{"protocolVersion":"2025-11-25"}`:                                                 EraUnknown,
		`{"protocolVersion":"2026-07-28"}`:                                                 EraUnknown,
		`{"protocolVersion":"2025-11-25","supportedVersions":["2025-11-25"]}`:              EraLegacy,
		`{"protocolVersion":"2025-06-18","supportedVersions":["2026-07-28","2025-06-18"]}`: EraDual,
		`{"protocolVersion":"2026-07-28","supportedVersions":["2026-07-28","2025-11-25"]}`: EraModern,
		`not json`: EraUnknown,
	} {
		if got := EraOf(json.RawMessage(raw)); got != want {
			t.Errorf("EraOf(%s) = %v, want %v", raw, got, want)
		}
	}
	in, _ := ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}`))
	out := in.withVersions([]string{"2026-07-28", "2025-11-25"})
	if out.Era() != EraDual || !out.Has("tools") || in.SupportedVersions != nil || !strings.Contains(string(out.Raw), `"supportedVersions":["2026-07-28","2025-11-25"]`) {
		t.Errorf("withVersions: %s (from %s)", out.Raw, in.Raw)
	}
}

// The process for modern clients passes on what belongs to its requests
// (log lines, progress, requests) and drops list changes and resource
// updates, which come from the primary.
func TestTwinHooksDropWhatAListenCarries(t *testing.T) {
	rec := &samplingHooks{}
	h := twinHooks{rec}
	for _, m := range []string{"notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed",
		"notifications/resources/updated", "notifications/message", "notifications/progress", "notifications/cancelled"} {
		h.Notification(nil, &rpc.Message{Method: m})
	}
	if want := []string{"notifications/message", "notifications/progress", "notifications/cancelled"}; !slices.Equal(rec.notes, want) {
		t.Fatalf("passed %v, want %v", rec.notes, want)
	}
}

// The go-sdk's server (the reference, v1.8) binds the era to its stdio
// connection: once initialized, it answers a request that carries modern
// _meta with a sampling request of its own, not an input_required result.
// This is why a dual-era server's modern clients get a process of their
// own; should a later SDK serve each request in its era, this fails.
func TestReferenceServerBindsTheEraToTheConnection(t *testing.T) {
	hooks := &samplingHooks{}
	sc, _ := dualConnector(t, hooks)
	sc.Protocol = ProtocolLegacy
	c := connectWith(t, sc)
	defer c.Close()
	resp, err := c.Call(t.Context(), "tools/call", modernParams("test_input_required_result_sampling"))
	if err != nil {
		t.Fatal(err)
	}
	hooks.mu.Lock()
	n := len(hooks.on)
	hooks.mu.Unlock()
	if n != 1 || strings.Contains(string(resp.Result), "input_required") {
		t.Fatalf("%d sampling requests, result %s", n, resp.Encode())
	}
}
