package proc

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"golang.org/x/sys/unix"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The limit tests need the cgroup controllers this machine has (v1 memory,
// pids, cpu and cpuacct, or their v2 ones): a runtime with cgroups on that
// cannot enforce a kind fails the test, never skips it. Runtimes with
// cgroups off test the unsupported path: the tree starts without its
// limits, and says so.

// mustEnforce fails t unless rt enforces every kind of limit.
func mustEnforce(t *testing.T, rt *Runtime) {
	t.Helper()
	for _, l := range rt.Report().Limits {
		if !l.Active {
			t.Fatalf("this machine cannot enforce the %s limit, which the test needs: %s\n%s", l.Name, l.Detail, rt.Report())
		}
	}
	if len(rt.Report().Limits) != 3 {
		t.Fatalf("limits reported: %+v", rt.Report().Limits)
	}
}

// limitSpec is fixtureSpec with limits.
func limitSpec(t *testing.T, marker string, l Limits, env ...string) Spec {
	spec := fixtureSpec(t, marker, env...)
	spec.Limits = &l
	return spec
}

func TestLimitsReport(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			rep := rt.Report()
			t.Logf("\n%s", rep)
			if m.opts.NoCgroup {
				for _, l := range rep.Limits {
					if l.Active || !strings.Contains(l.Detail, "turned off by configuration") {
						t.Errorf("cgroups off, yet %s: %+v", l.Name, l)
					}
				}
				if got := rep.NotEnforced(&Limits{MemoryBytes: 1 << 30, CPU: 1}); len(got) != 2 || got[0].Name != LimitMemory || got[1].Name != LimitCPU {
					t.Errorf("NotEnforced: %+v", got)
				}
				return
			}
			mustEnforce(t, rt)
			for _, l := range rep.Limits {
				if !strings.Contains(l.Detail, "mcpvisor-"+rt.ID()) {
					t.Errorf("%s: the detail does not name the instance's cgroup: %s", l.Name, l.Detail)
				}
			}
			if rep.NotEnforced(&Limits{MemoryBytes: 1, PIDs: 1, CPU: 1}) != nil {
				t.Error("NotEnforced lists kinds that are enforced")
			}
			if !strings.Contains(rep.String(), "resource limits:") || rep.Accounting == "" {
				t.Errorf("report:\n%s", rep)
			}
		})
	}
}

// cgroupModes are the modes whose runtime uses cgroups.
func cgroupModes() []string {
	var out []string
	for _, m := range modes {
		if !m.opts.NoCgroup {
			out = append(out, m.name)
		}
	}
	return out
}

// A tree that grows past its memory limit is killed by the kernel and
// classified oom from its cgroup's OOM-kill counter; one that stays under
// it ends as it would without a limit.
func TestMemoryLimitKillsAndIsClassifiedOOM(t *testing.T) {
	for _, mode := range cgroupModes() {
		t.Run(mode, func(t *testing.T) {
			rt := openRuntime(t, harnessOptions(mode))
			mustEnforce(t, rt)
			marker := testserver.NewMarker(t)
			start := time.Now()
			p, err := rt.Spawn(t.Context(), limitSpec(t, marker, Limits{MemoryBytes: 64 << 20}, "FIXTURE_GROW_MB=512"))
			if err != nil {
				t.Fatal(err)
			}
			<-p.Exited()
			exited := time.Since(start)
			// A stop begun as soon as the exit is seen (as the backend's,
			// to sweep what the tree left) changes nothing of how it ended.
			if err := p.Stop(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			st, err := p.Wait(ctxTimeout(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if st.Kind != ExitOOM || st.OOMKills < 1 || !st.Crashed() || st.Kind.String() != "oom" {
				t.Fatalf("status %v (OOM kills %d), want oom", st, st.OOMKills)
			}
			t.Logf("%v: killed %v after spawn, classified %v after", st, exited.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			testserver.WaitGone(t, marker, time.Second)

			// Under its limit: no OOM, a plain stop.
			marker = testserver.NewMarker(t)
			p, err = rt.Spawn(t.Context(), limitSpec(t, marker, Limits{MemoryBytes: 64 << 20}, "FIXTURE_GROW_MB=16"))
			if err != nil {
				t.Fatal(err)
			}
			newClient(p).initialize(t)
			if err := p.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if st := p.Status(); st.Kind != ExitStopped || st.OOMKills != 0 {
				t.Errorf("under its limit: %v", st)
			}
		})
	}
}

// Where cgroups are off, a tree with limits starts anyway, without them,
// and the runtime warns once per server and kind.
func TestLimitsNotEnforcedStillStart(t *testing.T) {
	var buf testserver.Buffer
	opts := Options{NoPIDNamespace: true, NoCgroup: true, Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	rt := openRuntime(t, opts)
	// Warned of at start-up, before it runs: not again when it does.
	rt.WarnNotEnforced("fixture", &Limits{MemoryBytes: 1 << 30})
	for range 2 {
		marker := testserver.NewMarker(t)
		p, err := rt.Spawn(t.Context(), limitSpec(t, marker, Limits{MemoryBytes: 32 << 20, PIDs: 4}, "FIXTURE_GROW_MB=64"))
		if err != nil {
			t.Fatal(err)
		}
		newClient(p).initialize(t) // it grew past the limit it does not have
		if err := p.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st := p.Status(); st.Kind != ExitStopped {
			t.Errorf("status %v", st)
		}
	}
	log := buf.String()
	for _, kind := range []string{LimitMemory, LimitPIDs} {
		if n := strings.Count(log, "limit="+kind); n != 1 {
			t.Errorf("warned %d times of the %s limit, want once:\n%s", n, kind, log)
		}
	}
	if strings.Contains(log, "limit="+LimitCPU) || !strings.Contains(log, "turned off by configuration") {
		t.Errorf("log:\n%s", log)
	}
}

// treeTasks counts the tasks (threads) of every live process with the
// marker, from /proc: what the pids controller counts, measured without
// it.
func treeTasks(marker string) (procs, tasks int) {
	for _, pid := range testserver.LiveProcesses(marker) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		procs++
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				tasks += n
			}
		}
	}
	return procs, tasks
}

// A fork bomb is held at its pids limit: the tree's tasks never exceed it,
// the refusals are counted, the server still answers and stops, and
// nothing of it is left.
func TestPIDsLimitStopsAForkBomb(t *testing.T) {
	const limit = 40
	for _, mode := range cgroupModes() {
		t.Run(mode, func(t *testing.T) {
			rt := openRuntime(t, harnessOptions(mode))
			mustEnforce(t, rt)
			marker := testserver.NewMarker(t)
			p, err := rt.Spawn(t.Context(), limitSpec(t, marker, Limits{PIDs: limit}, "FIXTURE_FORK_BOMB=2000"))
			if err != nil {
				t.Fatal(err)
			}
			// Watch the tree from /proc while it forks, until it serves.
			most, mostProcs := 0, 0
			stop := make(chan struct{})
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for {
					procs, tasks := treeTasks(marker)
					most, mostProcs = max(most, tasks), max(mostProcs, procs)
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			cl := newClient(p)
			cl.initialize(t)
			answer := cl.call(t, 2, "tools/call", `{"name":"echo","arguments":{"text":"still here"}}`)
			close(stop)
			<-watched
			if !strings.Contains(answer, "still here") {
				t.Fatalf("the server does not answer at its limit: %s", answer)
			}
			u, _ := TreeUsage([]Root{p.Root()})
			if most > limit || u[0].Tasks > limit {
				t.Errorf("the tree ran %d tasks (pids.current %d), limit %d", most, u[0].Tasks, limit)
			}
			if mostProcs < limit/3 {
				t.Errorf("only %d processes: did the bomb run?", mostProcs)
			}
			if !strings.Contains(p.Stderr().Tail(0), "fork bomb:") {
				t.Errorf("stderr: %s", p.Stderr().Tail(0))
			}
			if err := p.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			st := p.Status()
			if st.Kind != ExitStopped || st.PIDsLimitHits < 1 {
				t.Errorf("status %v, want stopped with the refused forks counted", st)
			}
			if left := testserver.LiveProcesses(marker); len(left) > 0 {
				testserver.KillProcesses(marker)
				t.Fatalf("left after Stop: %v", left)
			}
			t.Logf("at most %d tasks in %d processes (limit %d); %v; %s", most, mostProcs, limit, st, lastLine(p.Stderr().Tail(0), "fork bomb:"))
		})
	}
}

func lastLine(text, prefix string) string {
	var found string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, prefix) {
			found = line
		}
	}
	return found
}

// A CPU limit of a quarter core holds a spinning tree to about a quarter
// of a core, and to at most half of what an unlimited one spinning beside
// it gets once the machine gives that one 0.6 cores or more.
func TestCPULimit(t *testing.T) {
	rt := openRuntime(t, harnessOptions("cgroup"))
	mustEnforce(t, rt)
	var ps []*Process
	for _, l := range []Limits{{CPU: 0.25}, {}} {
		marker := testserver.NewMarker(t)
		p, err := rt.Spawn(t.Context(), limitSpec(t, marker, l, "FIXTURE_SPIN=1m"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop(context.Background()) })
		ps = append(ps, p)
	}
	roots := []Root{ps[0].Root(), ps[1].Root()}
	sample := func() (limited, free float64) {
		u, ok := TreeUsage(roots)
		if !ok[0] || !ok[1] {
			t.Fatalf("a spinner is gone: %v", ok)
		}
		return u[0].CPUSeconds, u[1].CPUSeconds
	}
	time.Sleep(300 * time.Millisecond) // both spinning
	// Windows of 2 s until one where the unlimited spinner got 0.6 cores:
	// on a busier machine the quarter core the limited one may have is
	// more than half of what the other gets, and the ratio tells nothing.
	// The quota is a hard ceiling (a busy machine gives less, never
	// more): every window holds it.
	deadline := time.Now().Add(40 * time.Second)
	l0, f0 := sample()
	t0 := time.Now()
	for {
		time.Sleep(2 * time.Second)
		l1, f1 := sample()
		t1 := time.Now()
		wall := t1.Sub(t0).Seconds()
		limited, free := (l1-l0)/wall, (f1-f0)/wall
		ratio := limited / free
		t.Logf("over %.2f s: limited %.3f cores, unlimited %.3f cores, ratio %.3f", wall, limited, free, ratio)
		if limited > 0.35 {
			t.Fatalf("limited to 0.25 cores, it got %.3f cores", limited)
		}
		if free >= 0.6 {
			if ratio > 0.5 || limited <= 0 {
				t.Errorf("limited to 0.25 cores, it got %.3f cores, %.2f of the unlimited one's", limited, ratio)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unlimited spinner never got 0.6 cores over 2 s in 40 s: the machine is too busy to compare")
		}
		l0, f0, t0 = l1, f1, t1
	}
}

// A child the server forks at once is in the tree's cgroup leaves — v1
// ones included, which cannot be entered at clone — and the spawner
// thread is back out of them by the time Spawn returns.
func TestChildForkedAtOnceIsInTheLeaves(t *testing.T) {
	for _, mode := range cgroupModes() {
		t.Run(mode, func(t *testing.T) {
			rt := openRuntime(t, harnessOptions(mode))
			mustEnforce(t, rt)
			marker := testserver.NewMarker(t)
			p, err := rt.Spawn(t.Context(), Spec{
				Name:    "forks-at-once",
				Command: "/bin/sh",
				Args:    []string{"-c", "sleep 300 & echo $!; exec sleep 300"},
				Env:     append(os.Environ(), testserver.MarkerEnv+"="+marker),
				Limits:  &Limits{MemoryBytes: 256 << 20, PIDs: 64, CPU: 1},
				// sleep waits out the stdin step: go on to SIGTERM soon.
				StdinWait: 50 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop(context.Background())
			leaves := slices.Clone(p.plat.v1)
			if len(leaves) == 0 || p.plat.cgroup == "" {
				t.Fatalf("v1 leaves %+v, v2 leaf %q", leaves, p.plat.cgroup)
			}
			// No thread of this process is in a leaf.
			for _, l := range leaves {
				b, _ := os.ReadFile(filepath.Join(l.dir, "tasks"))
				for _, f := range strings.Fields(string(b)) {
					if _, err := os.Stat("/proc/self/task/" + f); err == nil {
						t.Errorf("thread %s of mcpvisor is still in %s", f, l.dir)
					}
				}
			}
			line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			child, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil {
				t.Fatalf("child pid %q", line)
			}
			pid := child
			if rt.Report().Active(LayerPIDNamespace) {
				// $! is the child's pid in the namespace; find it outside.
				// The child may be in the middle of its exec of sleep, when
				// its environment (the marker) reads empty: looked for
				// again, for a bounded time.
				pid = 0
				for deadline := time.Now().Add(2 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
					for _, q := range testserver.LiveProcesses(marker) {
						if b, _ := os.ReadFile("/proc/" + strconv.Itoa(q) + "/status"); strings.Contains(string(b), "NSpid:\t"+strconv.Itoa(q)+"\t"+strconv.Itoa(child)+"\n") {
							pid = q
						}
					}
					if pid == 0 && time.Now().After(deadline) {
						t.Fatalf("no process is %d in the namespace", child)
					}
				}
			}
			dirs := append([]string{p.plat.cgroup}, nil...)
			for _, l := range leaves {
				dirs = append(dirs, l.dir)
			}
			for _, d := range dirs {
				if !slices.Contains(cgroupProcs(d), pid) {
					t.Errorf("the child %d is not in %s (%v)", pid, d, cgroupProcs(d))
				}
			}
			t.Logf("child %d in %d leaves: %v", pid, len(dirs), dirs)
		})
	}
}

// The spawner goroutine never serves on the thread-group leader: found
// there, it hands the work to another locked thread.
func TestSpawnerIsNeverTheLeaderThread(t *testing.T) {
	old := onLeaderThread
	calls := 0 // on the spawner goroutines, one after the other
	// The first check says "leader" whatever the thread: the hand-off
	// runs (and, the fake holding another thread, its goroutine may land
	// on the real leader, which it must hand off in turn).
	onLeaderThread = func() bool { calls++; return calls == 1 || old() }
	defer func() { onLeaderThread = old }()
	var tid int
	theSpawner.do(func() { tid = unix.Gettid() })
	theSpawner.release()
	if calls < 2 || tid == 0 || tid == os.Getpid() {
		t.Fatalf("checks %d, spawner thread %d (pid %d)", calls, tid, os.Getpid())
	}
}

// Leaves are removed when their tree is released, the per-instance
// directories at Close.
func TestLeavesRemoved(t *testing.T) {
	rt, err := Open(Options{NoPIDNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	mustEnforce(t, rt)
	insts := append(rt.v1Instances(), rt.plat.cgroup)
	marker := testserver.NewMarker(t)
	p, err := rt.Spawn(t.Context(), limitSpec(t, marker, Limits{MemoryBytes: 128 << 20, PIDs: 64, CPU: 0.5}))
	if err != nil {
		rt.Close(t.Context())
		t.Fatal(err)
	}
	leaves := slices.Clone(p.Root().Cgroups)
	if len(leaves) != 4 { // v2, v1 memory, cpuacct, pids
		t.Errorf("leaves %v", leaves)
	}
	newClient(p).initialize(t)
	if err := p.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, d := range leaves {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("leaf %s left after the tree ended: %v", d, err)
		}
	}
	if err := rt.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, d := range insts {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("instance directory %s left after Close: %v", d, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 300: "300 B", 1024: "1 KiB", 64 << 20: "64 MiB", 1536 << 20: "1.5 GiB", 1<<30 + 1<<28: "1.25 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if s := (&Limits{MemoryBytes: 64 << 20, PIDs: 32, CPU: 0.25}).String(); s != "memory 64 MiB, pids 32, cpu 0.25" {
		t.Errorf("Limits.String = %q", s)
	}
	if s := (*Limits)(nil).String(); s != "none" {
		t.Errorf("nil Limits = %q", s)
	}
}

// A spawner goroutine that hands the main thread off, to one that lands
// on the main thread again and hands off in turn, is let go once the
// serving goroutine is up: none is left waiting when the spawner ends.
func TestSpawnerHandOffOfAHandOffLeavesNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	old := onLeaderThread
	calls := 0
	onLeaderThread = func() bool { calls++; return calls <= 2 || old() }
	defer func() { onLeaderThread = old }()
	var tid int
	theSpawner.do(func() { tid = unix.Gettid() })
	theSpawner.release()
	if calls < 3 || tid == 0 || tid == os.Getpid() {
		t.Fatalf("checks %d, spawner thread %d (pid %d)", calls, tid, os.Getpid())
	}
}

// cgroupWrites records every write to a cgroup control file while it is
// in force (writeCgroupFile), failing those fail says to fail.
type cgroupWrites struct {
	mu   sync.Mutex
	log  []string // "dir/file=value"
	fail func(path string, data []byte) bool
}

func recordCgroupWrites(t *testing.T, fail func(path string, data []byte) bool) *cgroupWrites {
	w := &cgroupWrites{fail: fail}
	old := writeCgroupFile
	writeCgroupFile = func(path string, data []byte, perm os.FileMode) error {
		w.mu.Lock()
		failing := w.fail != nil && w.fail(path, data)
		w.log = append(w.log, path+"="+string(data))
		w.mu.Unlock()
		if failing {
			return errors.New("injected write failure")
		}
		return old(path, data, perm)
	}
	t.Cleanup(func() { writeCgroupFile = old })
	return w
}

// index is the place in the log of the first write matching file (a base
// name) and, if want is not "", that value, or -1.
func (w *cgroupWrites) index(file, want string, from int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := from; i < len(w.log); i++ {
		path, value, _ := strings.Cut(w.log[i], "=")
		if filepath.Base(path) == file && (want == "" || value == want) {
			return i
		}
	}
	return -1
}

// The spawner thread leaves a tree's v1 leaves in the order that never
// lets the tree exceed its limits nor puts mcpvisor in reach of the tree's
// OOM killer: pids.max back to the limit while the thread is still in,
// then the thread out, then the OOM killer on again.
func TestSpawnerLeavesTheLeavesInOrder(t *testing.T) {
	rt, err := Open(Options{NoPIDNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(t.Context())
	mustEnforce(t, rt)
	w := recordCgroupWrites(t, nil)
	marker := testserver.NewMarker(t)
	p, err := rt.Spawn(t.Context(), limitSpec(t, marker, Limits{MemoryBytes: 128 << 20, PIDs: 40}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(t.Context())
	raised := w.index("pids.max", "41", 0)
	entered := w.index("tasks", "", raised)
	lowered := w.index("pids.max", "40", entered)
	out := -1
	for i := lowered; i >= 0; {
		i = w.index("tasks", "", i+1)
		if i < 0 {
			break
		}
		w.mu.Lock()
		base := !strings.Contains(w.log[i], rt.ID()+"/")
		w.mu.Unlock()
		if base {
			out = i
			break
		}
	}
	on := w.index("memory.oom_control", "0", max(out, 0))
	if raised < 0 || entered < 0 || lowered < 0 || out < 0 || on < 0 || !(lowered < out && out < on) {
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("raised %d, entered %d, pids limit back %d, thread out %d, OOM killer on %d; writes:\n%s", raised, entered, lowered, out, on, strings.Join(w.log, "\n"))
	}
}

// A spawner thread that cannot leave a tree's leaves undoes the spawn:
// the tree is killed and reaped, the spawn fails saying why, the thread
// is moved out once more, and nothing is left — no process, no leaf.
func TestAFailedLeaveUndoesTheSpawn(t *testing.T) {
	rt, err := Open(Options{NoPIDNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	mustEnforce(t, rt)
	defer rt.Close(t.Context())
	var failed atomic.Bool
	memoryBase := func(path string) bool {
		return filepath.Base(path) == "tasks" && !strings.Contains(path, rt.ID()+"/") && strings.Contains(path, "/memory")
	}
	w := recordCgroupWrites(t, func(path string, _ []byte) bool {
		// The first move back to the memory hierarchy's base fails.
		return memoryBase(path) && failed.CompareAndSwap(false, true)
	})
	marker := testserver.NewMarker(t)
	p, err := rt.Spawn(t.Context(), limitSpec(t, marker, Limits{MemoryBytes: 128 << 20, PIDs: 40}))
	if err == nil {
		p.Stop(t.Context())
		rt.Close(t.Context())
		t.Fatal("a spawn whose spawner thread could not leave the tree's cgroups succeeded")
	}
	if !strings.Contains(err.Error(), "could not leave the tree's cgroups") || !strings.Contains(err.Error(), "injected write failure") {
		t.Errorf("spawn error: %v", err)
	}
	if pids := testserver.Processes(marker); len(pids) != 0 {
		t.Errorf("processes of the undone spawn left: %v", pids)
	}
	w.mu.Lock()
	n := len(w.log)
	w.mu.Unlock()
	insts := append(rt.v1Instances(), rt.plat.cgroup)
	if err := rt.Close(t.Context()); err != nil {
		t.Fatalf("Close after the undone spawn: %v", err)
	}
	for _, d := range insts {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("instance directory %s left after Close: %v", d, err)
		}
	}
	if n == 0 || !failed.Load() {
		t.Fatal("no move back was failed")
	}
	// The memory leaf's OOM killer stays off from the failed move out
	// until the thread is out: an OOM kill there could pick mcpvisor.
	w.mu.Lock()
	defer w.mu.Unlock()
	fail, out := -1, -1
	for i, e := range w.log {
		path, _, _ := strings.Cut(e, "=")
		if memoryBase(path) {
			if fail < 0 {
				fail = i
			} else if out < 0 {
				out = i
			}
		}
	}
	for i, e := range w.log {
		if strings.HasSuffix(e, "/memory.oom_control=0") && i > fail && (out < 0 || i < out) {
			t.Fatalf("the OOM killer was turned on (write %d) while the thread was still in the memory leaf (failed move %d, out at %d):\n%s", i, fail, out, strings.Join(w.log, "\n"))
		}
	}
	if fail < 0 || out < 0 {
		t.Fatalf("failed move %d, move out %d:\n%s", fail, out, strings.Join(w.log, "\n"))
	}
}
