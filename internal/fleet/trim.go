package fleet

import (
	"context"
	"sync"
	"sync/atomic"
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
// request for a trim while it waits moves its call later. Asking is a
// few atomic operations — every request served asks — and the lock is
// the trimmer's alone.
type trimState struct {
	running atomic.Bool  // a trimmer runs (or is being started)
	due     atomic.Bool  // a trim was asked for since the last call
	dormant atomic.Bool  // a server went dormant since the last call
	at      atomic.Int64 // when the last was asked for: ns since epoch
	// epoch is the origin of at, read when the fleet was made: with the
	// monotonic clock's reading, so that a step of the wall clock moves
	// no trim.
	epoch time.Time

	mu   sync.Mutex // guards last
	last time.Time  // when Trim was last called
}

// spill puts what a server gone dormant keeps in memory into the store
// (its lists and definitions, read back when needed) and schedules a
// Trim.
func (s *Server) spill() {
	s.cat.Spill()
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
	// The latest ask wins, whichever caller stores last.
	for now := int64(time.Since(t.epoch)); ; {
		old := t.at.Load()
		if now <= old || t.at.CompareAndSwap(old, now) {
			break
		}
	}
	if dormancy {
		t.dormant.Store(true)
	}
	if !t.due.Load() {
		t.due.Store(true)
	}
	// Set after due: a trimmer that ends sees it, or this starts one.
	if t.running.Load() || !t.running.CompareAndSwap(false, true) {
		return
	}
	if !f.spawn(f.trimmer) {
		t.running.Store(false)
	}
}

// trimmer calls Options.Trim when it is due, until nothing more is, or
// ctx (the fleet's) ends.
func (f *Fleet) trimmer(ctx context.Context) {
	t := &f.trim
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if !t.due.Load() {
			t.running.Store(false)
			// A trim asked for between the load and the store found
			// running set and started none: this trimmer goes on.
			if !t.due.Load() || !t.running.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		now := time.Now()
		at := t.at.Load()
		when := t.epoch.Add(time.Duration(at) + trimQuiet)
		if next := t.last.Add(trimEvery); !t.last.IsZero() && next.After(when) {
			when = next
		}
		if wait := when.Sub(now); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
				continue
			case <-ctx.Done():
				timer.Stop()
				t.running.Store(false)
				return
			}
		}
		t.due.Store(false)
		if t.at.Load() != at {
			t.due.Store(true) // asked for again meanwhile: a trim after that too
		}
		dormancy := t.dormant.Swap(false)
		t.last = now
		f.opts.Trim(dormancy)
	}
}
