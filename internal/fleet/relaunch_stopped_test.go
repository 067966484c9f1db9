package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A relaunch's lists are learned from its new launch even when the
// operator had the server stopped as its drain ended (the relearn is
// skipped: nothing may start it then): the operator's Start learns them,
// where before the old launch's tools stayed served for good.
func TestStartAfterARelaunchDrainedWhileStoppedLearnsTheNewLaunch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newListFleet(t, `,"idleTimeout":"0"`, nil)
		defer lf.close(t)
		s := lf.f.Get("s")
		lf.srv.setTools("old")
		if !s.learn(t.Context()) {
			t.Fatal("learn failed")
		}
		held, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		lf.srv.setTools("new")
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = lf.f.Reload(context.Background(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"0"}`), true, nil)
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, _ = s.Stop(ctx)
		cancel()
		held.Release()
		<-done
		synctest.Wait()
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		items, _ := s.CachedList(Tools)
		if names := toolNames(t, items); len(names) != 1 || names[0] != "new" {
			t.Fatalf("tools = %v, want [new] from the new launch", names)
		}
	})
}

// Applied.Removed says a removed server's instances are stopped, but an
// instance an earlier operator Stop retired still drains a call.
// The same when the server was stopped before the reload relaunched it.
func TestStartOfAServerRelaunchedWhileStoppedLearnsTheNewLaunch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newListFleet(t, `,"idleTimeout":"0"`, nil)
		defer lf.close(t)
		s := lf.f.Get("s")
		lf.srv.setTools("old")
		if !s.learn(t.Context()) {
			t.Fatal("learn failed")
		}
		if _, err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		lf.srv.setTools("new")
		if _, err := lf.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"0"}`), true, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		items, _ := s.CachedList(Tools)
		if names := toolNames(t, items); len(names) != 1 || names[0] != "new" {
			t.Fatalf("tools = %v, want [new] from the new launch (relaunchPending=%v)", names, s.lists.relaunchPending())
		}
	})
}
