package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
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

// round makes n calls over callers (concurrently, one goroutine each) and
// returns the replicas' CPU over it and each call's latency.
func round(t *testing.T, d *deployment, callers []*legacyCaller, n int) (time.Duration, []time.Duration) {
	t.Helper()
	cpu := func() (sum time.Duration) {
		for _, r := range d.reps {
			if r != nil {
				sum += processCPU(r.cmd.Process.Pid)
			}
		}
		return sum
	}
	per := n / len(callers)
	lat := make([][]time.Duration, len(callers))
	before := cpu()
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
	return cpu() - before, slices.Concat(lat...)
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
	d := newDeployment(t, 3, 3, "")
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
	var ratios []float64
	var latL, latF []time.Duration
	var cpuL, cpuF time.Duration
	for r := range rounds {
		var cl, cf time.Duration
		var ll, lf []time.Duration
		if r%2 == 0 {
			cl, ll = round(t, d, local, perRound)
			cf, lf = round(t, d, forwarded, perRound)
		} else {
			cf, lf = round(t, d, forwarded, perRound)
			cl, ll = round(t, d, local, perRound)
		}
		cpuL += cl
		cpuF += cf
		latL, latF = append(latL, ll...), append(latF, lf...)
		ratios = append(ratios, float64(cf)/float64(cl))
	}
	mean, res := ratioCI(ratios)
	n := time.Duration(rounds * perRound)
	report := &strings.Builder{}
	fmt.Fprintf(report, "CPU per legacy call, summed over the 3 replicas (%d rounds of %d calls, %d callers, interleaved):\n", rounds, perRound, callers)
	fmt.Fprintf(report, "  served where it landed: %v/call   forwarded one hop: %v/call   forwarded/local = %.2f× (95%% CI ×/÷ %.3f; goal ≤ 1.3×)\n",
		(cpuL / n).Round(100*time.Nanosecond), (cpuF / n).Round(100*time.Nanosecond), mean, 1+res)
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
