package proc

// Usage is what one process tree uses: a server's process and its
// descendants (a pid-namespace init included), read from the tree's cgroup
// leaf where it has one and the leaf has the counter, else summed over the
// tree's live processes from /proc. Zero fields are not known.
//
// A tree has a v2 leaf wherever the cgroup-v2 layer is on, and v1 leaves
// (memory, cpuacct, pids) only when it has limits (Spec.Limits) that v1
// controllers enforce. Memory read from a cgroup is what the cgroup is
// charged — what its memory limit counts: the tree's own pages and the
// page cache it brought in, not the pages of files (its binaries) another
// cgroup brought in first, which resident memory counts in every process.
type Usage struct {
	// MemoryBytes: the leaf's memory.current (v2) or memory.usage_in_bytes
	// (v1), else the resident memory of the tree's processes.
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	// MemoryPeakBytes: the leaf's memory.peak (v2) or
	// memory.max_usage_in_bytes (v1), else the sum of each live process's
	// peak resident memory (VmHWM).
	MemoryPeakBytes uint64 `json:"memoryPeakBytes,omitempty"`
	// CPUSeconds: the leaf's cpu.stat usage_usec (v2) or cpuacct.usage
	// (v1), which count the tree's exited processes too; else the user and
	// system time of the live processes and of the children they reaped.
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
	// Tasks: the leaf's pids.current, else the threads of the tree's live
	// processes (what the pids controller counts).
	Tasks int `json:"pids,omitempty"`
}

// Add adds u's counts to x.
func (x *Usage) Add(u Usage) {
	x.MemoryBytes += u.MemoryBytes
	x.MemoryPeakBytes += u.MemoryPeakBytes
	x.CPUSeconds += u.CPUSeconds
	x.Tasks += u.Tasks
}

// Root names one process tree for TreeUsage: its leader and the cgroup
// directories that hold only it (its v2 leaf first, then its v1 leaves of
// the memory, cpuacct and pids hierarchies), if any.
type Root struct {
	PID     int
	Cgroups []string
}

// Root is the tree of p for TreeUsage.
func (p *Process) Root() Root {
	return Root{PID: p.pid, Cgroups: p.cgroups}
}
