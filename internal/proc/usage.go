package proc

// Usage is what one process tree uses: a server's process and its
// descendants (a pid-namespace init included).
//
// Its memory is one figure on every Linux host: the resident memory of the
// tree's live processes, summed from /proc — what ps and top show of each
// process, whether a cgroup counts the tree or not. The tree's cgroup
// leaf, where it has one and the leaf has the counter, gives the rest: the
// CPU time (which counts the tree's exited processes too), the tasks, and
// what the leaf is charged (ChargedBytes) — what a memory limit counts:
// the tree's own pages, the page cache it brought in and the kernel
// memory it uses, not the pages of files another cgroup brought in first,
// which resident memory counts in every process. The two differ by a few
// MiB for a small server. Zero fields are not known.
//
// A tree has a v2 leaf wherever the cgroup-v2 layer is on, and v1 leaves
// (memory, cpuacct, pids) only when it has limits (Spec.Limits) that v1
// controllers enforce.
type Usage struct {
	// MemoryBytes: the resident memory of the tree's live processes
	// (VmRSS, as statm and top count it).
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	// MemoryPeakBytes: the sum of each live process's peak resident
	// memory (VmHWM), at least MemoryBytes.
	MemoryPeakBytes uint64 `json:"memoryPeakBytes,omitempty"`
	// ChargedBytes: the leaf's memory.current (v2) or
	// memory.usage_in_bytes (v1), what a memory limit counts; 0 without
	// a leaf that counts memory.
	ChargedBytes uint64 `json:"chargedBytes,omitempty"`
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
	x.ChargedBytes += u.ChargedBytes
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
