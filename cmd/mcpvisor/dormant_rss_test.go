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

	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// dormantFleet is one measurement of TestDormantServerRSS: mcpvisor serve
// with n servers of 20 tools each, once all are learned and dormant.
type dormantFleet struct {
	n                 int
	learned, restart  memRead // learned in this run; after a restart, every list read from the store
	listedKB, listed2 float64 // after a client listed /mcp's tools (this run, restart); 0 if not listed
	listedIdle        float64 // this run, once the listed lists went unused for gateway.TableIdle; 0 if not waited for
	learnTook         time.Duration
}

// memRead is one settled reading of serve's memory, in kB: VmRSS (the
// figure judged), its anonymous part, and the Go heap's live objects.
type memRead struct{ rss, anon, heap float64 }

// measureDormant runs serve with n fixture servers (tools variant 4: 20
// tools each), waits until it has learned every one and put it back to
// sleep, and reads its memory; then restarts it on the same state
// directory, where every list is read back from the store and no server
// starts, and reads it again. With list, it also reads the memory after a
// client listed /mcp's tools, in each run; with idle too, in the run that
// learned them, once more after the aggregated lists went unused for
// gateway.TableIdle.
func measureDormant(t *testing.T, n int, list, idle bool) dormantFleet {
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
	out.learned = settledMemory(t, s)
	if list {
		listAggregate(t, s.base)
		time.Sleep(trimSettle) // the trim once the requests stop
		out.listedKB = settledMemory(t, s).rss
		if idle {
			time.Sleep(gateway.TableIdle + trimSettle) // the lists dropped, and the trim after
			out.listedIdle = settledMemory(t, s).rss
		}
	}
	stopServe(t, s)

	s = startServeFile(t, cfg, "", "--state-dir", state)
	waitAllDormant(t, s.base, n, time.Minute)
	time.Sleep(trimSettle)
	out.restart = settledMemory(t, s)
	if list {
		listAggregate(t, s.base)
		time.Sleep(trimSettle)
		out.listed2 = settledMemory(t, s).rss
	}
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

// settledMemory reads serve's VmRSS, RssAnon and live Go heap (kB) once
// the RSS has not moved by more than 1% over a second, or after 20 s.
func settledMemory(t *testing.T, s *started) memRead {
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
	return memRead{rss: float64(last), anon: float64(anon), heap: m["mcpvisor_go_heap_live_bytes"] / 1024}
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

// dormantRounds is how many times TestDormantServerRSS measures each
// fleet. The learned run's RSS moves by 1–1.5 KB per server between runs
// of the same code (where the runtime's spans, GC metadata and stacks
// happen to stand when learning ends), more than the margin it is judged
// on: the median of three rounds drops one outlier either way.
const dormantRounds = 3

// TestDormantServerRSS measures what a learned, dormant server costs
// mcpvisor serve in resident memory: serve's VmRSS with 1,000 servers of
// 20 tools each, all learned and dormant, minus serve's VmRSS with one, per
// server; in the run that learned them and after a restart that reads them
// from the store. In its first round it also reports, unjudged, what each
// server from n/2 to n adds (the marginal cost, without what any busy
// serve keeps). It measures both fleets in dormantRounds interleaved
// rounds and judges the median of the rounds' figures. Target ≤ 4 KiB per
// server. About 5 minutes: MCPVISOR_BENCH=1 runs it (make bench-dormant);
// MCPVISOR_DORMANT_N changes the number of servers; MCPVISOR_DORMANT_IDLE=1
// (make bench-dormant IDLE=1) also waits, in the first round, until the
// n-server fleet's aggregated lists listed once went unused for
// gateway.TableIdle, and reports its memory then (5 more minutes).
func TestDormantServerRSS(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to run the dormant-memory benchmark (make bench-dormant)")
	}
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("MCPVISOR_DORMANT_N")); err == nil && v > 1 {
		n = v
	}
	idle := os.Getenv("MCPVISOR_DORMANT_IDLE") != ""
	per := func(a, b float64) float64 { return (b - a) / float64(n-1) * 1024 }
	// Per round and per figure: RSS, RssAnon and heap, learned and after
	// a restart.
	var rss, anon, heap, rss2, anon2, heap2 []float64
	for r := range dormantRounds {
		list := r == 0 // what a listing costs: once is enough
		one := measureDormant(t, 1, list, false)
		many := measureDormant(t, n, list, list && idle)
		t.Logf("round %d: 1 server: learned %.0f kB RSS (anon %.0f kB, heap %.0f kB), after restart %.0f kB (anon %.0f kB, heap %.0f kB)", r+1,
			one.learned.rss, one.learned.anon, one.learned.heap, one.restart.rss, one.restart.anon, one.restart.heap)
		t.Logf("round %d: %d servers (learned in %v): learned %.0f kB RSS (anon %.0f kB, heap %.0f kB), after restart %.0f kB (anon %.0f kB, heap %.0f kB)", r+1, n, many.learnTook.Round(time.Second),
			many.learned.rss, many.learned.anon, many.learned.heap, many.restart.rss, many.restart.anon, many.restart.heap)
		rss, anon, heap = append(rss, per(one.learned.rss, many.learned.rss)), append(anon, per(one.learned.anon, many.learned.anon)), append(heap, per(one.learned.heap, many.learned.heap))
		rss2, anon2, heap2 = append(rss2, per(one.restart.rss, many.restart.rss)), append(anon2, per(one.restart.anon, many.restart.anon)), append(heap2, per(one.restart.heap, many.restart.heap))
		t.Logf("round %d: per dormant server: %.0f B RSS (%.0f B anon, %.0f B heap) learned in this run; %.0f B RSS (%.0f B anon, %.0f B heap) after a restart", r+1,
			rss[r], anon[r], heap[r], rss2[r], anon2[r], heap2[r])
		if list {
			t.Logf("round %d: after a client listed /mcp's tools: %.0f B RSS per server in this run, %.0f B after a restart", r+1, per(one.listedKB, many.listedKB), per(one.listed2, many.listed2))
		}
		if many.listedIdle > 0 {
			t.Logf("round %d: %d servers, once the lists listed went unused for %v: %.0f kB RSS (%.0f kB when listed, %.0f kB before), %.0f B per server against 1 server unlisted",
				r+1, n, gateway.TableIdle, many.listedIdle, many.listedKB, many.learned.rss, per(one.learned.rss, many.listedIdle))
		}
		if r == 0 && n >= 4 {
			// Reported, not judged: what each server beyond n/2 adds.
			// The figure judged (n minus one) also holds what a serve
			// that has run many servers keeps whatever their number —
			// the runtime's caches and metadata grown on the way, the
			// event log filling to its cap — which a one-server serve
			// never grew.
			half := measureDormant(t, n/2, false, false)
			m := func(a, b float64) float64 { return (b - a) / float64(n-n/2) * 1024 }
			t.Logf("round %d: each server from %d to %d adds %.0f B RSS (%.0f B anon, %.0f B heap) learned in this run; %.0f B RSS (%.0f B anon, %.0f B heap) after a restart", r+1, n/2, n,
				m(half.learned.rss, many.learned.rss), m(half.learned.anon, many.learned.anon), m(half.learned.heap, many.learned.heap),
				m(half.restart.rss, many.restart.rss), m(half.restart.anon, many.restart.anon), m(half.restart.heap, many.restart.heap))
		}
	}
	learned, restarted := median(rss), median(rss2)
	t.Logf("per dormant server, median of %d rounds: %.0f B RSS (%.0f B anon, %.0f B heap) learned in this run, rounds %s; %.0f B RSS (%.0f B anon, %.0f B heap) after a restart, rounds %s",
		dormantRounds, learned, median(anon), median(heap), roundsB(rss), restarted, median(anon2), median(heap2), roundsB(rss2))
	for what, v := range map[string]float64{"learned in this run": learned, "after a restart": restarted} {
		if v > 4096 {
			t.Errorf("%s: %.0f B RSS per dormant server (median of %d rounds), target ≤ 4096", what, v, dormantRounds)
		}
	}
}

// roundsB lists per-round figures in bytes: "4990/5120/4870".
func roundsB(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, "/")
}
