package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The fleet benchmark (issue 14, "Proof"): launcher flattening against the
// same npm servers run through npx as written. For @modelcontextprotocol/
// server-everything and server-memory, each configured as users write it,
// `npx -y @modelcontextprotocol/server-NAME`, in two cases — npm's npx
// cache (.deps/npm-cache, filled by scripts/test-deps.sh as `npx -y`
// fills ~/.npm/_npx; the server's cwd a directory with no npm project)
// and a local project (cwd .deps/npm, where the package is installed) —
// one mcpvisor serve runs each twice: flattened (the default) and
// "launch": "as-written". npm runs with no user .npmrc (an empty
// userconfig), the same for both.
//
// Each round puts every server to sleep and wakes it with a tools/call
// (server-everything's echo, server-memory's read_graph) on its own
// endpoint, timing the call from the client (dormant → first answer:
// spawn, handshake, call); after settleAfterWake it sums the RSS of the
// server's process tree (the server's pid and its descendants, the
// pid-namespace init included where there is one) and reads mcpvisor's
// own figure for it (/api/servers memoryBytes: the cgroup's where there
// is one). The rounds interleave the servers, even ones in reverse order,
// so that a slow spell of this shared machine weighs on both alike; the
// ratios are of medians over the rounds, with the range of the per-round
// ratios. Targets: wake ≥ 3× faster, tree memory ≥ 50 % less.
//
// `make bench-fleet` runs it; plain `go test` skips it. Environment:
// MCPVISOR_BENCH_FLEET=1 enables it; MCPVISOR_BENCH_ROUNDS (default 7);
// MCPVISOR_BENCH_PNPM=1 adds the same servers configured as `pnpm dlx
// @modelcontextprotocol/server-NAME`, with pnpm 10 (in JavaScript) and
// pnpm 12 (native), from pnpm's dlx cache (.deps/pnpm-home);
// MCPVISOR_BENCH_OUT (default $TMPDIR/mcpvisor-bench) where
// fleet-report-nodeMAJOR.txt goes (MAJOR: the release line of the node on
// PATH).

const (
	benchFleetEnv   = "MCPVISOR_BENCH_FLEET"
	benchPNPMEnv    = "MCPVISOR_BENCH_PNPM"
	settleAfterWake = 1500 * time.Millisecond
)

// fleetCase is one server of the benchmark.
type fleetCase struct {
	name, pkg, where string // where: "npx cache" or "local project"
	flat             bool
	noCache          bool // flattened with node's compile cache turned off (NODE_DISABLE_COMPILE_CACHE)
	tool             string
	args             map[string]any
}

// fleetRow is one wake of one server.
type fleetRow struct {
	round  int
	wake   time.Duration
	start  float64 // ms: mcpvisor's spawn and handshake (its respawned event's respawnMs)
	rssKB  int     // sum of the tree's VmRSS
	memAPI uint64  // /api/servers memoryBytes
	cpuMs  float64 // the tree's CPU time when the wake's call was answered (/api/servers cpuSeconds, from its cgroup)
	tree   string  // the tree's processes, by name
}

func TestBenchFleet(t *testing.T) {
	if os.Getenv(benchFleetEnv) == "" {
		t.Skip("set " + benchFleetEnv + "=1 to run the fleet benchmark (make bench-fleet)")
	}
	rounds := benchRounds(t, 7)
	// One report per Node release line, so that runs on several keep each.
	node := nodeVersion(t)
	report := newBenchReport(t, "fleet-report-node"+nodeMajor(node)+".txt")
	say := report.say

	project := testserver.Deps(t, "npm")
	cache := testserver.Deps(t, "npm-cache")
	dir := t.TempDir()
	bin, _ := benchBinaries(t, dir)
	marker := testserver.NewMarker(t)
	t.Cleanup(func() { testserver.WaitGone(t, marker, 5*time.Second) })
	userconfig := filepath.Join(dir, "npmrc")
	noProject := filepath.Join(dir, "cwd")
	for _, err := range []error{os.WriteFile(userconfig, nil, 0o600), os.MkdirAll(noProject, 0o755)} {
		if err != nil {
			t.Fatal(err)
		}
	}

	wheres := []string{"npx cache", "local project"}
	pnpmHome := ""
	if os.Getenv(benchPNPMEnv) != "" {
		wheres = append(wheres, "pnpm10 dlx", "pnpm12 dlx")
		pnpmHome = testserver.Deps(t, "pnpm-home")
	}
	var cases []fleetCase
	cfgServers := map[string]any{}
	for _, pkg := range []string{"everything", "memory"} {
		for _, where := range wheres {
			for _, mode := range []string{"flat", "nocache", "written"} {
				if mode == "nocache" && strings.HasPrefix(where, "pnpm") {
					continue
				}
				flat := mode != "written"
				c := fleetCase{pkg: pkg, where: where, flat: flat, noCache: mode == "nocache", tool: "echo", args: map[string]any{"message": "wake"}}
				if pkg == "memory" {
					c.tool, c.args = "read_graph", map[string]any{}
				}
				c.name = pkg + "-" + strings.Fields(where)[0] + "-" + mode
				cwd := noProject
				if where == "local project" {
					cwd = project
				}
				srv := map[string]any{
					"command": "npx", "args": []string{"-y", "@modelcontextprotocol/server-" + pkg}, "cwd": cwd,
					"idleTimeout": "0", "env": map[string]string{
						"npm_config_cache": cache, "npm_config_userconfig": userconfig, "npm_config_update_notifier": "false",
						"npm_config_fund": "false", "npm_config_audit": "false",
						"MEMORY_FILE_PATH": filepath.Join(dir, c.name+".jsonl"), testserver.MarkerEnv: marker,
					},
				}
				if pnpm, ok := strings.CutSuffix(where, " dlx"); ok {
					// pnpm dlx from its cache (.deps/pnpm-home, filled by
					// scripts/test-deps.sh as `pnpm dlx NAME` fills it).
					srv["command"] = filepath.Join(testserver.Deps(t, pnpm), "node_modules", ".bin", "pnpm")
					srv["args"] = []string{"dlx", "@modelcontextprotocol/server-" + pkg}
					env := srv["env"].(map[string]string)
					for _, x := range []string{"cache", "data", "config", "state"} {
						env["XDG_"+strings.ToUpper(x)+"_HOME"] = filepath.Join(pnpmHome, x)
					}
					// Its installs never expire: pnpm would otherwise
					// install again, over the network, a day after
					// test-deps.sh filled the cache.
					env["npm_config_dlx_cache_max_age"] = "52560000"
					env["pnpm_config_dlx_cache_max_age"] = "52560000"
				}
				if !flat {
					srv["launch"] = "as-written"
				}
				if c.noCache {
					srv["env"].(map[string]string)["NODE_DISABLE_COMPILE_CACHE"] = "1"
				}
				cfgServers[c.name] = srv
				cases = append(cases, c)
			}
		}
	}
	cfgJSON, err := json.Marshal(map[string]any{"mcpServers": cfgServers})
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, cfgJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startBenchProcess(t, exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"), "--log-level", "warn"), os.Environ())
	ctx := t.Context()

	// mcpvisor learns every server at its start (as written: nothing is
	// resolved yet), then resolves the flattened ones in the background.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st := servers(t, serve.base)
		done := true
		for _, c := range cases {
			s := st[c.name]
			if !s.Learned || c.flat && (s.Launcher == nil || !s.Launcher.Flattened) {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all learned and resolved after 5 minutes: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := servers(t, serve.base)
	say("mcpvisor fleet benchmark: launcher flattening, %d interleaved rounds (even ones in reverse order), %d CPUs, %s, npm %s; load average at the start %s\n",
		rounds, runtime.NumCPU(), node, npmVersion(t), loadAverage())
	for _, c := range cases {
		if ls := st[c.name].Launcher; c.flat {
			say("  %-24s %s: %s (node's compile cache: %s)\n", c.name, c.where, ls.Runs, cmp.Or(ls.CompileCache, "none: "+ls.CompileCacheSetBy+" set"))
		} else {
			launcher := "npx -y"
			if strings.HasPrefix(c.where, "pnpm") {
				launcher = "pnpm dlx"
			}
			say("  %-24s %s: %s @modelcontextprotocol/server-%s as written\n", c.name, c.where, launcher, c.pkg)
		}
	}

	sessions := map[string]*mcp.ClientSession{}
	for _, c := range cases {
		sess := connectHTTP(t, serve.base+"/servers/"+c.name+"/mcp", nil)
		sessions[c.name] = sess
	}
	// One unmeasured wake of each first, as a user's server has started
	// before: the caches of a start (npm's, node's compile caches, the
	// page cache) are then as they are at every later wake.
	for _, c := range cases {
		sleepServer(t, serve.base, c.name)
		if res, err := sessions[c.name].CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args}); err != nil || res.IsError {
			t.Fatalf("%s: %s: %v %v", c.name, c.tool, res, err)
		}
	}
	rows := map[string][]fleetRow{}
	for round := 1; round <= rounds; round++ {
		order := slices.Clone(cases)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, c := range order {
			sleepServer(t, serve.base, c.name)
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			t0 := time.Now()
			res, err := sessions[c.name].CallTool(callCtx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
			wake := time.Since(t0)
			cancel()
			if err != nil || res.IsError {
				t.Fatalf("%s: %s: %v %v", c.name, c.tool, res, err)
			}
			cpuMs := servers(t, serve.base)[c.name].CPUSeconds * 1000
			time.Sleep(settleAfterWake)
			s := servers(t, serve.base)[c.name]
			if s.PID == 0 {
				t.Fatalf("%s is not running after its call: %+v", c.name, s)
			}
			if c.flat && s.Launcher.Last != "flattened" || !c.flat && s.Launcher.Last != "as written" {
				t.Fatalf("%s started %s", c.name, s.Launcher.Last)
			}
			rss, names := treeRSS(s.PID)
			start := respawnMs(t, serve.base, c.name)
			rows[c.name] = append(rows[c.name], fleetRow{round: round, wake: wake, start: start, rssKB: rss, memAPI: s.MemoryBytes, cpuMs: cpuMs, tree: names})
			fmt.Printf("  round %d %-24s wake %6.0f ms (start %4.0f ms, tree CPU %4.0f ms), tree %s (%s)\n", round, c.name, msf(wake), start, cpuMs, kb(rss), names)
		}
	}
	for _, sess := range sessions {
		_ = sess.Close()
	}

	say("\n| server | case | launch | wake ms, median (min–max) | of which start (spawn + handshake) ms, median | tree CPU ms at the answer, median | tree RSS, median | mcpvisor's memory figure, median | tree |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cases {
		r := rows[c.name]
		wakes := durations(r, func(x fleetRow) float64 { return msf(x.wake) })
		rss := durations(r, func(x fleetRow) float64 { return float64(x.rssKB) })
		api := durations(r, func(x fleetRow) float64 { return float64(x.memAPI) / 1024 })
		launch := "as written"
		switch {
		case c.noCache:
			launch = "flattened, no compile cache"
		case c.flat:
			launch = "flattened"
		}
		starts := durations(r, func(x fleetRow) float64 { return x.start })
		cpus := durations(r, func(x fleetRow) float64 { return x.cpuMs })
		say("| server-%s | %s | %s | %.0f (%.0f–%.0f) | %.0f | %.0f | %s | %s | %s |\n", c.pkg, c.where, launch,
			median(wakes), slices.Min(wakes), slices.Max(wakes), median(starts), median(cpus), kb(int(median(rss))), kb(int(median(api))), r[len(r)-1].tree)
	}
	say("\nratios, as written / flattened (target: wake ≥ 3×, memory ≥ 50 %% less):\n")
	for _, pkg := range []string{"everything", "memory"} {
		for _, where := range wheres {
			prefix := pkg + "-" + strings.Fields(where)[0]
			flat, written, nocache := rows[prefix+"-flat"], rows[prefix+"-written"], rows[prefix+"-nocache"]
			wake := func(x fleetRow) float64 { return msf(x.wake) }
			mem := func(x fleetRow) float64 { return float64(x.rssKB) }
			w, wlo, whi := ratioMedians(written, flat, wake)
			m, mlo, mhi := ratioMedians(flat, written, mem)
			verdict := func(ok bool) string {
				if ok {
					return "met"
				}
				return "NOT met"
			}
			start := func(x fleetRow) float64 { return x.start }
			sx, slo, shi := ratioMedians(written, flat, start)
			say("  server-%s, %s: wake %.2f× faster (rounds %.2f–%.2f; %.0f → %.0f ms) %s; tree memory %.0f %% less (rounds %.0f–%.0f %%; %s → %s) %s; start alone %.2f× (rounds %.2f–%.2f)\n",
				pkg, where, w, wlo, whi, median(durations(written, wake)), median(durations(flat, wake)), verdict(w >= 3),
				100*(1-m), 100*(1-mhi), 100*(1-mlo), kb(int(median(durations(written, mem)))), kb(int(median(durations(flat, mem)))), verdict(m <= 0.5),
				sx, slo, shi)
			cpu := func(x fleetRow) float64 { return x.cpuMs }
			cx, clo, chi := ratioMedians(written, flat, cpu)
			say("    tree CPU time to the answer (less sensitive to the machine's other load): %.2f× less flattened (rounds %.2f–%.2f; %.0f → %.0f ms)\n",
				cx, clo, chi, median(durations(written, cpu)), median(durations(flat, cpu)))
			if len(nocache) == 0 {
				continue
			}
			nw, nwlo, nwhi := ratioMedians(written, nocache, wake)
			cw, cwlo, cwhi := ratioMedians(nocache, flat, wake)
			ncx, _, _ := ratioMedians(nocache, flat, cpu)
			say("    flattened without node's compile cache: wake %.2f× faster than as written (rounds %.2f–%.2f; %.0f ms); the cache makes it %.2f× faster (rounds %.2f–%.2f) and spends %.2f× less CPU (%.0f → %.0f ms)\n",
				nw, nwlo, nwhi, median(durations(nocache, wake)), cw, cwlo, cwhi, ncx, median(durations(nocache, cpu)), median(durations(flat, cpu)))
		}
	}
	say("load average at the end %s (this machine is shared: other processes' load slows node's start, flattened or not, and narrows the wake ratio)\n", loadAverage())
	serve.stop(t)
	report.save(t)
}

// respawnMs is the respawnMs of the last respawned event of the server:
// how long its spawn and handshake took, as mcpvisor counts it.
func respawnMs(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Events []fleet.Event `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for _, e := range slices.Backward(body.Events) {
		if e.Server == name && e.Type == "respawned" {
			ms, _ := e.Details["respawnMs"].(float64)
			return ms
		}
	}
	t.Fatalf("no respawned event of %s", name)
	return 0
}

// sleepServer puts a running server to sleep and waits until it is
// dormant (one not running is left as it is).
func sleepServer(t *testing.T, base, name string) {
	t.Helper()
	resp, err := http.Post(base+"/api/servers/"+name+"/sleep?timeout=30s", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for servers(t, base)[name].State != "dormant" {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not go dormant: %+v", name, servers(t, base)[name])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// treeRSS sums the VmRSS of pid and its descendants, and names them.
func treeRSS(pid int) (int, string) {
	total := 0
	var names []string
	var walk func(int)
	walk = func(p int) {
		if n := vmRSS(p); n > 0 {
			total += n
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		names = append(names, strings.TrimSpace(string(comm)))
		for _, c := range children(p) {
			walk(c)
		}
	}
	walk(pid)
	return total, strings.Join(names, " → ")
}

func durations(rows []fleetRow, f func(fleetRow) float64) []float64 {
	out := make([]float64, len(rows))
	for i, r := range rows {
		out[i] = f(r)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratioMedians is median(f over a) / median(f over b), with the least
// and greatest of the per-round ratios.
func ratioMedians(a, b []fleetRow, f func(fleetRow) float64) (x, lo, hi float64) {
	x, lo, hi = median(durations(a, f))/median(durations(b, f)), 1e18, 0
	for _, ra := range a {
		for _, rb := range b {
			if ra.round == rb.round {
				r := f(ra) / f(rb)
				lo, hi = min(lo, r), max(hi, r)
			}
		}
	}
	return x, lo, hi
}

func nodeVersion(t *testing.T) string {
	b, err := exec.Command("node", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return "Node " + strings.TrimSpace(string(b))
}

// nodeMajor is the release line of a nodeVersion: "22" of "Node v22.23.3".
func nodeMajor(version string) string {
	v := strings.TrimPrefix(version, "Node v")
	major, _, _ := strings.Cut(v, ".")
	return major
}

func npmVersion(t *testing.T) string {
	b, err := exec.Command("npm", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
