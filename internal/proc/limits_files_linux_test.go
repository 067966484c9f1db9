package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// This machine's cgroup v2 tree has no memory, pids or cpu controller, so
// the v2 path is checked here on files: which controllers are enabled for
// the leaves and why the others are not, and what each leaf gets.
func TestEnableV2(t *testing.T) {
	mount := t.TempDir()
	dir := filepath.Join(mount, "own", "mcpvisor-x")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(mount, "cgroup.controllers"), "cpuset cpu io memory pids hugetlb\n")
	// mcpvisor's cgroup enables cpu for its children, not memory (it
	// runs processes: v2's no-internal-process rule).
	write(filepath.Join(dir, "cgroup.controllers"), "cpu\n")
	write(filepath.Join(dir, "cgroup.subtree_control"), "")
	got, notes := enableV2(dir, mount)
	if got != ctlCPU {
		t.Fatalf("enabled %b, want cpu alone", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); string(b) != "+cpu" {
		t.Errorf("subtree_control written %q", b)
	}
	if n := notes[ctlMemory]; !strings.Contains(n, "no-internal-process rule") || !strings.Contains(n, filepath.Join(mount, "own")) {
		t.Errorf("memory note %q", n)
	}

	// A tree with none of them.
	write(filepath.Join(mount, "cgroup.controllers"), "hugetlb\n")
	write(filepath.Join(dir, "cgroup.controllers"), "")
	got, notes = enableV2(dir, mount)
	if got != 0 || !strings.Contains(notes[ctlPIDs], "has no pids controller, only hugetlb") {
		t.Errorf("enabled %b, notes %q", got, notes)
	}
}

func TestLimitFiles(t *testing.T) {
	l := &Limits{MemoryBytes: 64 << 20, PIDs: 32, CPU: 0.25}
	v2 := limitsRuntime{v2: ctlMemory | ctlPIDs | ctlCPU, swapV2: true}
	if got := v2.v2LimitFiles(l); !sameFiles(got, []limitFile{
		{"memory.max", "67108864"}, {"memory.swap.max", "0"}, {"memory.oom.group", "1"},
		{"pids.max", "32"}, {"cpu.max", "25000 100000"},
	}) {
		t.Errorf("v2 files %v", got)
	}
	if got := (&limitsRuntime{v2: ctlPIDs}).v2LimitFiles(l); !sameFiles(got, []limitFile{{"pids.max", "32"}}) {
		t.Errorf("v2 files with pids alone %v", got)
	}
	var v1 limitsRuntime
	v1.memV1.swap = true
	if got := v1.v1LimitFiles(ctlMemory, l); !sameFiles(got, []limitFile{
		// memory before memsw (never below it), the OOM killer held off
		// while the spawner thread is in the leaf
		{"memory.limit_in_bytes", "67108864"}, {"memory.memsw.limit_in_bytes", "67108864"}, {"memory.oom_control", "1"},
	}) {
		t.Errorf("v1 memory files %v", got)
	}
	if got := v1.v1LimitFiles(ctlPIDs, l); !sameFiles(got, []limitFile{{"pids.max", "33"}}) { // the spawner thread's place
		t.Errorf("v1 pids files %v", got)
	}
	if got := v1.v1LimitFiles(ctlCPU|ctlCPUAcct, l); !sameFiles(got, []limitFile{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "25000"}}) {
		t.Errorf("v1 cpu files %v", got)
	}
	if got := v1.v1LimitFiles(ctlCPUAcct, l); got != nil {
		t.Errorf("cpuacct gets %v", got)
	}
	if q := cpuQuota(0.001); q != 1000 {
		t.Errorf("quota of 0.001 cores: %d, want the kernel's 1 ms floor", q)
	}
}

func sameFiles(a, b []limitFile) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
