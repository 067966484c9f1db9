package logbuf

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

func liveHeapR() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// a busy buffer's one slice grows by append's doubling while
// the discarded room is smaller than what is kept, and never shrinks: a
// chatty server (dormant since, too) keeps about twice its byte bound.
func TestBusyBufferHoldsAboutItsBound(t *testing.T) {
	for _, mix := range []struct {
		name string
		size func(r *rand.Rand) int
	}{
		{"300B lines", func(r *rand.Rand) int { return 300 }},
		{"random 0-2KiB", func(r *rand.Rand) int { return r.IntN(2048) }},
	} {
		t.Run(strings.ReplaceAll(mix.name, " ", "_"), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			lines := make([]string, 4096)
			for i := range lines {
				lines[i] = strings.Repeat("x", mix.size(r))
			}
			before := liveHeapR()
			bufs := make([]*Buffer, 20)
			for i := range bufs {
				bufs[i] = New(Options{})
				for j := range 20000 {
					bufs[i].Add(Entry{Line: strings.Clone(lines[(i+j)%len(lines)])})
				}
			}
			after := liveHeapR()
			per := (after - before) / 20
			t.Logf("%s: %d KiB live per busy buffer (bound %d KiB)", mix.name, per>>10, DefaultBytes>>10)
			// Before 206c35d: 352 KiB (300-B lines) and 312 KiB (0-2 KiB).
			if per > DefaultBytes*3/2 {
				t.Errorf("%s: a busy buffer at its bounds holds %d KiB of heap, more than 1.5× its %d-KiB byte bound (the ring of Entries held 312-352 KiB)", mix.name, per>>10, DefaultBytes>>10)
			}
			runtime.KeepAlive(bufs)
			runtime.KeepAlive(lines)
		})
	}
}
