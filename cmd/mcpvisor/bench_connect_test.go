package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/loadtest"
)

// The connect benchmark (issue 15): what mcpvisor connect adds per call
// over mcpvisor stdio, and what it costs in memory, in one run. One client
// (sequential calls: the latency of one call) reaches the fixture's echo
// tool directly over stdio, through mcpvisor stdio, and through
// mcpvisor connect to a mcpvisor serve daemon; the paths interleave over
// the rounds (even ones reversed), so a slow spell of the machine weighs
// on all of them. RSS is each process's once the calls are done; connect's
// is also split into its private memory and its proportional share of the
// pages it shares (the executable's, with the daemon). `make
// bench-connect` runs it; plain `go test` skips it.
//
// Environment: MCPVISOR_BENCH_CONNECT=1 enables it; MCPVISOR_BENCH_DURATION
// (default 1.5s) is each measure window, MCPVISOR_BENCH_ROUNDS (default 6)
// how often every path is measured, MCPVISOR_BENCH_OUT where the report
// (connect-report.txt) goes.
func TestBenchConnect(t *testing.T) {
	if os.Getenv("MCPVISOR_BENCH_CONNECT") == "" {
		t.Skip("set MCPVISOR_BENCH_CONNECT=1 to run the connect benchmark (make bench-connect)")
	}
	measure := benchDuration(t, "MCPVISOR_BENCH_DURATION", 1500*time.Millisecond)
	rounds := benchRounds(t, 6)
	report := newBenchReport(t, "connect-report.txt")
	say := report.say

	dir := t.TempDir()
	bin, fixture := benchBinaries(t, dir)
	cfg, env := benchFixtureConfig(t, dir, fixture, `"listen":"127.0.0.1:0",`)
	sock := filepath.Join(dir, "daemon.sock")
	daemon := startBenchProcess(t, exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "serve-state"), "--socket", sock, "--log-level", "warn"), env)
	direct := startStdioProcess(t, exec.Command(fixture), env)
	stdio := startStdioProcess(t, exec.Command(bin, "stdio", "--config", cfg, "--state-dir", filepath.Join(dir, "stdio-state"), "--log-level", "warn"), env)
	connect := startStdioProcess(t, exec.Command(bin, "connect", "--config", cfg, "--socket", sock, "--start=never"), env)

	type path struct {
		name, short string
		pid         int
		call        func(ctx context.Context) func() error
	}
	paths := []path{
		{"direct stdio (fixture)", "direct", direct.pid, func(ctx context.Context) func() error { return direct.conn.Echo(ctx, "echo", benchText) }},
		{"mcpvisor stdio (x__echo)", "stdio", stdio.pid, func(ctx context.Context) func() error { return stdio.conn.Echo(ctx, "x__echo", benchText) }},
		{"mcpvisor connect → serve (x__echo)", "connect", connect.pid, func(ctx context.Context) func() error { return connect.conn.Echo(ctx, "x__echo", benchText) }},
	}
	ctx := t.Context()
	for _, p := range paths { // warm: every server started, every page touched once
		if err := p.call(ctx)(); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	say("mcpvisor connect benchmark: 1 caller, %v per window, %d interleaved rounds (even ones reversed), %d CPUs\n", measure, rounds, runtime.NumCPU())
	p50 := map[string][]float64{}
	mean := map[string][]float64{}
	for round := 1; round <= rounds; round++ {
		order := slices.Clone(paths)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, p := range order {
			st := loadtest.Run(ctx, loadtest.Options{Callers: 1, Warmup: 100 * time.Millisecond, Measure: measure},
				func(int) func() error { return p.call(ctx) })
			if st.Errors > 0 {
				t.Fatalf("%s: %d errors, first %v", p.name, st.Errors, st.FirstErr)
			}
			p50[p.short] = append(p50[p.short], float64(st.Percentile(50).Microseconds()))
			mean[p.short] = append(mean[p.short], st.Window.Seconds()*1e6/float64(st.Calls))
		}
	}
	say("\nper call, µs (median over rounds of each round's p50; of its mean in brackets):\n")
	for _, p := range paths {
		say("  %-36s %7.1f  [%7.1f]\n", p.name, median(p50[p.short]), median(mean[p.short]))
	}
	// Differences round by round (each pair measured in the same round),
	// then their median: the cost of the hop itself.
	diff := func(a, b string, of map[string][]float64) float64 {
		var d []float64
		for i := range of[a] {
			d = append(d, of[a][i]-of[b][i])
		}
		return median(d)
	}
	say("\nconnect − mcpvisor stdio: %+.1f µs per call p50 (%+.1f mean); target ≤ +100 µs\n", diff("connect", "stdio", p50), diff("connect", "stdio", mean))
	say("connect / mcpvisor stdio: %.2f× p50; connect / direct: %.2f× p50; mcpvisor stdio / direct: %.2f× p50\n",
		median(p50["connect"])/median(p50["stdio"]), median(p50["connect"])/median(p50["direct"]), median(p50["stdio"])/median(p50["direct"]))

	say("\nRSS after the rounds (VmRSS, peak VmHWM):\n")
	for _, p := range []struct {
		name string
		pid  int
	}{{"direct fixture", direct.pid}, {"mcpvisor stdio", stdio.pid}, {"mcpvisor serve (the daemon)", daemon.pid}, {"mcpvisor connect", connect.pid}} {
		say("  %-28s %s (peak %s)\n", p.name, kb(vmRSS(p.pid)), kb(vmHWM(p.pid)))
	}
	anon, pss := procStatusKB(connect.pid, "RssAnon"), procFileKB(connect.pid, "smaps_rollup", "Pss")
	say("mcpvisor connect: private (RssAnon) %s, PSS %s; target RSS ≤ 10 MB\n", kb(anon), kb(pss))
	say("connect RSS / mcpvisor stdio RSS: %.2f×\n", float64(vmRSS(connect.pid))/float64(vmRSS(stdio.pid)))
	report.save(t)
}
