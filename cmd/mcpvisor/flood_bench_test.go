package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// floodEnv makes the test binary a flooding client (runFlood): "URL
// TOKEN RATE CONNS".
const floodEnv = "MCPVISOR_TEST_FLOOD"

const floodPublic = "https://mcp.example.test"

// processCPU is the user and system CPU time pid has used, from
// /proc/PID/stat; 0 where there is no /proc.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th of them, in clock ticks (100 a second on
	// every Linux this runs on).
	i := strings.LastIndex(string(b), ") ")
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// floodCall posts one 2026-07-28 call of x__echo with tok and returns its
// status.
func floodCall(c *http.Client, url, tok string) int {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x__echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "x__echo")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// runFlood is the test binary as a flooding client of another process:
// RATE calls a second from CONNS connections until its stdin closes, then
// it prints how many calls it made and how many got 429.
func runFlood() int {
	f := strings.Fields(os.Getenv(floodEnv))
	if len(f) != 4 {
		return 2
	}
	rate, _ := strconv.Atoi(f[2])
	conns, _ := strconv.Atoi(f[3])
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var calls, limited atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				calls.Add(1)
				if floodCall(c, f[0], f[1]) == http.StatusTooManyRequests {
					limited.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Println(calls.Load(), limited.Load())
	return 0
}

// BenchmarkFloodIsolation: serve as its own process; one identity floods
// it at 20 times its rate limit from another process (so that neither
// the flood's CPU-bound client nor its garbage collection runs in the
// measuring one), while another identity calls at a steady pace from
// this one. The flood gets 429; the other's p50 and p99 are compared
// with its own in the quiet phases interleaved with the flooded ones, in
// the same run. make bench-flood runs it.
//
// It reports serve's CPU (user + system, from /proc; 0 where there is
// none) per second of each kind of phase, to show that the flood loads
// the process the steady caller shares. Expect the flooded figures at or
// below the quiet ones on a machine with cores to spare: between the
// steady caller's calls 10 ms apart, a quiet serve parks its threads and
// the cores idle, and each call pays their wake-up; the flood keeps them
// running.
func BenchmarkFloodIsolation(b *testing.B) {
	iss := authntest.Start(b, authntest.Options{})
	fixture := testserver.Build(b)
	s := startServe(b, `{"auth": {"issuer": "`+iss.URL+`", "publicUrl": "`+floodPublic+`", "scopes": ["mcp"]},
	  "rateLimits": {"perIdentity": {"perSecond": 200, "burst": 200}},
	  "mcpServers": {"x": {"command": "`+fixture+`"}}}`)
	url := s.base + "/mcp"
	alice := iss.Mint(b, iss.Claims("alice", floodPublic+"/mcp"), authntest.MintOptions{})
	bob := iss.Mint(b, iss.Claims("bob", floodPublic+"/mcp"), authntest.MintOptions{})
	client := &http.Client{}
	for range 20 { // warm: the server started, the tokens verified
		floodCall(client, url, bob)
	}
	const phases, perPhase, floodRate, floodConns = 8, 150, 4000, 4
	var quiet, flooded []time.Duration
	var floodCalls, flood429, bob429 int64
	var floodTime, quietTime time.Duration
	var floodCPU, quietCPU time.Duration
	pid := s.cmd.Process.Pid
	b.ResetTimer()
	for p := range phases {
		var cmd *exec.Cmd
		var stdin io.WriteCloser
		var out *bufio.Reader
		start, cpu0 := time.Now(), processCPU(pid)
		if p%2 == 1 {
			cmd = exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), floodEnv+"="+fmt.Sprintf("%s %s %d %d", url, alice, floodRate, floodConns))
			stdin, _ = cmd.StdinPipe()
			o, _ := cmd.StdoutPipe()
			out = bufio.NewReader(o)
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the flood under way
		}
		for range perPhase {
			t0 := time.Now()
			if floodCall(client, url, bob) == http.StatusTooManyRequests {
				bob429++
			}
			d := time.Since(t0)
			if p%2 == 1 {
				flooded = append(flooded, d)
			} else {
				quiet = append(quiet, d)
			}
			time.Sleep(10 * time.Millisecond) // bob's steady pace, under his limit
		}
		if cmd == nil {
			quietTime += time.Since(start)
			quietCPU += processCPU(pid) - cpu0
		} else {
			floodCPU += processCPU(pid) - cpu0
			stdin.Close()
			line, _ := out.ReadString('\n')
			_ = cmd.Wait()
			floodTime += time.Since(start)
			var n, l int64
			fmt.Sscan(line, &n, &l)
			floodCalls += n
			flood429 += l
		}
	}
	b.StopTimer()
	pct := func(v []time.Duration, q float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return float64(v[int(q*float64(len(v)-1))].Microseconds())
	}
	b.ReportMetric(float64(floodCalls)/floodTime.Seconds(), "flood-calls/s")
	b.ReportMetric(100*floodCPU.Seconds()/floodTime.Seconds(), "serve-cpu%-flooded")
	b.ReportMetric(100*quietCPU.Seconds()/quietTime.Seconds(), "serve-cpu%-quiet")
	b.ReportMetric(float64(flood429)/float64(max(floodCalls, 1)), "flood-429-share")
	b.ReportMetric(float64(bob429), "other-429")
	b.ReportMetric(pct(quiet, 0.5), "quiet-p50-us")
	b.ReportMetric(pct(quiet, 0.99), "quiet-p99-us")
	b.ReportMetric(pct(flooded, 0.5), "flooded-p50-us")
	b.ReportMetric(pct(flooded, 0.99), "flooded-p99-us")
	b.ReportMetric(pct(flooded, 0.5)/pct(quiet, 0.5), "p50-ratio")
	b.ReportMetric(pct(flooded, 0.99)/pct(quiet, 0.99), "p99-ratio")
}
