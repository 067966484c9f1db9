package fleet

import (
	"sync"
	"testing"
	"testing/synctest"
)

// The wake's refresh waits for the requests that waited for the wake, not
// for any: a request that came after the wake (TryAcquire, the hot path)
// and ended first — or one of mcpvisor's own leases (Peek: a relayed
// client notification) — does not stand in for a waking request still
// being answered.
func TestTheWakesRefreshWaitsForTheWakingRequestsNotOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		lf := newListFleet(t, `,"idleTimeout":"0"`, func(n int) {
			if n == 2 {
				<-started
			}
		})
		defer lf.close(t)
		s := lf.f.Get("s")
		lf.srv.setTools("v1")
		lf.f.Learn(t.Context(), 1)
		synctest.Wait()
		lists := func() int { n, _ := lf.listStats(); return n }
		learned := lists()

		lf.srv.setTools("v2")
		var waking *Lease
		var wg sync.WaitGroup
		wg.Go(func() {
			l, err := s.Acquire(t.Context(), "")
			if err != nil {
				t.Error(err)
				return
			}
			waking = l
		})
		synctest.Wait()
		close(started)
		wg.Wait()
		synctest.Wait()
		if waking == nil {
			t.Fatal("no lease")
		}
		defer waking.Release()
		// A later request, on the running process, ends first.
		l, ok := s.TryAcquire("")
		if !ok {
			t.Fatal("TryAcquire on the woken server failed")
		}
		l.Release()
		if p, ok := s.Peek(""); ok {
			p.Release()
		}
		synctest.Wait()
		if n := lists(); n != learned {
			t.Fatalf("%d tools/list calls while the waking request is still answered (a later request ended), want none", n-learned)
		}
		waking.Release()
		synctest.Wait()
		if n := lists(); n != learned+1 {
			t.Fatalf("%d tools/list calls once the waking request ended, want 1", n-learned)
		}
	})
}
