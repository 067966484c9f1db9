package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/loadtest"
)

// The instructions benchmark (issue 30): what `make bench-gateway`'s
// rounds cannot resolve — a few percent of CPU per call — counted instead
// of timed. Each serving process runs under valgrind's cachegrind, with
// its model of this machine's caches, while the gateway
// benchmark's load client (internal/loadtest, 16 callers) makes a fixed
// number of echo calls through it to the same fixture; twice, with N and
// with 3N calls after the same warm-up, so that (Ir(3N) − Ir(N)) / 2N is
// the instructions of a call with start-up, warm-up and shut-down
// cancelled out. The paths: the raw relay (loadtest.RawRelayHandler, with
// session-era and with 2026-07-28 requests), mcpvisor serve's
// /servers/x/mcp, /mcp in a session and /mcp stateless 2026-07-28, and,
// with MCPVISOR_BENCH_BASE, the same three of a serve built from that
// revision. Only the process under valgrind is counted (the fixture, a
// child, runs natively), and the repeats interleave the paths.
// `make bench-instructions` runs it; plain `go test` skips it.
//
// The same counts give the first-level cache misses of a call, as
// cachegrind's model of one core has them: instructions fetched from
// outside the instruction cache (I1) and data reads and writes that missed
// the data cache (D1). They say what instructions alone do not: a call
// that runs fewer instructions can still cost more time if its code and
// data are spread over more cache lines. The last repeat's counts, by
// function, are summed by package: where a call's instructions and misses
// go, each path next to the raw relay. (The model has no second core:
// cache lines moving between CPUs — shared locks and counters — are not
// in these counts.)
//
// Environment: MCPVISOR_BENCH_INSTR=1 enables it;
// MCPVISOR_BENCH_INSTR_CALLS (default 1000) is N,
// MCPVISOR_BENCH_INSTR_REPEATS (default 3) how often each path is
// counted, MCPVISOR_BENCH_BASE and MCPVISOR_BENCH_OUT as for
// TestBenchReport; the report is instructions-report.txt.

const (
	benchInstrEnv    = "MCPVISOR_BENCH_INSTR"
	benchInstrWarmup = 200 // calls before the counted ones, in both runs
	// benchInstrTopFuncs is how many functions the report lists for each
	// path, by I1 misses per call.
	benchInstrTopFuncs = 30
)

// instrPath is one path counted under valgrind.
type instrPath struct {
	name, short string
	against     string                                 // the raw relay path it is judged against
	command     func(run string) (*exec.Cmd, []string) // the process to count, and its environment; run names its state
	url, tool   string
	modern      bool
}

func TestBenchInstructions(t *testing.T) {
	if os.Getenv(benchInstrEnv) == "" {
		t.Skip("set " + benchInstrEnv + "=1 to count instructions per call under valgrind (make bench-instructions)")
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		t.Fatalf("valgrind: %v", err)
	}
	n := benchIntEnv(t, "MCPVISOR_BENCH_INSTR_CALLS", 1000)
	repeats := benchIntEnv(t, "MCPVISOR_BENCH_INSTR_REPEATS", 3)
	report := newBenchReport(t, "instructions-report.txt")
	say := report.say

	dir := t.TempDir()
	bin, fixture := benchBinaries(t, dir)
	cfg, env := benchFixtureConfig(t, dir, fixture, ``)
	// The raw relay runs from this package's test binary, built again
	// with a symbol table: go test links the one running this without
	// (-s -w), and cachegrind names a function by its symbol.
	exe := filepath.Join(dir, "relay.test")
	if b, err := exec.Command("go", "test", "-c", "-o", exe, "github.com/mcpvisor/mcpvisor/cmd/mcpvisor").CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, b)
	}
	out := filepath.Join(dir, "cachegrind")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	// under runs args under valgrind, its count written to the file run
	// names.
	//
	// Valgrind has no clone3 (ENOSYS), which Go needs to start a process
	// straight into a cgroup, as mcpvisor starts its servers: as root, each
	// counted process runs in a mount namespace of its own with the cgroup2
	// mounts read-only, so that mcpvisor, unable to create its cgroups,
	// starts servers without (what a call costs is the same: the fixture
	// starts once, in the warm-up). The raw relay runs the same way.
	roMounts := cgroup2Mounts()
	under := func(run string, args ...string) *exec.Cmd {
		vg := append([]string{valgrind, "-q", "--tool=cachegrind", "--cache-sim=yes", "--log-file=" + filepath.Join(out, run+".%p.log"),
			"--cachegrind-out-file=" + filepath.Join(out, run+".out"), "--"}, args...)
		if os.Geteuid() != 0 || len(roMounts) == 0 {
			return exec.Command(vg[0], vg[1:]...)
		}
		script := `for m in ` + strings.Join(roMounts, " ") + `; do mount -o remount,bind,ro "$m" || exit 1; done; exec "$@"`
		return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"}, vg...)...)
	}
	// GOMAXPROCS=1: valgrind runs one thread at a time anyway, and a
	// second P only adds a spinning scheduler's instructions, which vary
	// from run to run.
	env = append(env, "GOMAXPROCS=1")
	raw := func(run string) (*exec.Cmd, []string) {
		return under(run, exe, "-test.run=^TestBenchRawRelayChild$", "-test.count=1"), append(env, benchRawEnv+"="+fixture)
	}
	serve := func(bin string) func(run string) (*exec.Cmd, []string) {
		return func(run string) (*exec.Cmd, []string) {
			return under(run, bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state-"+run), "--log-level", "warn"), env
		}
	}
	paths := []instrPath{
		{"raw relay (bare handler → fixture)", "raw", "", raw, "/mcp", "echo", false},
		{"raw relay, 2026-07-28 requests", "raw-modern", "", raw, "/mcp", "echo", true},
		{"serve /servers/x/mcp", "single", "raw", serve(bin), "/servers/x/mcp", "echo", false},
		{"serve /mcp (x__echo)", "agg", "raw", serve(bin), "/mcp", "x__echo", false},
		{"serve /mcp stateless 2026-07-28", "modern", "raw-modern", serve(bin), "/mcp", "x__echo", true},
	}
	rev := os.Getenv(benchBaseEnv)
	var commit string
	if rev != "" {
		var baseBin string
		baseBin, commit, _ = benchBaseBinaries(t, dir, rev)
		paths = append(paths,
			instrPath{"serve /servers/x/mcp @base", "single@base", "raw", serve(baseBin), "/servers/x/mcp", "echo", false},
			instrPath{"serve /mcp (x__echo) @base", "agg@base", "raw", serve(baseBin), "/mcp", "x__echo", false},
			instrPath{"serve /mcp stateless @base", "modern@base", "raw-modern", serve(baseBin), "/mcp", "x__echo", true})
	}
	vgVersion, _ := exec.Command(valgrind, "--version").Output()
	say("mcpvisor instructions per call: %s cachegrind (--cache-sim=yes), %d callers, %d warm-up calls, then N=%d and 3N calls in two runs of each path;\n"+
		"instructions per call = (Ir(3N) − Ir(N)) / 2N of the serving process alone; %d repeats, paths interleaved (even repeats in reverse order); %d CPUs, GOMAXPROCS=1 in the counted process\n",
		strings.TrimSpace(string(vgVersion)), benchCallers, benchInstrWarmup, n, repeats, runtime.NumCPU())
	if rev != "" {
		say("@base: mcpvisor serve built from %s (%s)\n", rev, commit)
	}

	ctx := t.Context()
	per := map[string][]float64{}                 // path → instructions per call, by repeat
	misses := map[string][]cgEvents{}             // path → cache misses per call, by repeat
	byPackage := map[string]map[string]cgEvents{} // path → package → events per call, last repeat
	byFunc := map[string]map[string]cgEvents{}    // path → function → events per call, last repeat
	start := time.Now()
	for rep := 1; rep <= repeats; rep++ {
		order := slices.Clone(paths)
		if rep%2 == 0 {
			slices.Reverse(order)
		}
		for _, p := range order {
			var counts [2]*cgCount
			for i, calls := range []int{n, 3 * n} {
				counts[i] = countInstructions(t, ctx, p, fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(p.short, "@", "_"), rep, calls), out, calls)
			}
			call := counts[1].total.perCall(counts[0].total, 2*n)
			per[p.short] = append(per[p.short], call.Ir)
			misses[p.short] = append(misses[p.short], call)
			if rep == repeats {
				byPackage[p.short] = perPackage(counts[0], counts[1], 2*n)
				byFunc[p.short] = perFunction(counts[0], counts[1], 2*n)
			}
			fmt.Printf("  counted %-34s repeat %d: Ir %d (N) and %d (3N): %.0f instructions/call (%v so far)\n",
				p.name, rep, int64(counts[0].total.Ir), int64(counts[1].total.Ir), call.Ir, time.Since(start).Round(time.Second))
		}
	}

	median := func(xs []float64) float64 {
		s := slices.Sorted(slices.Values(xs))
		if len(s)%2 == 1 {
			return s[len(s)/2]
		}
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	// ratio is a over b, of the medians, with the range of the repeats'
	// ratios (a repeat counts both paths in the same spell).
	ratio := func(a, b string) string {
		xs := make([]float64, len(per[a]))
		for i := range xs {
			xs[i] = per[a][i] / per[b][i]
		}
		return fmt.Sprintf("%.3f× (repeats %.3f–%.3f)", median(per[a])/median(per[b]), slices.Min(xs), slices.Max(xs))
	}
	say("\n| path | instructions/call, median | repeats, min–max | spread | against the raw relay, same requests |\n|---|---|---|---|---|\n")
	for _, p := range paths {
		xs := per[p.short]
		m, lo, hi := median(xs), slices.Min(xs), slices.Max(xs)
		against := "–"
		if p.against != "" {
			against = ratio(p.short, p.against)
		}
		say("| %s | %.0f | %.0f–%.0f | ±%.1f %% | %s |\n", p.name, m, lo, hi, 100*(hi-lo)/2/m, against)
	}
	if rev != "" {
		say("\nnow / @base, instructions per call:\n")
		for _, s := range []string{"single", "agg", "modern"} {
			say("  %-7s %s\n", s, ratio(s, s+"@base"))
		}
	}
	say("\nfirst-level cache misses per call, cachegrind's model (%s), median of the repeats; in brackets, beyond the raw relay's with the same requests\n", cacheModel(out))
	say("| path | I1 misses (code) | D1 read misses | D1 write misses |\n|---|---|---|---|\n")
	medianOf := func(short string, f func(cgEvents) float64) float64 {
		var xs []float64
		for _, e := range misses[short] {
			xs = append(xs, f(e))
		}
		return median(xs)
	}
	for _, p := range paths {
		cell := func(f func(cgEvents) float64) string {
			m := medianOf(p.short, f)
			if p.against == "" {
				return fmt.Sprintf("%.0f", m)
			}
			return fmt.Sprintf("%.0f (%+.0f)", m, m-medianOf(p.against, f))
		}
		say("| %s | %s | %s | %s |\n", p.name, cell(func(e cgEvents) float64 { return e.I1mr }),
			cell(func(e cgEvents) float64 { return e.D1mr }), cell(func(e cgEvents) float64 { return e.D1mw }))
	}
	for _, p := range paths {
		if p.against == "" || strings.Contains(p.short, "@") {
			continue
		}
		say("\n%s against %s, by package (repeat %d): instructions, I1 misses and D1 misses (reads + writes) per call\n", p.name, p.against, repeats)
		say("%s", packageTable(byPackage[p.against], byPackage[p.short]))
	}
	for _, p := range paths {
		if strings.Contains(p.short, "@") {
			continue
		}
		say("\n%s, the %d functions with the most I1 misses per call (repeat %d)\n", p.name, benchInstrTopFuncs, repeats)
		say("%s", functionTable(byFunc[p.short], benchInstrTopFuncs))
	}
	// The last repeat's files are kept beside the report, for
	// cg_annotate (valgrind's reader of them) to show a call's lines.
	kept := filepath.Join(report.dir(), "cachegrind")
	_ = os.RemoveAll(kept)
	if err := os.MkdirAll(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		for _, calls := range []int{n, 3 * n} {
			name := fmt.Sprintf("%s-%d-%d.out", strings.ReplaceAll(p.short, "@", "_"), repeats, calls)
			if b, err := os.ReadFile(filepath.Join(out, name)); err == nil {
				_ = os.WriteFile(filepath.Join(kept, name), b, 0o644)
			}
		}
	}
	say("\n(the whole count took %v; the last repeat's cachegrind files are in %s)\n", time.Since(start).Round(time.Second), kept)
	report.save(t)
}

// countInstructions runs p under valgrind (the file run names holds the
// count), makes the warm-up calls and then calls calls with
// benchCallers callers, stops the process and returns its counts.
func countInstructions(t *testing.T, ctx context.Context, p instrPath, run, out string, calls int) *cgCount {
	t.Helper()
	// Bounded: a process that hangs under valgrind fails this count, not
	// the whole run at go test's timeout. Valgrind runs a call in well
	// under 10 ms; each gets 100 ms, on top of a minute to start.
	ctx, cancel := context.WithTimeout(ctx, time.Minute+time.Duration(calls+benchInstrWarmup)*100*time.Millisecond)
	defer cancel()
	cmd, env := p.command(run)
	proc := startBenchProcessWithin(t, cmd, env, 2*time.Minute)
	client := loadtest.NewHTTPClient(benchCallers)
	defer client.CloseIdleConnections()
	var sess *loadtest.HTTPSession
	if p.modern {
		sess = loadtest.OpenModernHTTP(proc.base+p.url, client)
	} else {
		var err error
		if sess, err = loadtest.OpenHTTP(ctx, client, proc.base+p.url); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	for _, k := range []int{benchInstrWarmup, calls} {
		if err := callFixed(ctx, k, benchCallers, func() func() error { return sess.Echo(ctx, p.tool, benchText) }); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	if !p.modern {
		_ = sess.Close(ctx)
	}
	client.CloseIdleConnections()
	proc.stop(t)
	b, err := os.ReadFile(filepath.Join(out, run+".out"))
	if err != nil {
		t.Fatalf("%s: no cachegrind count: %v", p.name, err)
	}
	c, err := parseCachegrind(b)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	if c.byFn["???"].Ir > c.total.Ir/2 {
		t.Fatalf("%s: cachegrind named no function for most instructions: the binary has no symbol table", p.name)
	}
	return c
}

// callFixed makes calls calls of newCall's, callers at a time, and
// returns the first error.
func callFixed(ctx context.Context, calls, callers int, newCall func() func() error) error {
	var left atomic.Int64
	left.Store(int64(calls))
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range callers {
		call := newCall()
		wg.Go(func() {
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				if err := call(); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// benchIntEnv is the positive integer in the environment variable name,
// else def.
func benchIntEnv(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: not a positive integer", name, v)
	}
	return n
}

// cgroup2Mounts lists where cgroup2 is mounted (from
// /proc/self/mountinfo), each a path without blanks.
func cgroup2Mounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "-")
		if i > 4 && i+1 < len(f) && f[i+1] == "cgroup2" && !strings.ContainsAny(f[4], "\\'\"$`") {
			out = append(out, f[4])
		}
	}
	return out
}
