package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// The session-memory benchmark: what one open client session costs
// mcpvisor serve in resident memory, against a baseline revision in the
// same run. In each round, for each binary (the order alternating), a
// fresh mcpvisor serve with the default config and one fixture server
// gets one session that calls the fixture (warm: the server runs, every
// code path touched once); then the default maxSessions less one more
// sessions are opened by initialize and notifications/initialized, as a
// client that opens one and uses it later would; the VmRSS grown, divided
// by their number, is the cost of a session. Each VmRSS is read once
// serve has trimmed its memory after the last request (settle: the
// fleet's trim comes at most trimEvery after the one before, trimQuiet
// after the last request), so that garbage not yet collected is not
// counted. `make bench-sessions BASE=REV` runs it; plain `go test` skips
// it.
//
// Environment: MCPVISOR_BENCH_SESSIONS=1 enables it; MCPVISOR_BENCH_BASE
// (a git revision) is the baseline, required; MCPVISOR_BENCH_ROUNDS
// (default 3) the rounds; MCPVISOR_BENCH_OUT where the report
// (sessions-report.txt) goes.
func TestBenchSessionRSS(t *testing.T) {
	if os.Getenv("MCPVISOR_BENCH_SESSIONS") == "" {
		t.Skip("set MCPVISOR_BENCH_SESSIONS=1 to run the session-memory benchmark (make bench-sessions BASE=REV)")
	}
	rev := os.Getenv(benchBaseEnv)
	if rev == "" {
		t.Fatalf("%s: the baseline revision is required", benchBaseEnv)
	}
	rounds := benchRounds(t, 3)
	const settle = 13 * time.Second
	report := newBenchReport(t, "sessions-report.txt")
	say := report.say
	dir := t.TempDir()
	bin, fixture := benchBinaries(t, dir)
	baseBin, commit, _ := benchBaseBinaries(t, dir, rev)
	cfg, env := benchFixtureConfig(t, dir, fixture, ``)
	const sessions = 999 // with the warm one, the default maxSessions
	say("session memory: mcpvisor serve, default config, 1 fixture server; %d sessions opened (initialize, notifications/initialized) after a warm one; %d rounds, %d CPUs\n",
		sessions, rounds, runtime.NumCPU())
	say("baseline: %s (%s)\n\n", rev, commit)
	per := map[string][]float64{}
	interleaved(rounds, bin, baseBin, func(round int, which, b string) {
		p := startBenchProcess(t, exec.Command(b, "serve", "--config", cfg, "--listen", "127.0.0.1:0",
			"--state-dir", filepath.Join(dir, fmt.Sprintf("state-%s-%d", which, round)), "--log-level", "warn", "--socket", "none"), env)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		warm := benchInitialize(t, client, p.base+"/mcp")
		benchPost(t, client, p.base+"/mcp", warm, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"warm"}}}`)
		time.Sleep(settle)
		before := vmRSS(p.pid)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < sessions; i += 4 {
					sid := benchInitialize(t, client, p.base+"/mcp")
					benchPost(t, client, p.base+"/mcp", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				}
			})
		}
		wg.Wait()
		time.Sleep(settle)
		after := vmRSS(p.pid)
		bytes := float64(after-before) * 1024 / sessions
		per[which] = append(per[which], bytes)
		say("round %d %-4s: VmRSS %s → %s: %6.0f B per session\n", round, which, kb(before), kb(after), bytes)
		client.CloseIdleConnections()
		p.stop(t)
	})
	now, base := median(per["now"]), median(per["base"])
	say("\nper session (median over rounds): now %.0f B, base %.0f B: %+.0f B, %.2f×; target ≤ 2.5 KB\n", now, base, now-base, now/base)
	report.save(t)
}

// benchInitialize opens a session at url and returns its id.
func benchInitialize(t *testing.T, client *http.Client, url string) string {
	resp, _ := postMCP(t, client, url, "", mcpInitialize)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Errorf("initialize: HTTP %d", resp.StatusCode)
	}
	return sid
}

// benchPost sends body in session sid and checks it was taken.
func benchPost(t *testing.T, client *http.Client, url, sid, body string) {
	if resp, _ := postMCP(t, client, url, sid, body); resp.StatusCode >= 300 {
		t.Errorf("%s: HTTP %d", body, resp.StatusCode)
	}
}
