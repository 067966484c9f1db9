package fleet

import "context"

// background is the work the fleet runs on its own, apart from any
// request: its servers' catalogs' list refreshes and pin checks' learns
// (catalog.Env.Spawn), and telling a new process what its sessions asked
// meanwhile. It stays the fleet's, not the catalog's: its bound is the
// fleet's lifetime. Each runs with the fleet's context, which Close
// cancels; Close then waits for all of them, so none outlives the fleet.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc

	// count and done are guarded by Fleet.bgMu. done is made by Close and
	// closed once count is 0 after it.
	count int
	done  chan struct{}
}

// spawn runs fn on a goroutine of its own with the fleet's context, unless
// the fleet is closing; it reports whether fn runs.
func (f *Fleet) spawn(fn func(ctx context.Context)) bool {
	f.bgMu.Lock()
	defer f.bgMu.Unlock()
	if f.closed.Load() {
		return false
	}
	f.bg.count++
	go func() {
		defer f.spawned()
		fn(f.bg.ctx)
	}()
	return true
}

func (f *Fleet) spawned() {
	f.bgMu.Lock()
	defer f.bgMu.Unlock()
	f.bg.count--
	if f.bg.count == 0 && f.bg.done != nil {
		close(f.bg.done) // after Close nothing is spawned: count is 0 once
	}
}

// stopBackground marks the fleet closed, so that nothing is spawned any
// more, cancels what runs, and returns a channel closed when it has all
// returned. Calling it again returns the same channel.
func (f *Fleet) stopBackground() <-chan struct{} {
	f.bgMu.Lock()
	defer f.bgMu.Unlock()
	f.closed.Store(true)
	if f.bg.done == nil {
		f.bg.done = make(chan struct{})
		if f.bg.count == 0 {
			close(f.bg.done)
		}
	}
	f.bg.cancel()
	return f.bg.done
}

// Go runs fn on a goroutine of its own with the fleet's context, which
// Close cancels before it waits for fn to return, unless the fleet is
// closing already; it reports whether fn runs. For work that belongs to
// the fleet's life but not to the fleet (the gateway's upkeep).
func (f *Fleet) Go(fn func(ctx context.Context)) bool { return f.spawn(fn) }
