package mempolicy

import (
	"encoding/json"
	"log/slog"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
)

var trimSink []byte

// A trim after requests is worth it once they allocated trimWorth since
// the last one that was, and not again until they allocate as much more.
func TestTrimWorthIt(t *testing.T) {
	trimSink = make([]byte, 2*trimWorth)
	trimSink = nil
	tr := NewTrimmer(nil, slog.New(slog.DiscardHandler))
	if !tr.worthIt() {
		t.Fatalf("%d bytes allocated since the last trim are not worth one", 2*trimWorth)
	}
	if tr.worthIt() {
		t.Fatal("a second trim is worth it right after the first, with nothing allocated between")
	}
	trimSink = make([]byte, 2*trimWorth)
	trimSink = nil
	if !tr.worthIt() {
		t.Fatal("a trim after as much again is not worth it")
	}
}

// A trim frees what sync.Pools cache: here the buffer encoding/json's
// encoder grew to for a large reply, which a single collection would only
// move to its pool's victim cache, keeping its pages.
func TestTrimFreesWhatPoolsCache(t *testing.T) {
	live := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	tr := NewTrimmer(nil, slog.New(slog.DiscardHandler))
	tr.Trim(true)
	before := live()
	b, err := json.Marshal(make([]int, 4<<20)) // "0,0,…": the encoder's buffer grows past 8 MiB
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8<<20 {
		t.Fatalf("%d bytes of JSON", len(b))
	}
	b = nil
	tr.Trim(true)
	if after := live(); after > before+(4<<20) {
		t.Fatalf("after a trim %d bytes live, %d before the encoder's buffer grew: it was kept", after, before)
	}
}

// Trims called at once (the fleet's quiet timer and a dormancy) decide
// once per trimWorth allocated: one of them collects, not each.
func TestTrimWorthItOnceAcrossCallers(t *testing.T) {
	tr := NewTrimmer(nil, slog.New(slog.DiscardHandler))
	tr.worthIt() // the allocations before this test are counted
	for round := range 20 {
		trimSink = make([]byte, 2*trimWorth)
		trimSink = nil
		var yes atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				<-start
				if tr.worthIt() {
					yes.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := yes.Load(); n != 1 {
			t.Fatalf("round %d: %d of 8 concurrent callers were told a trim is worth it, want 1", round, n)
		}
	}
}
