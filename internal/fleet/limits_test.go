package fleet

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// Root makes a fake connection a process tree for the fleet's memory
// checks, measured by the TreeUsage a test gives (fakeMemory).
func (f *fakeLive) Root() proc.Root { return proc.Root{PID: 4242} }

// fakeMemory makes ff's trees use what mem says.
func fakeMemory(ff *fakeFleet, mem *atomic.Uint64) {
	ff.f.opts.TreeUsage = func(roots []proc.Root) ([]proc.Usage, []bool) {
		u, ok := make([]proc.Usage, len(roots)), make([]bool, len(roots))
		for i := range roots {
			u[i], ok[i] = proc.Usage{MemoryBytes: mem.Load()}, true
		}
		return u, ok
	}
}

func (ff *fakeFleet) last(typ string) Event {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	for i := len(ff.events) - 1; i >= 0; i-- {
		if string(ff.events[i].Type) == typ {
			return ff.events[i]
		}
	}
	return Event{}
}

// A server whose tree holds more than its maxIdleMemory while nothing is
// in flight is put to sleep early, long before its idle timeout, with an
// event that says why; not inside its spawn grace period, not while a
// request is in flight, and not while its tree stays under the bound.
func TestMaxIdleMemorySleepsABloatedIdleServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":"1h","startGrace":"30s","maxIdleMemory":"300MiB"`)
		defer ff.close(t)
		var mem atomic.Uint64
		mem.Store(100 << 20)
		fakeMemory(ff, &mem)
		s := ff.f.Get("s")
		l, err := s.Acquire(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		started := time.Now()

		// Bloated while a request is in flight, and past the grace
		// period: awake.
		mem.Store(400 << 20)
		time.Sleep(time.Minute)
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("slept with a request in flight: %s", state(s))
		}
		l.Release()
		// Under the bound once idle: awake.
		mem.Store(200 << 20)
		time.Sleep(time.Minute)
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("slept under its maxIdleMemory: %s", state(s))
		}
		// Over it, idle: asleep at the next check.
		mem.Store(301 << 20)
		overAt := time.Now()
		time.Sleep(memoryCheckEvery)
		synctest.Wait()
		if state(s) != "dormant" {
			t.Fatalf("not asleep %v after its idle tree went over maxIdleMemory: %s", time.Since(overAt), state(s))
		}
		d := ff.last("dormant").Details
		if d["reason"] != "maxIdleMemory" || d["memoryBytes"] != uint64(301<<20) || d["maxIdleMemoryBytes"] != uint64(300<<20) {
			t.Fatalf("dormant event %v", d)
		}
		t.Logf("asleep %v after start (idle timeout 1h): %v", time.Since(started), d)
	})
}

// Not within the spawn grace period, however bloated; and with no idle
// timeout at all, maxIdleMemory still applies.
func TestMaxIdleMemoryRespectsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":0,"startGrace":"60s","maxIdleMemory":"1MiB"`)
		defer ff.close(t)
		var mem atomic.Uint64
		mem.Store(1 << 30)
		fakeMemory(ff, &mem)
		s := ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("slept inside its grace period: %s", state(s))
		}
		time.Sleep(memoryCheckEvery)
		synctest.Wait()
		if state(s) != "dormant" {
			t.Fatalf("not asleep after its grace period: %s", state(s))
		}
	})
}

// A reload that sets maxIdleMemory applies it to the running process.
func TestMaxIdleMemoryAppliedByReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, `,"idleTimeout":0,"startGrace":0`)
		defer ff.close(t)
		var mem atomic.Uint64
		mem.Store(500 << 20)
		fakeMemory(ff, &mem)
		s := ff.f.Get("s")
		if _, err := use(s.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if state(s) != "running" {
			t.Fatalf("no maxIdleMemory, yet %s", state(s))
		}
		cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake","idleTimeout":0,"startGrace":0,"maxIdleMemory":"100MiB"}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
		res, err := ff.f.Reload(t.Context(), cfg, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c := res.Servers[0]; c.Action != config.ActionUpdated {
			t.Fatalf("reload: %+v", c)
		}
		time.Sleep(memoryCheckEvery)
		synctest.Wait()
		if state(s) != "dormant" || ff.last("dormant").Details["reason"] != "maxIdleMemory" {
			t.Fatalf("after the reload: %s, %v", state(s), ff.last("dormant").Details)
		}
	})
}

// Status carries the configured limits; a server without any has none.
func TestStatusLimits(t *testing.T) {
	ff := newFakeFleet(t, `,"limits":{"memory":"64MiB","pids":10,"cpu":0.5},"maxIdleMemory":"32MiB"`)
	defer ff.close(t)
	got := ff.f.Get("s").Status().Limits
	if got == nil || got.MemoryBytes != 64<<20 || got.PIDs != 10 || got.CPU != 0.5 || got.MaxIdleMemoryBytes != 32<<20 || got.NotEnforced != nil {
		t.Fatalf("limits %+v", got)
	}
	bare := newFakeFleet(t, ``)
	defer bare.close(t)
	if l := bare.f.Get("s").Status().Limits; l != nil {
		t.Fatalf("no limits configured, yet %+v", l)
	}
}

// fakeTree is a process tree that ends when its done is closed.
type fakeTree struct {
	done chan struct{}
	st   proc.ExitStatus
}

func (f *fakeTree) Pid() int                { return 0 }
func (f *fakeTree) Done() <-chan struct{}   { return f.done }
func (f *fakeTree) Status() proc.ExitStatus { return f.st }

// A tree's OOM kill and refused forks are counted once it is gone: at
// once when it is, else when it goes (a stop whose context ended first),
// within endCountWait; one that never goes is never counted, and nothing
// waits for it past that bound.
func TestEndsCountedOnceTheTreeIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, ``)
		defer ff.close(t)
		s := ff.f.Get("s")
		gone := &fakeTree{done: make(chan struct{}), st: proc.ExitStatus{Kind: proc.ExitOOM, OOMKills: 1, PIDsLimitHits: 2}}
		close(gone.done)
		s.countTree(gone)
		if oom, hits := s.limitCounts(); oom != 1 || hits != 2 {
			t.Fatalf("a gone tree: %d, %d", oom, hits)
		}

		going := &fakeTree{done: make(chan struct{}), st: proc.ExitStatus{Kind: proc.ExitStopped, PIDsLimitHits: 3}}
		s.countTree(going)
		if _, hits := s.limitCounts(); hits != 2 {
			t.Fatalf("counted before the tree was gone: %d", hits)
		}
		time.Sleep(time.Second)
		close(going.done)
		synctest.Wait()
		if oom, hits := s.limitCounts(); oom != 1 || hits != 5 {
			t.Fatalf("after it went: %d, %d", oom, hits)
		}

		stuck := &fakeTree{done: make(chan struct{}), st: proc.ExitStatus{Kind: proc.ExitOOM}}
		s.countTree(stuck)
		time.Sleep(endCountWait)
		synctest.Wait() // the waiter has given up: no goroutine left
		close(stuck.done)
		synctest.Wait()
		if oom, _ := s.limitCounts(); oom != 1 {
			t.Fatalf("a tree gone past the bound was counted: %d", oom)
		}
		if st := s.Status(); st.OOMKills != 1 || st.PIDsLimitHits != 5 {
			t.Fatalf("status: %d, %d", st.OOMKills, st.PIDsLimitHits)
		}
	})
}

// The wait for a tree still being killed ends with the fleet: Close does
// not wait out its bound, and no goroutine of it is left.
func TestEndCountWaitEndsWithTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ff := newFakeFleet(t, ``)
		s := ff.f.Get("s")
		s.countTree(&fakeTree{done: make(chan struct{}), st: proc.ExitStatus{Kind: proc.ExitOOM}})
		start := time.Now()
		ff.close(t)
		if took := time.Since(start); took >= endCountWait {
			t.Fatalf("Close waited %v for a tree's count", took)
		}
	})
}
