package fleet

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// oomAtStart fails every connect as a tree its memory limit killed during
// the handshake would: its exit status an *ExitError, as the backend's
// endCause hands it over.
type oomAtStart struct{}

func (oomAtStart) Connect(context.Context) (lifecycle.Session, error) {
	return nil, &backend.ExitError{Server: "s", Status: proc.ExitStatus{Kind: proc.ExitOOM, Code: -1, OOMKills: 1, PIDsLimitHits: 2}}
}

// A tree that ends during its start — its memory limit killed it, or its
// pids limit refused forks, before initialize answered — is counted in
// oomKills and pidsLimitHits as well as recorded in the history (it never
// connected, so the end of a connection does not count it).
func TestAStartKilledByItsLimitsIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake","restart":{"policy":"never"}}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
		f, err := New(cfg, Options{Logger: discardLogger(),
			Connector: func(*config.Server, backend.Hooks, func(context.Context, Live)) lifecycle.Connector {
				return oomAtStart{}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		s := f.Get("s")
		if _, err := s.Acquire(t.Context(), ""); err == nil {
			t.Fatal("started")
		}
		synctest.Wait()
		h := s.Detail().History
		if len(h) != 1 || h[0].Kind != "oom" {
			t.Fatalf("history %+v", h)
		}
		if oom, hits := s.limitCounts(); oom != 1 || hits != 2 {
			t.Errorf("history says oom (%d kill, %d forks refused), counters say oomKills %d, pidsLimitHits %d", h[0].OOMKills, h[0].PIDsLimitHits, oom, hits)
		}
	})
}

// failAtStart fails every connect at once, counting them.
type failAtStart struct{ n *atomic.Int32 }

func (c failAtStart) Connect(context.Context) (lifecycle.Session, error) {
	c.n.Add(1)
	return nil, fmt.Errorf("%w: cannot start", lifecycle.ErrServerUnavailable)
}

// Was a defect: a request that began a start which ended before the
// request came back to wait for it (a start that fails at once) missed its
// outcome and began another: one request, two spawns, and the respawn
// limit reached twice as fast.
func TestARequestStartsOnceEvenWhenTheStartEndsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake","restart":{"policy":"never"}}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
		var spawns atomic.Int32
		f, err := New(cfg, Options{Logger: discardLogger(),
			Connector: func(*config.Server, backend.Hooks, func(context.Context, Live)) lifecycle.Connector {
				return failAtStart{&spawns}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		// The start ends before the request looks again.
		f.seams.afterStartBegun = func(ch chan struct{}) { <-ch }
		if _, err := f.Get("s").Acquire(t.Context(), ""); err == nil {
			t.Fatal("started")
		}
		if n := spawns.Load(); n != 1 {
			t.Fatalf("one request spawned %d times", n)
		}
	})
}
