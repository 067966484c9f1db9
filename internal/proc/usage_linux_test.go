package proc

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A cgroup leaf's counters replace the /proc sums of CPU time and tasks,
// field by field, from the first directory that has each (v2 names or v1
// ones), and give what the leaf is charged; the memory shown stays the
// resident memory /proc gave. A leaf without a controller (a v2 tree with
// none enabled has only cpu.stat) leaves the other fields as /proc had
// them.
func TestCgroupUsageFiles(t *testing.T) {
	write := func(dir string, files map[string]string) string {
		for name, v := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	fromProc := Usage{MemoryBytes: 1000, MemoryPeakBytes: 2000, CPUSeconds: 1.5, Tasks: 3}
	for _, c := range []struct {
		name string
		dirs []string
		want Usage
	}{
		{"v2", []string{write(t.TempDir(), map[string]string{
			"memory.current": "4096\n", "memory.peak": "8192\n", "pids.current": "7\n",
			"cpu.stat": "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
		})}, Usage{MemoryBytes: 1000, MemoryPeakBytes: 2000, ChargedBytes: 4096, CPUSeconds: 2.5, Tasks: 7}},
		{"v1", []string{
			write(t.TempDir(), map[string]string{"memory.usage_in_bytes": "5000", "memory.max_usage_in_bytes": "9000"}),
			write(t.TempDir(), map[string]string{"cpuacct.usage": "3000000000"}),
			write(t.TempDir(), map[string]string{"pids.current": "4"}),
		}, Usage{MemoryBytes: 1000, MemoryPeakBytes: 2000, ChargedBytes: 5000, CPUSeconds: 3, Tasks: 4}},
		{"v2 without controllers", []string{write(t.TempDir(), map[string]string{"cpu.stat": "usage_usec 4000000\n"})},
			Usage{MemoryBytes: 1000, MemoryPeakBytes: 2000, CPUSeconds: 4, Tasks: 3}},
		{"memory alone", []string{write(t.TempDir(), map[string]string{"memory.current": "5000"})},
			Usage{MemoryBytes: 1000, MemoryPeakBytes: 2000, ChargedBytes: 5000, CPUSeconds: 1.5, Tasks: 3}},
		{"garbage", []string{write(t.TempDir(), map[string]string{"memory.current": "lots", "cpu.stat": "nothing here"})}, fromProc},
		{"gone", []string{filepath.Join(t.TempDir(), "removed")}, fromProc},
	} {
		u := fromProc
		cgroupUsage(&u, c.dirs)
		if u != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, u, c.want)
		}
	}
}

// TreeUsage measures a real server: the memory it holds, the CPU it
// burned and its threads, with and without its cgroup leaf; a tree that
// is gone is reported so.
func TestTreeUsage(t *testing.T) {
	const holdMB = 48
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker, "FIXTURE_HOLD_MB=48", "FIXTURE_SPIN=300ms"))
			if err != nil {
				t.Fatal(err)
			}
			newClient(p).initialize(t) // served: the memory is held, the spin done
			root := p.Root()
			// Its v2 leaf first, then its v1 memory, cpuacct and pids
			// leaves on a host that has them.
			if rt.Report().Active(LayerCgroup) != (len(root.Cgroups) >= 1 && root.Cgroups[0] == p.plat.cgroup) {
				t.Fatalf("cgroup layer %v, root %+v", rt.Report().Active(LayerCgroup), root)
			}
			got, ok := TreeUsage([]Root{root, {PID: 1 << 30}})
			if !ok[0] || ok[1] {
				t.Fatalf("found %v, want the server and not the made-up pid", ok)
			}
			u := got[0]
			if u.MemoryBytes < holdMB<<20 || u.MemoryPeakBytes < u.MemoryBytes {
				t.Errorf("memory %d, peak %d: want at least the %d MiB held, and a peak no lower", u.MemoryBytes, u.MemoryPeakBytes, holdMB)
			}
			if len(root.Cgroups) > 0 {
				if _, err := os.Stat(filepath.Join(root.Cgroups[0], "memory.current")); err == nil && u.ChargedBytes < holdMB<<20 {
					t.Errorf("the leaf is charged %d bytes, want at least the %d MiB held", u.ChargedBytes, holdMB)
				}
			}
			if u.CPUSeconds < 0.25 {
				t.Errorf("%.3f CPU seconds, want the 300 ms spun", u.CPUSeconds)
			}
			if u.Tasks < 2 { // a Go program runs several threads
				t.Errorf("%d tasks", u.Tasks)
			}
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, ok := TreeUsage([]Root{{PID: root.PID}}); ok[0] {
				t.Error("a stopped tree is still measured")
			}
			t.Logf("%+v (cgroup leaf: %v)", u, root.Cgroups)
		})
	}
}
