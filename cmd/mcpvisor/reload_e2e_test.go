package main

//lint:file-ignore SA1019 sampling and logging are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 client's sampling, elicitation and logging through mcpvisor.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// fleetConfig is a config of n fixture servers s00…s(n-1), each eager and
// never put to sleep (so each has a pid to compare), with extra settings
// per server.
func fleetConfig(fixture string, n int, extra map[string]string) string {
	var b strings.Builder
	b.WriteString(`{"mcpServers":{`)
	for i := range n {
		name := fmt.Sprintf("s%02d", i)
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `%q:{"command":%q,"eager":true,"idleTimeout":"0","env":{"WHO":%q}%s}`, name, fixture, name, extra[name])
	}
	b.WriteString(`}}`)
	return b.String()
}

// servers is GET /api/servers, by name.
func servers(t *testing.T, base string) map[string]fleet.Status {
	t.Helper()
	resp, err := http.Get(base + "/api/servers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body admin.Servers
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	out := map[string]fleet.Status{}
	for _, s := range body.Servers {
		out[s.Name] = s
	}
	return out
}

// waitRunning waits until every named server runs with its tools known
// (an eager server's are learned from its start), and returns the pids.
func waitRunning(t *testing.T, base string, names ...string) map[string]int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := servers(t, base)
		pids := map[string]int{}
		for _, n := range names {
			if s := all[n]; s.State == "running" && s.PID != 0 && s.Learned {
				pids[n] = s.PID
			}
		}
		if len(pids) == len(names) {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all running: %v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listCounter is a session that counts the tools/list_changed
// notifications it gets.
type listCounter struct {
	n    atomic.Int32
	sess *mcp.ClientSession
}

func countingSession(t *testing.T, url string) *listCounter {
	lc := &listCounter{}
	lc.sess = connectHTTP(t, url, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { lc.n.Add(1) }})
	if _, err := lc.sess.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return lc
}

// waitCounts waits until each counter has reached its count.
func waitCounts(t *testing.T, want map[*listCounter]int32, names map[*listCounter]string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for lc, n := range want {
			if lc.n.Load() < n {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for lc, n := range want {
				t.Errorf("%s: %d tools/list_changed, want %d", names[lc], lc.n.Load(), n)
			}
			t.FailNow()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func reloadJSON(t *testing.T, addr string) (int, admin.ReloadReport) {
	t.Helper()
	code, out, stderr := runBin(t, "reload", "--addr", addr, "--json")
	var rep admin.ReloadReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("reload --json: exit %d, %q %s: %v", code, out, stderr, err)
	}
	return code, rep
}

func actionsOf(rep admin.ReloadReport) map[string]string {
	m := map[string]string{}
	if rep.Result != nil {
		for _, s := range rep.Result.Servers {
			if s.Action != "unchanged" {
				m[s.Name] = s.Action + ":" + strings.Join(s.Fields, ",")
			}
		}
	}
	return m
}

// Live reload on the real binary, 20 servers running: a launch change
// restarts exactly that server (the 19 others keep their pids) while the
// calls in flight on it and on another complete; sessions are told
// tools/list_changed exactly when the tools they see changed; SIGHUP and
// POST /api/reload take the same path; an invalid edit changes nothing
// and is reported with its JSON paths, by both.
func TestReloadTwentyServers(t *testing.T) {
	fixture := testserver.Build(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	write := func(extra map[string]string) {
		if err := os.WriteFile(cfg, []byte(fleetConfig(fixture, 20, extra)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(nil)
	s := startServeFile(t, cfg, "", "--no-watch")
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("s%02d", i))
	}
	before := waitRunning(t, base, names...)

	A := countingSession(t, base+"/mcp")
	B := countingSession(t, base+"/servers/s01/mcp")
	C := countingSession(t, base+"/servers/s07/mcp")
	D := countingSession(t, base+"/servers/s12/mcp")
	label := map[*listCounter]string{A: "/mcp", B: "s01", C: "s07", D: "s12"}
	// The eager starts' learning tells sessions open then that the lists
	// changed (they became known): counted from here on only.
	time.Sleep(300 * time.Millisecond)
	for lc := range label {
		lc.n.Store(0)
	}

	// Calls in flight on the server about to change and on another.
	var wg sync.WaitGroup
	for _, lc := range []*listCounter{B, C} {
		wg.Go(func() {
			res, err := lc.sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 1500}})
			if err != nil || res.IsError {
				t.Errorf("%s: a call in flight across the reload failed: %v %v", label[lc], err, res)
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // the calls are under way (they take 1.5 s)

	// 1. The API: a launch change of s07 (its working directory).
	write(map[string]string{"s07": `,"cwd":"/"`})
	t0 := time.Now()
	code, rep := reloadJSON(t, addr)
	if code != 0 || !rep.Applied || rep.Trigger != "api" {
		t.Fatalf("reload: exit %d, %+v", code, rep)
	}
	if got := actionsOf(rep); len(got) != 1 || got["s07"] != "restarted:cwd" {
		t.Fatalf("reload did %v, want s07 restarted for cwd alone", got)
	}
	if took := time.Since(t0); took < time.Second {
		t.Fatalf("the reload returned after %v, before the call in flight on s07 finished (drain)", took)
	}
	wg.Wait()
	after := waitRunning(t, base, names...)
	for _, n := range names {
		if n == "s07" {
			if after[n] == before[n] {
				t.Fatalf("s07 kept pid %d across a launch change", before[n])
			}
			continue
		}
		if after[n] != before[n] {
			t.Fatalf("%s: pid %d → %d, but it did not change", n, before[n], after[n])
		}
	}
	if st := servers(t, base)["s07"]; st.Spawns != 2 {
		t.Fatalf("s07 spawned %d times, want 2 (the start and the relaunch)", st.Spawns)
	}

	// 2. SIGHUP: a settings-only change of s12 (its tool filter).
	write(map[string]string{"s07": `,"cwd":"/"`, "s12": `,"tools":{"deny":["crash"]}`})
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, map[*listCounter]int32{A: 1, D: 1}, label)
	if pid := waitRunning(t, base, "s12")["s12"]; pid != before["s12"] {
		t.Fatalf("a settings-only change restarted s12 (pid %d → %d)", before["s12"], pid)
	}
	if res, _ := D.sess.ListTools(t.Context(), nil); res == nil || strings.Contains(fmt.Sprint(toolNamesOf(res)), "crash") {
		t.Fatalf("s12 still lists crash after the reload: %v", toolNamesOf(res))
	}

	// 3. An invalid edit, by the API and by SIGHUP: nothing changes, and
	// both report every problem with its JSON path.
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"s00":{"command":""},"s01":{"comand":"x"},"s02":{"command":"x","idleTimeout":"soon"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, rep = reloadJSON(t, addr)
	if code != 1 || rep.Applied || len(rep.Problems) < 3 {
		t.Fatalf("invalid edit: exit %d, %+v", code, rep)
	}
	var paths []string
	for _, p := range rep.Problems {
		paths = append(paths, p.Path)
	}
	for _, want := range []string{"mcpServers.s00.command", "mcpServers.s01", "mcpServers.s02.idleTimeout"} {
		if !strings.Contains(strings.Join(paths, " "), want) {
			t.Errorf("the rejection names %v, not %s", paths, want)
		}
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	rejected := waitEvent(t, base, "reload-rejected", 2)
	if tr := rejected.Details["trigger"]; tr != "signal" || !strings.Contains(fmt.Sprint(rejected.Details["problems"]), "mcpServers.s02.idleTimeout") {
		t.Fatalf("SIGHUP's rejection: %v", rejected.Details)
	}
	if got := waitRunning(t, base, names...); len(got) != 20 || got["s00"] != before["s00"] {
		t.Fatalf("an invalid edit changed the servers: %v", got)
	}
	_, _, _ = runBin(t, "ps", "--addr", addr) // still answers

	// 4. The sentinel: a change every session sees. Each count is now
	// exact — a notification sent earlier by mistake would have arrived
	// before these.
	write(map[string]string{"s07": `,"cwd":"/","tools":{"deny":["crash"]}`, "s12": `,"tools":{"deny":["crash"]}`, "s01": `,"tools":{"deny":["crash"]}`})
	if code, rep = reloadJSON(t, addr); code != 0 || len(actionsOf(rep)) != 2 {
		t.Fatalf("reload: exit %d, %v", code, actionsOf(rep))
	}
	want := map[*listCounter]int32{A: 3, B: 1, C: 1, D: 1}
	waitCounts(t, want, label)
	for lc, n := range want {
		if got := lc.n.Load(); got != n {
			t.Errorf("%s got %d tools/list_changed, want exactly %d", label[lc], got, n)
		}
	}
	final := waitRunning(t, base, names...)
	for _, n := range names {
		if n != "s07" && final[n] != before[n] {
			t.Errorf("%s: pid %d → %d over the reloads", n, before[n], final[n])
		}
	}
}

func toolNamesOf(res *mcp.ListToolsResult) []string {
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}

// waitEvent waits until the event log holds n events of typ and returns
// the last.
func waitEvent(t *testing.T, base, typ string, n int) fleet.Event {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/api/events")
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Events []admin.Entry }
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var seen []fleet.Event
		for _, e := range body.Events {
			if string(e.Type) == typ {
				seen = append(seen, e.Event)
			}
		}
		if len(seen) >= n {
			return seen[len(seen)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s events, want %d", len(seen), typ, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The watched file: a symlink swap (a Kubernetes ConfigMap update) and an
// editor's rename-on-save are both picked up; a removed server's endpoint
// answers 404 naming it, and the aggregated session is told its tools
// changed each time.
func TestReloadWatchesTheFile(t *testing.T) {
	fixture := testserver.Build(t)
	dir := t.TempDir()
	version := func(name, content string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "config.json"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return name
	}
	two := fmt.Sprintf(`{"mcpServers":{"a":{"command":%q},"b":{"command":%q}}}`, fixture, fixture)
	three := fmt.Sprintf(`{"mcpServers":{"a":{"command":%q},"b":{"command":%q},"c":{"command":%q}}}`, fixture, fixture, fixture)
	if err := os.Symlink(version("v1", two), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.json")
	if err := os.Symlink(filepath.Join("..data", "config.json"), cfg); err != nil {
		t.Fatal(err)
	}
	s := startServeFile(t, cfg, "")
	stopAtCleanup(t, s)
	base := s.base
	A := countingSession(t, base+"/mcp")
	label := map[*listCounter]string{A: "/mcp"}

	// The symlink swap: ..data → v2, as kubelet does it (a new link
	// renamed over the old).
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(version("v2", three), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, base, "reloaded", 1)
	if ev.Details["trigger"] != "watch" {
		t.Fatalf("reloaded by %v", ev.Details)
	}
	waitCounts(t, map[*listCounter]int32{A: 1}, label) // c's tools, once learned
	if _, ok := servers(t, base)["c"]; !ok {
		t.Fatal("the added server is not served")
	}

	// Rename-on-save: the new content written aside, renamed over the
	// file (which replaces the symlink by a file).
	one := fmt.Sprintf(`{"mcpServers":{"a":{"command":%q},"c":{"command":%q}}}`, fixture, fixture)
	aside := filepath.Join(dir, ".config.json.swp")
	if err := os.WriteFile(aside, []byte(one), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, cfg); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, base, "reloaded", 2)
	waitCounts(t, map[*listCounter]int32{A: 2}, label) // b's tools gone
	resp, err := http.Post(base+"/servers/b/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error struct{ Message string } }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body.Error.Message, `no server named "b"`) {
		t.Fatalf("the removed server's endpoint: %d %q", resp.StatusCode, body.Error.Message)
	}
	if _, ok := servers(t, base)["b"]; ok {
		t.Fatal("the removed server is still listed")
	}
}

// A one-server change among 100 configured servers (all learned and
// asleep): the reload spawns exactly the changed server (to learn its
// lists from its new launch) and nothing else. It logs how long the
// reload took, against, in the same run, a reload that changes nothing
// and a restart of mcpvisor (what a change cost before reload), which
// ends every client session.
func TestReloadHundredServers(t *testing.T) {
	fixture := testserver.Build(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	const n = 100
	config := func(changed string) string {
		var b strings.Builder
		b.WriteString(`{"mcpServers":{`)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			name := fmt.Sprintf("s%03d", i)
			extra := ""
			if name == changed {
				extra = `,"cwd":"/"`
			}
			fmt.Fprintf(&b, `%q:{"command":%q%s}`, name, fixture, extra)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	if err := os.WriteFile(cfg, []byte(config("")), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	s := startServeFile(t, cfg, "", "--no-watch", "--state-dir", state)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	spawns := func() (total int, learned int) {
		for _, st := range servers(t, base) {
			total += st.Spawns
			if st.Learned && st.State == "dormant" {
				learned++
			}
		}
		return
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, learned := spawns(); learned == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the servers were not all learned")
		}
	}
	before, _ := spawns()
	was := servers(t, base)["s042"].Spawns

	t0 := time.Now()
	if code, rep := reloadJSON(t, addr); code != 0 || len(actionsOf(rep)) != 0 {
		t.Fatalf("no-op reload: %d %v", code, actionsOf(rep))
	}
	noop := time.Since(t0)

	if err := os.WriteFile(cfg, []byte(config("s042")), 0o600); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	code, rep := reloadJSON(t, addr)
	one := time.Since(t0)
	if code != 0 || len(actionsOf(rep)) != 1 {
		t.Fatalf("one-server reload: %d %v", code, actionsOf(rep))
	}
	// The relaunched server learns its lists from its new launch, then
	// sleeps again: wait for that, then count.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st := servers(t, base)["s042"]; st.State == "dormant" && st.Spawns > was {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("s042 was not learned again: %+v", servers(t, base)["s042"])
		}
	}
	after, _ := spawns()
	if got := after - before; got != 1 {
		t.Fatalf("the reload caused %d spawns, want exactly 1 (the changed server)", got)
	}
	if st := servers(t, base)["s042"]; st.Spawns != was+1 {
		t.Fatalf("s042 spawned %d times since the reload, want 1", st.Spawns-was)
	}

	// The baseline: restart mcpvisor on the same state, until it serves.
	t0 = time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := s.exit(t, t0, 10*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	s2 := startServeFile(t, cfg, "", "--no-watch", "--state-dir", state)
	stopAtCleanup(t, s2)
	restart := time.Since(t0)
	t.Logf("100 servers: one-server reload %v (serve's own count %.1f ms), no-op reload %v, restart of mcpvisor %v; spawns caused by the reload: %d",
		one.Round(time.Millisecond), rep.Result.TookMs, noop.Round(time.Millisecond), restart.Round(time.Millisecond), after-before)
}

// serveFleet starts serve, its file not watched, on a config file of n
// fixture servers (fleetConfig) and waits until they run; it returns serve
// and a function that rewrites the file with m servers.
func serveFleet(t *testing.T, n int) (*started, func(m int)) {
	t.Helper()
	fixture := testserver.Build(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	write := func(m int) {
		if err := os.WriteFile(cfg, []byte(fleetConfig(fixture, m, nil)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(n)
	s := startServeFile(t, cfg, "", "--no-watch")
	stopAtCleanup(t, s)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%02d", i))
	}
	waitRunning(t, s.base, names...)
	return s, write
}

// sleepCall calls the fixture's sleep tool for ms on sess in the
// background; the channel yields nil, or why the call failed (a tool
// error included).
func sleepCall(t *testing.T, sess *mcp.ClientSession, ms int) <-chan error {
	called := make(chan error, 1)
	go func() {
		res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": ms}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		called <- err
	}()
	return called
}

// A removed server's endpoint turns away new requests at once (404) and
// the aggregated session is told its tools are gone at once — not after
// the drain — while the call in flight on that endpoint finishes and its
// answer reaches the client; the reload reports the drain.
func TestReloadRemovalDrainsItsEndpoint(t *testing.T) {
	s, write := serveFleet(t, 3)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	A := countingSession(t, base+"/mcp")
	B := countingSession(t, base+"/servers/s02/mcp")

	const callMs = 3000
	called := sleepCall(t, B.sess, callMs)
	time.Sleep(300 * time.Millisecond) // the call is under way
	// A may still be told of the start-up learn (the cache is learned,
	// and the API says so, just before sessions are told): count from
	// here, and below see the list itself without s02.
	told := A.n.Load()
	write(2)
	t0 := time.Now()
	type result struct {
		code int
		rep  admin.ReloadReport
	}
	reloaded := make(chan result, 1)
	go func() {
		code, rep := reloadJSON(t, addr)
		reloaded <- result{code, rep}
	}()

	// Applied at once: the endpoint is gone and /mcp is told.
	waitCounts(t, map[*listCounter]int32{A: told + 1}, map[*listCounter]string{A: "/mcp"})
	for {
		res, err := A.sess.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(res.Tools, func(tl *mcp.Tool) bool { return strings.HasPrefix(tl.Name, "s02") }) {
			break
		}
		if time.Since(t0) > callMs*time.Millisecond/2 {
			t.Fatalf("/mcp still lists s02's tools %v after the reload", time.Since(t0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Post(base+"/servers/s02/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a new session on the removed server's endpoint: %d, want 404", resp.StatusCode)
	}
	if took := time.Since(t0); took > callMs*time.Millisecond/2 {
		t.Fatalf("the removal was served only after %v: it waited for the drain", took)
	}

	// The call in flight finishes, and then the reload returns.
	if err := <-called; err != nil {
		t.Fatalf("the call in flight on the removed server's endpoint failed: %v", err)
	}
	r := <-reloaded
	if r.code != 0 || !r.rep.Applied {
		t.Fatalf("reload: exit %d, %+v", r.code, r.rep)
	}
	for _, sr := range r.rep.Result.Servers {
		if sr.Name != "s02" {
			continue
		}
		if sr.Action != "removed" || sr.Drained == nil || sr.Drained.Stopped != 1 || sr.Drained.Cut != 0 {
			t.Fatalf("s02: %+v drained %+v, want removed, one instance stopped after its call", sr.ServerChange, sr.Drained)
		}
	}
}

// A reload waits for another only until that one is applied, not through
// its drains: while a SIGHUP reload drains a removed server's long call,
// an API reload with a short --timeout is applied and answers in time.
func TestReloadDoesNotWaitForAnotherReloadsDrains(t *testing.T) {
	s, write := serveFleet(t, 2)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	B := countingSession(t, base+"/servers/s01/mcp")
	called := sleepCall(t, B.sess, 8000)
	time.Sleep(300 * time.Millisecond) // the call is under way
	write(1)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := servers(t, base)["s01"]; !ok {
			break // applied; s01 drains its call
		}
		if time.Now().After(deadline) {
			t.Fatal("the SIGHUP reload was not applied")
		}
	}
	t0 := time.Now()
	code, out, stderr := runBin(t, "reload", "--addr", addr, "--json", "--timeout", "2s")
	took := time.Since(t0)
	var rep admin.ReloadReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.Applied {
		t.Fatalf("reload during another's drain: exit %d after %v, %q %s", code, took, out, stderr)
	}
	if took > 4*time.Second {
		t.Fatalf("the reload took %v behind another's drain", took)
	}
	if err := <-called; err != nil {
		t.Fatalf("the drained call failed: %v", err)
	}
}

// Nor does a reload that serve triggers itself — a SIGHUP or a change of
// the file — wait for an earlier one's drains: the next change is read and
// applied at once, while a call the first removal drains goes on.
func TestSignalAndWatchReloadsDoNotWaitForDrains(t *testing.T) {
	s, write := serveFleet(t, 2)
	base := s.base
	B := countingSession(t, base+"/servers/s01/mcp")
	called := sleepCall(t, B.sess, 8000)
	time.Sleep(300 * time.Millisecond) // the call is under way
	write(1)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitServers := func(what string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, ok := servers(t, base)["s01"]; ok == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s was not applied within 3 s (the removal's drain takes 8 s)", what)
			}
		}
	}
	waitServers("the removal", false)
	write(2) // and a SIGHUP asks for it (serve runs with --no-watch)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitServers("the next change, behind the removal's drain,", true)
	if err := <-called; err != nil {
		t.Fatalf("the drained call failed: %v", err)
	}
}

// A removed server's endpoint turns new sessions away, but the sessions it
// still relays calls for reach it until its drain ends: a client's answer
// to the server's sampling request, sent after the removal, completes the
// call (it got 404, and the call waited out its drain bound).
func TestRemovedEndpointTakesItsSessionsAnswers(t *testing.T) {
	s, write := serveFleet(t, 2)
	base := s.base
	asked, answer := make(chan struct{}), make(chan struct{})
	sess := connectHTTP(t, base+"/servers/s01/mcp", &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			close(asked)
			select {
			case <-answer:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "after the removal"}}, nil
		},
	})
	called := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"prompt": "p"}})
		switch {
		case err != nil:
			called <- "error: " + err.Error()
		case res.IsError:
			called <- fmt.Sprintf("tool error: %v", res.Content)
		default:
			called <- res.Content[0].(*mcp.TextContent).Text
		}
	}()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not ask for sampling")
	}
	write(1)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := servers(t, base)["s01"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the removal was not applied")
		}
	}
	// A new session on the removed endpoint is turned away.
	resp, err := http.Post(base+"/servers/s01/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a new session on the removed endpoint: HTTP %d", resp.StatusCode)
	}
	close(answer)
	select {
	case got := <-called:
		if got != "sampled: after the removal" {
			t.Fatalf("the call the removed server drained: %s", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call did not complete with the client's answer")
	}
	// Its drain over, the endpoint closes its sessions (gateway.RetiredGrace
	// later, so that their clients read the last answers).
	for deadline := time.Now().Add(gateway.RetiredGrace + 10*time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("POST", base+"/servers/s01/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sess.ID())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed endpoint still serves its session after its drain: HTTP %d", resp.StatusCode)
		}
	}
}
