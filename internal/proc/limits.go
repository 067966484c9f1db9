package proc

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits bound what one process tree may use (Spec.Limits); a zero field
// sets no limit. They hold for the whole tree — the server, its
// descendants and, under a pid namespace, its small init — and for each
// tree on its own: every process of a per-session server has its own.
//
// On Linux they are enforced by cgroup controllers: those of the v2
// (unified) hierarchy where it has them, else the v1 ones (Report.Limits
// says which, or why a kind is not enforced). A kind the machine cannot
// enforce is not an error: the tree starts without it and the runtime
// logs a warning, once per server and kind. Elsewhere none is enforced.
type Limits struct {
	// MemoryBytes caps the tree's memory (v2 memory.max, v1
	// memory.limit_in_bytes), page cache and kernel memory included, and
	// its swap with it where the controller accounts swap (v2
	// memory.swap.max 0; v1 memory.memsw.limit_in_bytes equal to the
	// limit), so that the limit means what it says. Past it the kernel
	// reclaims, then kills: on v2 the whole tree (memory.oom.group), on
	// v1 the process the OOM killer picks (the largest). The tree's
	// ExitStatus is then ExitOOM.
	MemoryBytes uint64
	// PIDs caps the tree's tasks — processes and threads, the init of
	// its pid namespace included (a few threads) — through pids.max: a
	// fork or thread creation beyond it fails with EAGAIN, and
	// ExitStatus.PIDsLimitHits counts the refusals.
	PIDs int
	// CPU caps the tree's CPU time in cores (1.5: one and a half CPUs'
	// worth in every period), as a CFS quota per 100 ms period (v2
	// cpu.max, v1 cpu.cfs_quota_us and cpu.cfs_period_us).
	CPU float64
}

// IsZero reports whether l (which may be nil) sets no limit.
func (l *Limits) IsZero() bool { return l == nil || *l == Limits{} }

// String lists the limits set, e.g. "memory 64 MiB, pids 32, cpu 0.25".
func (l *Limits) String() string {
	if l.IsZero() {
		return "none"
	}
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, LimitMemory+" "+FormatBytes(l.MemoryBytes))
	}
	if l.PIDs > 0 {
		parts = append(parts, LimitPIDs+" "+strconv.Itoa(l.PIDs))
	}
	if l.CPU > 0 {
		parts = append(parts, LimitCPU+" "+strconv.FormatFloat(l.CPU, 'g', -1, 64))
	}
	return strings.Join(parts, ", ")
}

// Limit kinds, as Report.Limits names them.
const (
	LimitMemory = "memory"
	LimitPIDs   = "pids"
	LimitCPU    = "cpu"
)

// kinds lists the kinds l sets.
func (l *Limits) kinds() []string {
	if l == nil {
		return nil
	}
	var out []string
	if l.MemoryBytes > 0 {
		out = append(out, LimitMemory)
	}
	if l.PIDs > 0 {
		out = append(out, LimitPIDs)
	}
	if l.CPU > 0 {
		out = append(out, LimitCPU)
	}
	return out
}

// FormatBytes writes n in binary units, as the config spells them:
// "512 MiB", "1.5 GiB", "300 B" (two decimals at most).
func FormatBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	s := strings.TrimRight(strconv.FormatFloat(f, 'f', 2, 64), "0")
	return strings.TrimSuffix(s, ".") + " " + units[i]
}

// NotEnforced lists the kinds of limit l sets that r says cannot be
// enforced here, each with why (r.Limits' detail); nil when every one is.
func (r Report) NotEnforced(l *Limits) []Layer {
	var out []Layer
	for _, k := range l.kinds() {
		if s := r.limit(k); !s.Active {
			out = append(out, s)
		}
	}
	return out
}

// limit is the entry of Limits for kind; an unknown kind is not enforced.
func (r Report) limit(kind string) Layer {
	for _, l := range r.Limits {
		if l.Name == kind {
			return l
		}
	}
	return Layer{Name: kind, Detail: "not reported by this runtime"}
}
