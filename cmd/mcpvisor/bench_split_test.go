package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/loadtest"
)

// benchSplitEnv runs TestBenchRelaySplit (make bench-relay-split);
// benchSplitChildEnv holds the serve arguments of its child, and
// benchSplitFixtureEnv the fixture the child's raw relay fronts.
const (
	benchSplitEnv        = "MCPVISOR_BENCH_SPLIT"
	benchSplitChildEnv   = "MCPVISOR_BENCH_SPLIT_CHILD"
	benchSplitFixtureEnv = "MCPVISOR_BENCH_SPLIT_FIXTURE"
)

// TestBenchRelaySplit splits mcpvisor's CPU per call beyond the raw
// relay's (make bench-gateway's verdict) in two: what the process costs
// — its heap, goroutines, timers and the rest of serve around a call —
// and what mcpvisor's own per-call work costs. One child process runs
// mcpvisor serve and, on a port of its own, the raw relay with a fixture
// of its own; another runs the raw relay alone, as bench-gateway's
// baseline. 16 callers load one path at a time, in interleaved rounds
// (every other round in reverse order), and the serving process's CPU per
// call is compared round by round: the raw relay in serve's process over
// the raw relay alone is the process's share; /servers/x/mcp and /mcp
// over the raw relay in the same process are the per-call work's. Each
// ratio is the geometric mean of the rounds with its 95 % interval
// (ratioCI). About 2 minutes; the report goes to
// bin/bench/split-report.txt. Reported, not judged.
func TestBenchRelaySplit(t *testing.T) {
	if os.Getenv(benchSplitEnv) == "" {
		t.Skip("a benchmark: make bench-relay-split")
	}
	rounds := benchRounds(t, 24)
	window := benchDuration(t, "MCPVISOR_BENCH_DURATION", 800*time.Millisecond)
	report := newBenchReport(t, "split-report.txt")
	defer report.save(t)
	say := report.say

	dir := t.TempDir()
	_, fixture := benchBinaries(t, dir)
	cfg, env := benchFixtureConfig(t, dir, fixture, ``)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	client := loadtest.NewHTTPClient(benchCallers)
	defer client.CloseIdleConnections()

	alone := startBenchProcess(t, exec.Command(exe, "-test.run=^TestBenchRawRelayChild$", "-test.count=1"), append(env, benchRawEnv+"="+fixture))
	args := []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"), "--log-level", "warn"}
	both, rawIn := startSplitChild(t, exe, append(env, benchSplitChildEnv+"="+strings.Join(args, "\n"), benchSplitFixtureEnv+"="+fixture))

	open := func(url string) *loadtest.HTTPSession {
		s, err := loadtest.OpenHTTP(ctx, client, url)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rawAlone, rawInServe := open(alone.base+"/mcp"), open(rawIn)
	single, agg := open(both.base+"/servers/x/mcp"), open(both.base+"/mcp")
	paths := []struct {
		name, short string
		pid         int
		call        func() func() error
	}{
		{"raw relay, a process of its own", "alone", alone.pid, func() func() error { return rawAlone.Echo(ctx, "echo", benchText) }},
		{"raw relay in serve's process", "in", both.pid, func() func() error { return rawInServe.Echo(ctx, "echo", benchText) }},
		{"serve /servers/x/mcp", "single", both.pid, func() func() error { return single.Echo(ctx, "echo", benchText) }},
		{"serve /mcp (x__echo)", "agg", both.pid, func() func() error { return agg.Echo(ctx, "x__echo", benchText) }},
	}
	for _, p := range paths { // the server started, the sessions used
		if err := p.call()(); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	perCall := map[string][]float64{}
	for r := range rounds {
		for i := range paths {
			p := paths[i]
			if r%2 == 1 {
				p = paths[len(paths)-1-i]
			}
			var cpu0, used time.Duration
			st := loadtest.Run(context.Background(), loadtest.Options{Callers: benchCallers, Warmup: 150 * time.Millisecond, Measure: window,
				OnStart: func() { cpu0 = cpuTimeFine(p.pid) },
				OnStop:  func() { used = cpuTimeFine(p.pid) - cpu0 }},
				func(int) func() error { return p.call() })
			if st.Errors > 0 || st.Calls == 0 {
				t.Fatalf("%s, round %d: %d calls, %d errors, first %v", p.name, r+1, st.Calls, st.Errors, st.FirstErr)
			}
			perCall[p.short] = append(perCall[p.short], float64(used)/1e3/float64(st.Calls))
		}
	}
	say("CPU per call of the serving process, 16 callers, %d interleaved rounds of %v\n", rounds, window)
	for _, p := range paths {
		say("  %-34s %6.1f µs/call (mean of rounds)\n", p.name, mean(perCall[p.short]))
	}
	say("ratios, geometric mean of the rounds (95 %% CI):\n")
	for _, c := range []struct{ a, b, what string }{
		{"in", "alone", "the process's share: the same relay in serve's process"},
		{"single", "in", "/servers/x/mcp's per-call work"},
		{"agg", "in", "/mcp's per-call work"},
		{"single", "alone", "/servers/x/mcp as bench-gateway judges it"},
		{"agg", "alone", "/mcp as bench-gateway judges it"},
	} {
		xs := make([]float64, rounds)
		for i := range xs {
			xs[i] = perCall[c.a][i] / perCall[c.b][i]
		}
		m, res := ratioCI(xs)
		say("  %-6s / %-5s %.3f× (%.3f–%.3f) — %s\n", c.a, c.b, m, m/(1+res), m*(1+res), c.what)
	}
}

// mean is the arithmetic mean of xs.
func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// startSplitChild starts TestBenchSplitChild and returns it (its base, the
// serve address) and the raw relay's URL in it.
func startSplitChild(t *testing.T, exe string, env []string) (*benchProcess, string) {
	t.Helper()
	rawRe := regexp.MustCompile(`raw relay in serve's process at (http://[^ ]+/mcp)`)
	// The raw relay's address comes on a pipe of its own, the child's fd
	// 3, before serve reports its own on stderr (startBenchProcess).
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close() // (closed early below, once the child has its copy)
	cmd := exec.Command(exe, "-test.run=^TestBenchSplitChild$", "-test.count=1")
	cmd.ExtraFiles = []*os.File{pw} // fd 3 in the child
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := rawRe.FindStringSubmatch(sc.Text()); m != nil {
				got <- m[1]
				return
			}
		}
		close(got)
	}()
	p := startBenchProcess(t, cmd, env)
	pw.Close()
	select {
	case url, ok := <-got:
		if !ok {
			t.Fatal("the split child did not report its raw relay")
		}
		return p, url
	case <-time.After(20 * time.Second):
		t.Fatal("the split child did not report its raw relay within 20s")
	}
	return nil, ""
}

// TestBenchSplitChild is TestBenchRelaySplit's child: the raw relay in
// front of a fixture of its own on a port of its own (reported on fd 3),
// then mcpvisor serve with the arguments of its environment, in this one
// process, until SIGTERM.
func TestBenchSplitChild(t *testing.T) {
	v := os.Getenv(benchSplitChildEnv)
	if v == "" {
		t.Skip("helper process of TestBenchRelaySplit")
	}
	// fd 3 is the report pipe: not for the fixture, which would hold
	// its write end open for its life.
	syscall.CloseOnExec(3)
	p := startStdioProcess(t, exec.Command(os.Getenv(benchSplitFixtureEnv)), os.Environ())
	defer p.stop(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: loadtest.RawRelayHandler(p.conn), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	report := os.NewFile(3, "report")
	fmt.Fprintf(report, "raw relay in serve's process at http://%s/mcp\n", ln.Addr())
	report.Close()
	cmd := newRootCmd()
	cmd.SetOut(os.Stderr)
	cmd.SetErr(os.Stderr)
	cmd.SetArgs(strings.Split(v, "\n"))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
}
