package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// dormantFleet is one measurement of TestDormantServerRSS: mcpvisor serve
// with n servers of 20 tools each, once all are learned and dormant.
type dormantFleet struct {
	n                 int
	rssKB, heapKB     float64 // learned in this run: VmRSS, Go heap objects
	rssKB2, heapKB2   float64 // after a restart, every list read from the store
	listedKB, listed2 float64 // after a client listed /mcp's tools (this run, restart)
	learnTook         time.Duration
}

// measureDormant runs serve with n fixture servers (tools variant 4: 20
// tools each), waits until it has learned every one and put it back to
// sleep, and reads its memory; then restarts it on the same state
// directory, where every list is read back from the store and no server
// starts, and reads it again.
func measureDormant(t *testing.T, n int) dormantFleet {
	t.Helper()
	fixture := testserver.Build(t)
	dir := t.TempDir()
	var sb strings.Builder
	sb.WriteString(`{"mcpServers":{`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"s%04d":{"command":%q,"args":["-tools-variant","4"],"idleTimeout":"10m"}`, i, fixture)
	}
	sb.WriteString(`}}`)
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	out := dormantFleet{n: n}

	s := startServeFile(t, cfg, "", "--state-dir", state)
	start := time.Now()
	waitAllDormant(t, s.base, n, 2*time.Minute)
	out.learnTook = time.Since(start)
	time.Sleep(trimSettle)
	out.rssKB, out.heapKB = settledMemory(t, s)
	listAggregate(t, s.base)
	time.Sleep(trimSettle) // the trim once the requests stop
	out.listedKB, _ = settledMemory(t, s)
	stopServe(t, s)

	s = startServeFile(t, cfg, "", "--state-dir", state)
	waitAllDormant(t, s.base, n, time.Minute)
	time.Sleep(trimSettle)
	out.rssKB2, out.heapKB2 = settledMemory(t, s)
	listAggregate(t, s.base)
	time.Sleep(trimSettle)
	out.listed2, _ = settledMemory(t, s)
	stopServe(t, s)
	return out
}

// trimSettle is how long mcpvisor takes at most to give memory back once
// servers went dormant (fleet's trimQuiet and trimEvery): the memory read
// is the memory it keeps, not what it had yet to return.
const trimSettle = 12 * time.Second

// waitAllDormant waits until every one of n servers has its lists learned
// and is dormant or never started.
func waitAllDormant(t *testing.T, base string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		all := servers(t, base)
		ok := 0
		var other []string
		for _, st := range all {
			if st.Learned && (st.State == "dormant" || st.State == "new") {
				ok++
			} else if len(other) < 5 {
				other = append(other, fmt.Sprintf("%s %s learned=%v %s", st.Name, st.State, st.Learned, st.LastError))
			}
		}
		if ok == n && len(all) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d servers learned and dormant after %v; others: %s", ok, n, limit, strings.Join(other, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settledMemory reads serve's VmRSS and live Go heap (kB) once the RSS
// has not moved by more than 1% over a second, or after 20 s.
func settledMemory(t *testing.T, s *started) (rss, heap float64) {
	t.Helper()
	pid := s.cmd.Process.Pid
	last := vmRSS(pid)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		now := vmRSS(pid)
		if d := now - last; d < last/100 && -d < last/100 {
			last = now
			break
		}
		last = now
	}
	anon, file := procStatusKB(pid, "RssAnon"), procStatusKB(pid, "RssFile")
	m := scrape(t, s.base)
	t.Logf("serve: VmRSS %d kB (RssAnon %d kB, RssFile %d kB), Go heap live %.0f kB", last, anon, file, m["mcpvisor_go_heap_live_bytes"]/1024)
	return float64(last), m["mcpvisor_go_heap_live_bytes"] / 1024
}

// listAggregate lists /mcp's tools as a client would.
func listAggregate(t *testing.T, base string) {
	t.Helper()
	cs := connectHTTP(t, base+"/mcp", nil)
	defer cs.Close()
	n := 0
	for _, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("/mcp listed no tools")
	}
}

// stopServe ends serve with SIGTERM and waits for it.
func stopServe(t *testing.T, s *started) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.waited:
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop within 60 s of SIGTERM")
	}
}

// TestDormantServerRSS measures what a learned, dormant server costs
// mcpvisor serve in resident memory: serve's VmRSS with 1,000 servers of
// 20 tools each, all learned and dormant, minus serve's VmRSS with one, per
// server; in the run that learned them and after a restart that reads them
// from the store. Target ≤ 4 KiB per server. About 80 s: MCPVISOR_BENCH=1
// runs it (make bench-dormant); MCPVISOR_DORMANT_N changes the number of
// servers.
func TestDormantServerRSS(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to run the dormant-memory benchmark (make bench-dormant)")
	}
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("MCPVISOR_DORMANT_N")); err == nil && v > 1 {
		n = v
	}
	one := measureDormant(t, 1)
	many := measureDormant(t, n)
	per := func(a, b float64) float64 { return (b - a) / float64(n-1) * 1024 }
	t.Logf("1 server: learned %.0f kB RSS (heap %.0f kB), after restart %.0f kB (heap %.0f kB)", one.rssKB, one.heapKB, one.rssKB2, one.heapKB2)
	t.Logf("%d servers (learned in %v): learned %.0f kB RSS (heap %.0f kB), after restart %.0f kB (heap %.0f kB)", n, many.learnTook.Round(time.Second), many.rssKB, many.heapKB, many.rssKB2, many.heapKB2)
	learned, restarted := per(one.rssKB, many.rssKB), per(one.rssKB2, many.rssKB2)
	t.Logf("per dormant server: %.0f B RSS (%.0f B heap) learned in this run; %.0f B RSS (%.0f B heap) after a restart", learned, per(one.heapKB, many.heapKB), restarted, per(one.heapKB2, many.heapKB2))
	t.Logf("after a client listed /mcp's tools: %.0f B RSS per server in this run, %.0f B after a restart", per(one.listedKB, many.listedKB), per(one.listed2, many.listed2))
	for what, v := range map[string]float64{"learned in this run": learned, "after a restart": restarted} {
		if v > 4096 {
			t.Errorf("%s: %.0f B RSS per dormant server, target ≤ 4096", what, v)
		}
	}
}
