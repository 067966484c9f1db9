package logbuf

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A busy buffer — many lines, at its bounds for long — holds about its
// byte bound of heap, not twice it: its one slice grows for the lines it
// keeps, not for the room of discarded ones too, and it keeps that size
// for good (a chatty server dormant since keeps it).
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
			before := testserver.LiveHeap()
			bufs := make([]*Buffer, 4)
			for i := range bufs {
				bufs[i] = New(Options{})
				for j := range 6000 {
					bufs[i].Add(Entry{Line: strings.Clone(lines[(i+j)%len(lines)])})
				}
			}
			after := testserver.LiveHeap()
			per := (after - before) / int64(len(bufs))
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
