package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
)

// A list the old launch was still fetching when a reload relaunched the
// server is not the new launch's: it is neither cached nor counted as
// saved, so the relaunch's drop (its lists not learned again) still drops
// the old launch's tools instead of serving them on.
func TestAListFetchedByTheOldLaunchDoesNotPassForTheNewOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newListFleet(t, `,"idleTimeout":"0","requestTimeout":"10s"`, nil)
		defer lf.close(t)
		s := lf.f.Get("s")
		lf.srv.setTools("old")
		if !s.learn(t.Context()) {
			t.Fatal("learn failed")
		}
		l, err := s.Acquire(t.Context(), "") // keeps it running
		if err != nil {
			t.Fatal(err)
		}
		release := lf.holdLists()
		s.requestRefresh(catalog.Tools)
		synctest.Wait() // the refresh waits in tools/list on the old launch
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = lf.f.Reload(context.Background(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"0","requestTimeout":"10s"}`), false, nil)
		}()
		synctest.Wait()
		release() // the old launch's list comes back now
		l.Release()
		time.Sleep(11 * time.Second)
		<-done
		synctest.Wait()
		if items, ok := s.Catalog().CachedList(catalog.Tools); ok {
			t.Fatalf("the old launch's tools %v are served as the new launch's", toolNames(t, items))
		}
	})
}
