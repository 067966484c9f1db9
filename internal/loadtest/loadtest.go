// Package loadtest is the load client of mcpvisor's gateway benchmark: a
// fixed number of callers issuing tools/call in a loop against an MCP
// server, over raw JSON-RPC on Streamable HTTP (one shared http.Client) or
// on one stdio connection (callers multiplexed through an id → channel
// pending table). It uses no MCP SDK, so its own cost stays small and the
// same for every path it measures.
package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options of one measurement.
type Options struct {
	Callers int           // concurrent callers (default 1)
	Warmup  time.Duration // calls before the window are not counted
	Measure time.Duration // length of the measured window

	// OnStart and OnStop, if set, run when the measured window opens and
	// closes (to sample CPU time, start a profile...).
	OnStart, OnStop func()
}

// Stats are the calls started inside the measured window.
type Stats struct {
	Calls    int
	Errors   int
	FirstErr error
	Window   time.Duration
	Latency  []time.Duration // of the successful calls, sorted
}

// Rate is successful calls per second.
func (s Stats) Rate() float64 {
	if s.Window <= 0 {
		return 0
	}
	return float64(s.Calls) / s.Window.Seconds()
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of the
// latencies, or 0 with none.
func (s Stats) Percentile(p float64) time.Duration {
	n := len(s.Latency)
	if n == 0 {
		return 0
	}
	i := int(float64(n)*p/100+0.999999) - 1
	return s.Latency[min(max(i, 0), n-1)]
}

// Run runs o.Callers goroutines; worker w calls the function newCaller(w)
// returned, in a loop, until the window closes. Calls started during the
// warm-up are not counted; calls started in the window are, even if they
// end after it. A caller whose calls keep failing stops after 100 errors.
func Run(ctx context.Context, o Options, newCaller func(worker int) func() error) Stats {
	callers := max(o.Callers, 1)
	const (
		warm = iota
		measuring
		done
	)
	var phase atomic.Int32
	type result struct {
		lat      []time.Duration
		errs     int
		firstErr error
	}
	results := make([]result, callers)
	var wg sync.WaitGroup
	for w := range callers {
		call := newCaller(w)
		wg.Go(func() {
			r := &results[w]
			r.lat = make([]time.Duration, 0, 1<<14)
			for r.errs < 100 {
				p := phase.Load()
				if p == done {
					return
				}
				t0 := time.Now()
				err := call()
				d := time.Since(t0)
				if err != nil {
					if r.firstErr == nil {
						r.firstErr = err
					}
					r.errs++
					time.Sleep(time.Millisecond)
					continue
				}
				if p == measuring {
					r.lat = append(r.lat, d)
				}
			}
		})
	}
	sleep(ctx, o.Warmup)
	if o.OnStart != nil {
		o.OnStart()
	}
	start := time.Now()
	phase.Store(measuring)
	sleep(ctx, o.Measure)
	phase.Store(done)
	window := time.Since(start)
	if o.OnStop != nil {
		o.OnStop()
	}
	wg.Wait()

	s := Stats{Window: window}
	for _, r := range results {
		s.Latency = append(s.Latency, r.lat...)
		s.Errors += r.errs
		if s.FirstErr == nil {
			s.FirstErr = r.firstErr
		}
	}
	s.Calls = len(s.Latency)
	slices.Sort(s.Latency)
	return s
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// AppendCall appends a tools/call request for tool with arguments
// {"text": text} and the given id (no newline). text must need no JSON
// escaping.
func AppendCall(dst []byte, id int64, tool, text string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"method":"tools/call","params":{"name":"`...)
	dst = append(dst, tool...)
	dst = append(dst, `","arguments":{"text":"`...)
	dst = append(dst, text...)
	return append(dst, `"}}}`...)
}

// AppendModernCall is AppendCall at MCP 2026-07-28: the params carry the
// request's _meta.
func AppendModernCall(dst []byte, id int64, tool, text string) []byte {
	dst = AppendCall(dst, id, tool, text)
	dst = dst[:len(dst)-2] // the params' and the message's closing braces
	return append(dst, `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`...)
}

// EchoWant is what CheckEcho looks for in the echo of text.
func EchoWant(text string) []byte { return []byte(`"text":"` + text + `"`) }

// CheckEcho reports whether reply (a JSON-RPC response, bare or inside an
// SSE event) is a successful result carrying want (from EchoWant). It looks
// at bytes only, so that checking costs the client next to nothing.
func CheckEcho(reply, want []byte) error {
	if !bytes.Contains(reply, []byte(`"result"`)) || !bytes.Contains(reply, want) || bytes.Contains(reply, []byte(`"isError":true`)) {
		return fmt.Errorf("not a result with %s: %.200s", want, reply)
	}
	return nil
}
