package proc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refusedExecPath is a /proc/self/fd link, like the init's, to a file the
// kernel refuses to exec (EACCES): what a spawn meets in the rare race the
// Linux start retries.
func refusedExecPath(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(f, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(f, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return "/proc/self/fd/" + strconv.Itoa(fd)
}

func stubStart(t *testing.T, start func(*exec.Cmd) error) {
	t.Helper()
	startCmd = start
	t.Cleanup(func() { startCmd = (*exec.Cmd).Start })
}

func requirePIDNamespace(t *testing.T, rt *Runtime) {
	t.Helper()
	if !rt.Report().Active(LayerPIDNamespace) || !rt.Report().Active(LayerCgroup) {
		t.Skipf("needs the pid-namespace and cgroup layers:\n%s", rt.Report())
	}
}

// TestSpawnRetriesARefusedInitExec: the kernel's EACCES for the init's
// /proc/self/fd exec costs the caller nothing; the spawn tries again.
func TestSpawnRetriesARefusedInitExec(t *testing.T) {
	rt := openRuntime(t, Options{ShimPath: shimBinary})
	requirePIDNamespace(t, rt)
	refused := refusedExecPath(t)
	var calls atomic.Int32
	stubStart(t, func(c *exec.Cmd) error {
		if calls.Add(1) == 1 {
			c.Path = refused
		}
		return c.Start()
	})
	p, err := rt.Spawn(t.Context(), fixtureSpec(t, "retry"))
	if err != nil {
		t.Fatalf("spawn after one refused exec: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("started %d times, want 2 (one refused, one retry)", n)
	}
	newClient(p).initialize(t)
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSpawnGivesUpOnAPersistentRefusal: the retry is bounded, the error is
// the kernel's, and the failed attempts leave no cgroup leaf or spawner
// count behind.
func TestSpawnGivesUpOnAPersistentRefusal(t *testing.T) {
	rt := openRuntime(t, Options{ShimPath: shimBinary})
	requirePIDNamespace(t, rt)
	refused := refusedExecPath(t)
	var calls atomic.Int32
	stubStart(t, func(c *exec.Cmd) error {
		calls.Add(1)
		c.Path = refused
		return c.Start()
	})
	_, err := rt.Spawn(t.Context(), fixtureSpec(t, "refused"))
	if err == nil || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("spawn: %v, want the kernel's EACCES", err)
	}
	if n := calls.Load(); n != spawnAttempts {
		t.Fatalf("started %d times, want %d", n, spawnAttempts)
	}
	if left, _ := os.ReadDir(rt.plat.cgroup); len(dirsOnly(left)) != 0 {
		t.Fatalf("cgroup leaves left after failed attempts: %v", left)
	}
	theSpawner.mu.Lock()
	live := theSpawner.live
	theSpawner.mu.Unlock()
	if live != 0 {
		t.Fatalf("spawner still counts %d children", live)
	}
}

func dirsOnly(es []os.DirEntry) []string {
	var out []string
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestConcurrentSpawnsOfOneServerEachGetALeaf: two instances of one server
// started at the same moment (per-session instances) each get a cgroup
// leaf of their own. The leaf was named after the runtime's latest
// sequence number, which both could read alike: the second mkdir failed
// and that instance ran without its cgroup.
func TestConcurrentSpawnsOfOneServerEachGetALeaf(t *testing.T) {
	rt := openRuntime(t, Options{ShimPath: shimBinary})
	requirePIDNamespace(t, rt)
	var arrived sync.WaitGroup
	arrived.Add(2)
	release := make(chan struct{})
	// Each spawn's first attempt arrives once before the release; an
	// attempt retried after it (an exec the kernel refused, which a
	// loaded machine sees) arrives again and must not count.
	var attempts atomic.Int32
	beforeStart = func() {
		if attempts.Add(1) <= 2 {
			arrived.Done()
		}
		<-release
	}
	t.Cleanup(func() { beforeStart = func() {} })
	ps := make([]*Process, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range ps {
		wg.Go(func() { ps[i], errs[i] = rt.Spawn(t.Context(), fixtureSpec(t, "twins")) })
	}
	arrived.Wait() // both have their numbers; neither has made its leaf
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("spawn %d: %v", i, err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ps[i].Stop(ctx)
		}()
	}
	a, b := ps[0].plat.cgroup, ps[1].plat.cgroup
	if a == "" || b == "" || a == b {
		t.Fatalf("leaves %q and %q: want one each", a, b)
	}
	for _, p := range ps {
		if got := cgroupProcs(p.plat.cgroup); len(got) == 0 {
			t.Fatalf("leaf %s holds no process", p.plat.cgroup)
		}
	}
}
