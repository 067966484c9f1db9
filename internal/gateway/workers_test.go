package gateway

import (
	"sync"
	"testing"
	"testing/synctest"
)

// Sequential requests reuse one worker; a burst leaves at most
// maxIdleWorkers waiting; quit ends them all.
func TestWorkersAreReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		quit := make(chan struct{})
		p := &workers{wg: &wg, work: make(chan func()), quit: quit}
		ran := 0
		for range 100 {
			done := make(chan struct{})
			p.run(func() { ran++; close(done) })
			<-done
			synctest.Wait() // the worker is back, waiting
		}
		if ran != 100 || p.idle.Load() != 1 {
			t.Fatalf("ran %d, %d idle workers after sequential requests, want 100 and 1", ran, p.idle.Load())
		}

		release := make(chan struct{})
		var mu sync.Mutex
		started := 0
		for range 3 * maxIdleWorkers {
			p.run(func() {
				mu.Lock()
				started++
				mu.Unlock()
				<-release
			})
		}
		synctest.Wait()
		if started != 3*maxIdleWorkers {
			t.Fatalf("%d of %d concurrent requests started", started, 3*maxIdleWorkers)
		}
		close(release)
		synctest.Wait()
		if n := p.idle.Load(); n != maxIdleWorkers {
			t.Fatalf("%d idle workers after a burst, want %d", n, maxIdleWorkers)
		}
		close(quit)
		wg.Wait()
		if n := p.idle.Load(); n != 0 {
			t.Fatalf("%d idle workers after quit", n)
		}
	})
}
