package fleet

import (
	"context"
	"sync"
	"time"
)

// The pace of Options.Trim: called once nothing asked for it (a server
// gone dormant, a request served: TrimSoon) for trimQuiet, and never
// within trimEvery of the last call — so never while work goes on.
const (
	trimQuiet = 2 * time.Second
	trimEvery = 10 * time.Second
)

// trimState schedules Options.Trim: at most one trimmer runs, and a
// request for a trim while it waits moves its call later.
type trimState struct {
	mu      sync.Mutex
	running bool
	due     bool      // a trim was asked for since the last call
	dormant bool      // a server went dormant since the last call
	at      time.Time // when the last was asked for
	last    time.Time // when Trim was last called
}

// spill puts what a server gone dormant keeps in memory into the store
// (its lists and definitions, read back when needed) and schedules a
// Trim.
func (s *Server) spill() {
	s.spillLists()
	s.spillDefs()
	s.f.trimSoon(true)
}

// TrimSoon schedules a call of Options.Trim once things are quiet: after
// work that leaves memory to give back — a request served, whose garbage
// the Go runtime would otherwise keep up to its next collection's goal,
// or that read lists from the state file into mapped pages. Cheap, and
// safe to call concurrently; a no-op without Options.Trim.
func (f *Fleet) TrimSoon() { f.trimSoon(false) }

// trimSoon schedules a call of Options.Trim; dormancy says a server went
// dormant.
func (f *Fleet) trimSoon(dormancy bool) {
	if f.opts.Trim == nil {
		return
	}
	t := &f.trim
	t.mu.Lock()
	t.due, t.at = true, time.Now()
	t.dormant = t.dormant || dormancy
	if t.running {
		t.mu.Unlock()
		return
	}
	t.running = true
	t.mu.Unlock()
	if !f.spawn(f.trimmer) {
		t.mu.Lock()
		t.running = false
		t.mu.Unlock()
	}
}

// trimmer calls Options.Trim when it is due, until nothing more is, or
// ctx (the fleet's) ends.
func (f *Fleet) trimmer(ctx context.Context) {
	t := &f.trim
	for {
		t.mu.Lock()
		if !t.due {
			t.running = false
			t.mu.Unlock()
			return
		}
		now := time.Now()
		when := t.at.Add(trimQuiet)
		if next := t.last.Add(trimEvery); !t.last.IsZero() && next.After(when) {
			when = next
		}
		if wait := when.Sub(now); wait > 0 {
			t.mu.Unlock()
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
				continue
			case <-ctx.Done():
				timer.Stop()
				t.mu.Lock()
				t.running = false
				t.mu.Unlock()
				return
			}
		}
		dormancy := t.dormant
		t.due, t.dormant, t.last = false, false, now
		t.mu.Unlock()
		f.opts.Trim(dormancy)
	}
}
