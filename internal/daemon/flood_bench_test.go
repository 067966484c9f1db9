package daemon

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
)

// BenchmarkFloodIsolation: one identity floods serve with calls while
// another makes calls at a steady pace; the flood gets 429, and the
// other identity's latency is compared with its own in the quiet phases
// interleaved with the flooded ones, in the same run (make bench-flood).
// Reported: the flood's calls and how many got 429, the other
// identity's p50 and p99 quiet and flooded, and their ratios.
func BenchmarkFloodIsolation(b *testing.B) {
	iss := authntest.Start(b, authntest.Options{})
	addr := teamServeWith(b, iss, `
	  "rateLimits": {"perIdentity": {"perSecond": 200, "burst": 200}},`)
	base := "http://" + addr
	alice := userToken(b, iss, "alice")
	bob := userToken(b, iss, "bob")
	call := func(tok string) int {
		r, _ := postCallTB(b, base, tok, "x__echo", `{"text":"hi"}`)
		return r.status
	}
	for range 20 { // warm: the server started, the tokens verified
		call(bob)
	}
	const phases, perPhase, floodRate = 6, 150, 4000
	var quiet, flooded []time.Duration
	var floodCalls, flood429, bob429 atomic.Int64
	var floodTime time.Duration
	b.ResetTimer()
	for p := range phases {
		stop := make(chan struct{})
		phaseStart := time.Now()
		var wg sync.WaitGroup
		if p%2 == 1 {
			// The flood: 20 times alice's limit, from 4 connections at
			// once — as much as a client far from serve sends, not as
			// much as this machine's cores can make (the client shares
			// them with serve here).
			tick := time.NewTicker(time.Second / floodRate)
			defer tick.Stop()
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						floodCalls.Add(1)
						if call(alice) == http.StatusTooManyRequests {
							flood429.Add(1)
						}
					}
				})
			}
			time.Sleep(100 * time.Millisecond) // the flood under way
		}
		for range perPhase {
			start := time.Now()
			if call(bob) == http.StatusTooManyRequests {
				bob429.Add(1)
			}
			d := time.Since(start)
			if p%2 == 1 {
				flooded = append(flooded, d)
			} else {
				quiet = append(quiet, d)
			}
			time.Sleep(10 * time.Millisecond) // bob's steady pace, under his limit
		}
		close(stop)
		wg.Wait()
		if p%2 == 1 {
			floodTime += time.Since(phaseStart)
		}
	}
	b.StopTimer()
	pct := func(v []time.Duration, q float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return float64(v[int(q*float64(len(v)-1))].Microseconds())
	}
	b.ReportMetric(float64(floodCalls.Load()), "flood-calls")
	b.ReportMetric(float64(floodCalls.Load())/floodTime.Seconds(), "flood-calls/s")
	b.ReportMetric(float64(flood429.Load()), "flood-429")
	b.ReportMetric(float64(bob429.Load()), "other-429")
	b.ReportMetric(pct(quiet, 0.5), "quiet-p50-us")
	b.ReportMetric(pct(quiet, 0.99), "quiet-p99-us")
	b.ReportMetric(pct(flooded, 0.5), "flooded-p50-us")
	b.ReportMetric(pct(flooded, 0.99), "flooded-p99-us")
	b.ReportMetric(pct(flooded, 0.5)/pct(quiet, 0.5), "p50-ratio")
	b.ReportMetric(pct(flooded, 0.99)/pct(quiet, 0.99), "p99-ratio")
}
