package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
)

// A relaunch's lists are learned from its new launch even when the
// operator had the server stopped as its drain ended (the relearn is
// skipped: nothing may start it then) — stopped during the drain, or
// before the reload: the operator's Start learns them, where before the
// old launch's tools stayed served for good.
func TestStartLearnsARelaunchTheStopKeptFromLearning(t *testing.T) {
	relaunch := func(t *testing.T, lf *listFleet, ctx context.Context) {
		_, _ = lf.f.Reload(ctx, parseCfg(t, `"s":{"command":"fake2","idleTimeout":"0"}`), true, nil)
	}
	for _, c := range []struct {
		name string
		stop func(t *testing.T, lf *listFleet, s *Server) // stops s around the relaunch, its new tools "new"
	}{
		{"during the drain", func(t *testing.T, lf *listFleet, s *Server) {
			held, err := s.Acquire(t.Context(), "")
			if err != nil {
				t.Fatal(err)
			}
			lf.srv.setTools("new")
			done := make(chan struct{})
			go func() {
				defer close(done)
				relaunch(t, lf, context.Background())
			}()
			time.Sleep(time.Second) // the relaunch drains the call
			synctest.Wait()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			_, _ = s.Stop(ctx)
			cancel()
			held.Release()
			<-done
		}},
		{"before the reload", func(t *testing.T, lf *listFleet, s *Server) {
			if _, err := s.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			lf.srv.setTools("new")
			relaunch(t, lf, t.Context())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lf := newListFleet(t, `,"idleTimeout":"0"`, nil)
				defer lf.close(t)
				s := lf.f.Get("s")
				lf.srv.setTools("old")
				if !s.learn(t.Context()) {
					t.Fatal("learn failed")
				}
				c.stop(t, lf, s)
				synctest.Wait()
				if err := s.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the start's refresh
				items, _ := s.Catalog().CachedList(catalog.Tools)
				if names := toolNames(t, items); len(names) != 1 || names[0] != "new" {
					t.Fatalf("tools = %v, want [new] from the new launch (relaunchPending=%v)", names, s.cat.RelaunchPending())
				}
			})
		})
	}
}
