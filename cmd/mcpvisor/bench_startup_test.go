package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// The start-up benchmark: how long mcpvisor serve takes to serve, and
// what mcpvisor connect costs, against a baseline revision in the same
// run. In each round, for each binary (the order alternating), a fresh
// mcpvisor serve with the fixture's config is started and timed until
// it reports its address (it listens, its socket is open); then a fresh
// mcpvisor connect to its socket is timed until its first tools/call is
// answered (connect's own start, its initialize through the daemon, and
// the fixture's start on demand); after 20 more calls connect's VmRSS
// and RssAnon are read. Both processes are stopped before the next. The
// verdict is each measure's now/base ratio per round, as the geometric
// mean of the rounds with its 95 % interval. `make bench-startup
// BASE=REV` runs it; plain `go test` skips it.
//
// Environment: MCPVISOR_BENCH_STARTUP=1 enables it; MCPVISOR_BENCH_BASE (a
// git revision) is the baseline, required; MCPVISOR_BENCH_ROUNDS (default
// 30) the rounds; MCPVISOR_BENCH_OUT where the report
// (startup-report.txt) goes.
func TestBenchStartup(t *testing.T) {
	if os.Getenv("MCPVISOR_BENCH_STARTUP") == "" {
		t.Skip("set MCPVISOR_BENCH_STARTUP=1 to run the start-up benchmark (make bench-startup BASE=REV)")
	}
	rev := os.Getenv(benchBaseEnv)
	if rev == "" {
		t.Fatalf("%s: the baseline revision is required", benchBaseEnv)
	}
	rounds := benchRounds(t, 30)
	report := newBenchReport(t, "startup-report.txt")
	say := report.say
	dir := t.TempDir()
	bin, fixture := benchBinaries(t, dir)
	baseBin, commit, _ := benchBaseBinaries(t, dir, rev)
	cfg, env := benchFixtureConfig(t, dir, fixture, ``)
	say("start-up: mcpvisor serve (1 fixture server) until it reports its address; mcpvisor connect to it until its first tools/call is answered, and its RSS after 21 calls; %d interleaved rounds, %d CPUs\n",
		rounds, runtime.NumCPU())
	say("baseline: %s (%s)\n\n", rev, commit)

	measures := []string{"serve start-up (ms)", "connect to first answer (ms)", "connect VmRSS (KiB)", "connect RssAnon (KiB)"}
	got := map[string]map[string][]float64{"now": {}, "base": {}}
	interleaved(rounds, bin, baseBin, func(round int, which, b string) {
		sock := filepath.Join(dir, fmt.Sprintf("s-%s-%d.sock", which, round))
		start := time.Now()
		daemon := startBenchProcess(t, exec.Command(b, "serve", "--config", cfg, "--listen", "127.0.0.1:0",
			"--state-dir", filepath.Join(dir, fmt.Sprintf("state-%s-%d", which, round)), "--socket", sock, "--log-level", "warn"), env)
		served := time.Since(start)
		start = time.Now()
		connect := startStdioProcess(t, exec.Command(b, "connect", "--config", cfg, "--socket", sock, "--start=never"), env)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		if err := connect.conn.Echo(ctx, "x__echo", benchText)(); err != nil {
			t.Fatalf("%s connect: %v", which, err)
		}
		answered := time.Since(start)
		for range 20 {
			if err := connect.conn.Echo(ctx, "x__echo", benchText)(); err != nil {
				t.Fatalf("%s connect: %v", which, err)
			}
		}
		cancel()
		m := got[which]
		m[measures[0]] = append(m[measures[0]], msf(served))
		m[measures[1]] = append(m[measures[1]], msf(answered))
		m[measures[2]] = append(m[measures[2]], float64(vmRSS(connect.pid)))
		m[measures[3]] = append(m[measures[3]], float64(procStatusKB(connect.pid, "RssAnon")))
		connect.stop(t)
		daemon.stop(t)
	})
	say("%-30s %10s %10s %8s  %s\n", "", "now", "base", "now/base", "(geometric mean of the rounds' ratios, 95 % interval)")
	for _, name := range measures {
		var ratios []float64
		for i := range got["now"][name] {
			ratios = append(ratios, got["now"][name][i]/got["base"][name][i])
		}
		r, res := ratioCI(ratios)
		say("%-30s %10.1f %10.1f %8.3f  [%.3f, %.3f]\n", name, median(got["now"][name]), median(got["base"][name]), r, r/(1+res), r*(1+res))
	}
	say("\n(now and base: the medians of the rounds)\n")
	report.save(t)
}

// interleaved runs f rounds times for each of the binaries bin ("now")
// and baseBin ("base"), their order alternating round by round, so that a
// slow spell of the machine weighs on both.
func interleaved(rounds int, bin, baseBin string, f func(round int, which, b string)) {
	for round := 1; round <= rounds; round++ {
		order := []string{"now", "base"}
		if round%2 == 0 {
			order[0], order[1] = order[1], order[0]
		}
		for _, which := range order {
			b := bin
			if which == "base" {
				b = baseBin
			}
			f(round, which, b)
		}
	}
}
