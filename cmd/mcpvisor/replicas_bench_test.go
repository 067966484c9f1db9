package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver/haproxy"
)

// The cost of forwarding (make bench-replicas; a few minutes): CPU per
// legacy call, summed over the three replica processes, when its
// session lives on another replica than the one it reached (one hop)
// against one that lives where it landed, in interleaved rounds; their
// latencies; and 2026-07-28 calls a second of one replica against
// three behind haproxy.

const benchReplicasEnv = "MCPVISOR_BENCH_REPLICAS"

// legacyCaller is a client of one legacy session over raw HTTP.
type legacyCaller struct {
	c   *http.Client
	url string // where its calls go
	sid string
}

func newLegacyCaller(t *testing.T, initURL, callURL string) *legacyCaller {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	req, _ := http.NewRequest("POST", initURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	lc := &legacyCaller{c: c, url: callURL, sid: resp.Header.Get("Mcp-Session-Id")}
	if lc.sid == "" {
		t.Fatalf("initialize at %s: %s, no session", initURL, resp.Status)
	}
	lc.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return lc
}

func (lc *legacyCaller) post(body string) (int, []byte) {
	req, _ := http.NewRequest("POST", lc.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", lc.sid)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := lc.c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// treeCPU is the user and system CPU of the live processes in the tree
// of each of pids: a replica and what it runs (its servers and their
// shims), as /proc reads now.
func treeCPU(pids ...int) time.Duration {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	cpu := map[int]time.Duration{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndex(string(b), ") ")
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b)[i+2:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		parent[pid], cpu[pid] = ppid, time.Duration(u+st)*10*time.Millisecond
	}
	roots := map[int]bool{}
	for _, p := range pids {
		roots[p] = true
	}
	var sum time.Duration
	for pid, c := range cpu {
		for p, n := pid, 0; p > 1 && n < 64; p, n = parent[p], n+1 {
			if roots[p] {
				sum += c
				break
			}
		}
	}
	return sum
}

// cpuOf is the CPU of d's replicas: their processes alone, and their
// process trees (each replica with the servers it runs).
func cpuOf(d *deployment) (own, tree time.Duration) {
	var pids []int
	for _, r := range d.reps {
		if r != nil {
			own += processCPU(r.cmd.Process.Pid)
			pids = append(pids, r.cmd.Process.Pid)
		}
	}
	return own, treeCPU(pids...)
}

// round makes n calls over callers (concurrently, one goroutine each) and
// returns the replicas' CPU over it (their processes; their trees) and
// each call's latency.
func round(t *testing.T, d *deployment, callers []*legacyCaller, n int) (time.Duration, time.Duration, []time.Duration) {
	t.Helper()
	per := n / len(callers)
	lat := make([][]time.Duration, len(callers))
	own0, tree0 := cpuOf(d)
	var wg sync.WaitGroup
	for i, lc := range callers {
		wg.Go(func() {
			for k := range per {
				start := time.Now()
				st, b := lc.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fx__echo","arguments":{"text":"hi"}}}`, k+2))
				lat[i] = append(lat[i], time.Since(start))
				if st != 200 || !bytes.Contains(b, []byte(`"result"`)) {
					t.Errorf("call: %d %s", st, b)
					return
				}
			}
		})
	}
	wg.Wait()
	own1, tree1 := cpuOf(d)
	return own1 - own0, tree1 - tree0, slices.Concat(lat...)
}

func pct(xs []time.Duration, p float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func TestBenchReplicas(t *testing.T) {
	if os.Getenv(benchReplicasEnv) == "" {
		t.Skip("a benchmark: make bench-replicas")
	}
	// The default config; with MCPVISOR_BENCH_GOVERNED set, an audit and
	// rate limits too: a forwarded call then asks the replica it reached
	// to admit it, and hands it its audit line (make bench-replicas
	// GOVERNED=1).
	top, config := "", "the default config"
	if os.Getenv("MCPVISOR_BENCH_GOVERNED") == "1" {
		top = `"audit": {"arguments": "digest"}, "rateLimits": {"perIdentity": {"perSecond": 1000000, "burst": 1000000}},`
		config = "an audit and rate limits"
	}
	d := newDeploymentTop(t, 3, 3, top, "", "memo", "")
	const callers, perRound, rounds = 8, 4000, 12
	var local, forwarded []*legacyCaller
	for range callers {
		// Both kinds reach replica 0: the local sessions live there,
		// the forwarded ones on replica 1.
		local = append(local, newLegacyCaller(t, "http://"+d.main[0]+"/mcp", "http://"+d.main[0]+"/mcp"))
		forwarded = append(forwarded, newLegacyCaller(t, "http://"+d.main[1]+"/mcp", "http://"+d.main[0]+"/mcp"))
	}
	round(t, d, local, perRound) // warm both paths
	round(t, d, forwarded, perRound)
	var ratios, treeRatios []float64
	var latL, latF []time.Duration
	var cpuL, cpuF, treeL, treeF time.Duration
	for r := range rounds {
		var cl, cf, tl, tf time.Duration
		var ll, lf []time.Duration
		if r%2 == 0 {
			cl, tl, ll = round(t, d, local, perRound)
			cf, tf, lf = round(t, d, forwarded, perRound)
		} else {
			cf, tf, lf = round(t, d, forwarded, perRound)
			cl, tl, ll = round(t, d, local, perRound)
		}
		cpuL, cpuF, treeL, treeF = cpuL+cl, cpuF+cf, treeL+tl, treeF+tf
		latL, latF = append(latL, ll...), append(latF, lf...)
		ratios = append(ratios, float64(cf)/float64(cl))
		treeRatios = append(treeRatios, float64(tf)/float64(tl))
	}
	mean, res := ratioCI(ratios)
	tmean, tres := ratioCI(treeRatios)
	n := time.Duration(rounds * perRound)
	report := &strings.Builder{}
	fmt.Fprintf(report, "CPU per legacy call, summed over the 3 replicas (%s; %d rounds of %d calls, %d callers, interleaved; goal ≤ 1.3×):\n", config, rounds, perRound, callers)
	fmt.Fprintf(report, "  each replica with its servers: served where it landed %v/call, forwarded one hop %v/call: forwarded/local = %.2f× (95%% CI ×/÷ %.3f)\n",
		(treeL / n).Round(100*time.Nanosecond), (treeF / n).Round(100*time.Nanosecond), tmean, 1+tres)
	fmt.Fprintf(report, "  the replica processes alone:  served where it landed %v/call, forwarded one hop %v/call: forwarded/local = %.2f× (95%% CI ×/÷ %.3f)\n",
		(cpuL / n).Round(100*time.Nanosecond), (cpuF / n).Round(100*time.Nanosecond), mean, 1+res)
	// The floor: a hop is at least one round trip between two
	// processes.
	ftcp, ftls, flink := floor(t, callers, perRound/callers*2)
	perCall := cpuL / n
	fmt.Fprintf(report, "  floor, one round trip of %d bytes between two processes (CPU of both): TCP %v, TLS 1.3 %v, a link (TLS, frames, an http.Handler) %v\n",
		floorMsg, ftcp.Round(100*time.Nanosecond), ftls.Round(100*time.Nanosecond), flink.Round(100*time.Nanosecond))
	fmt.Fprintf(report, "  so forwarded/local is at least %.2f× (replicas alone) and %.2f× (with their servers) for any hop over TCP; %.2f× and %.2f× over TLS\n",
		float64(perCall+ftcp)/float64(perCall), float64(treeL/n+ftcp)/float64(treeL/n), float64(perCall+ftls)/float64(perCall), float64(treeL/n+ftls)/float64(treeL/n))
	fmt.Fprintf(report, "  latency served where it landed: p50 %v p99 %v;  forwarded: p50 %v p99 %v\n",
		pct(latL, 0.5).Round(time.Microsecond), pct(latL, 0.99).Round(time.Microsecond), pct(latF, 0.5).Round(time.Microsecond), pct(latF, 0.99).Round(time.Microsecond))

	// 2026-07-28 calls a second, one replica against three behind
	// haproxy: on 2 cores the three share the same CPU, so only the
	// ratio of CPU per call says anything of the cost of three.
	one := haproxy.Start(t, d.main[:1])
	const dur, conc = 4 * time.Second, 8
	for _, c := range []struct {
		name string
		lb   *haproxy.LB
	}{{"one replica", one}, {"three replicas", d.lb}} {
		calls, cpu := modernRate(t, d, c.lb.URL()+"/mcp", conc, dur)
		fmt.Fprintf(report, "  2026-07-28 through haproxy, %s: %.0f calls/s, %v CPU/call over the replicas\n", c.name, float64(calls)/dur.Seconds(), (cpu / time.Duration(max(calls, 1))).Round(100*time.Nanosecond))
	}
	t.Log("\n" + report.String())
	if out := os.Getenv("MCPVISOR_BENCH_OUT"); out != "" {
		_ = os.MkdirAll(out, 0o755)
		_ = os.WriteFile(out+"/replicas-report.txt", []byte(report.String()), 0o644)
	}
}

// modernRate is how many 2026-07-28 calls conc callers make through url
// in dur, and the replicas' CPU meanwhile.
func modernRate(t *testing.T, d *deployment, url string, conc int, dur time.Duration) (int, time.Duration) {
	cpu := func() (sum time.Duration) {
		for _, r := range d.reps {
			sum += processCPU(r.cmd.Process.Pid)
		}
		return sum
	}
	var mu sync.Mutex
	calls := 0
	before := cpu()
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
			for time.Now().Before(deadline) {
				body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fx__echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
				req, _ := http.NewRequest("POST", url, strings.NewReader(body))
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("MCP-Protocol-Version", "2026-07-28")
				req.Header.Set("Mcp-Method", "tools/call")
				req.Header.Set("Mcp-Name", "fx__echo")
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("modern call: %s", resp.Status)
					return
				}
				mu.Lock()
				calls++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return calls, cpu() - before
}
