package fleet

import (
	"context"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// LimitsStatus is a server's configured resource limits (config.Limits:
// each of its process trees'), and those this machine cannot enforce.
type LimitsStatus struct {
	MemoryBytes        uint64  `json:"memoryBytes,omitempty"`
	PIDs               int     `json:"pids,omitempty"`
	CPU                float64 `json:"cpu,omitempty"`
	MaxIdleMemoryBytes uint64  `json:"maxIdleMemoryBytes,omitempty"`
	// ChargedBytes is what the cgroups of the server's running trees are
	// charged now (proc.Usage.ChargedBytes): what its memory limit counts,
	// which is not the memory shown (resident). 0 when unknown.
	ChargedBytes uint64 `json:"chargedBytes,omitempty"`
	// NotEnforced names each limit set that the process runtime cannot
	// enforce here, with why ("memory: ..."): the server runs without it.
	NotEnforced []string `json:"notEnforced,omitempty"`
}

// limitsStatus is the LimitsStatus of cfg, nil when it sets no limit.
func (f *Fleet) limitsStatus(cfg *config.Server) *LimitsStatus {
	l := cfg.Limits
	if l == nil {
		return nil
	}
	ls := &LimitsStatus{MemoryBytes: l.Memory, PIDs: l.PIDs, CPU: l.CPU, MaxIdleMemoryBytes: l.MaxIdleMemory}
	if rt := f.opts.Runtime; rt != nil {
		for _, n := range rt.Report().NotEnforced(procLimits(l)) {
			ls.NotEnforced = append(ls.NotEnforced, n.Name+": "+n.Detail)
		}
	}
	return ls
}

// endedTree is what countTree (and an exit event) reads of a process
// tree (*proc.Process).
type endedTree interface {
	Pid() int
	Done() <-chan struct{}
	Status() proc.ExitStatus
}

// countTree is countEnd for the tree p.
func (s *Server) countTree(p endedTree) {
	add := func() { s.countStatus(p.Status()) }
	select {
	case <-p.Done():
		add()
		return
	default:
	}
	// A stop whose context ended before the tree was gone: the tree is
	// being killed, and is gone within proc's kill bound.
	s.f.spawn(func(ctx context.Context) { // ends with the fleet
		t := time.NewTimer(endCountWait)
		defer t.Stop()
		select {
		case <-p.Done():
			add()
		case <-t.C:
		case <-ctx.Done():
		}
	})
}

// countStatus counts a tree that ended with st: an OOM kill, the forks
// its pids limit refused.
func (s *Server) countStatus(st proc.ExitStatus) {
	if st.Kind != proc.ExitOOM && st.PIDsLimitHits == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	en := s.endsLocked()
	if st.Kind == proc.ExitOOM {
		en.oomKills++
	}
	en.pidsLimitHits += st.PIDsLimitHits
}

// endCountWait bounds countEnd's wait for a tree being killed.
const endCountWait = 30 * time.Second

// limitCounts are the server's counters of its limits' work: trees killed
// by the memory limit, forks refused by the pids limit.
func (s *Server) limitCounts() (oomKills, pidsLimitHits int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ends == nil {
		return 0, 0
	}
	return s.ends.oomKills, s.ends.pidsLimitHits
}

// memoryCheckEvery is how often a running instance of a server with
// maxIdleMemory has its tree's memory looked at while nothing is in
// flight.
const memoryCheckEvery = 5 * time.Second

// maxIdleMemory is cfg's maxIdleMemory, 0 when none.
func maxIdleMemory(cfg *config.Server) uint64 {
	if cfg.Limits == nil {
		return 0
	}
	return cfg.Limits.MaxIdleMemory
}

// treeMemory is the memory the tree of l uses (proc.Usage.MemoryBytes:
// the resident memory of its processes, the figure every view shows), and
// whether it was measured.
func (in *instance) treeMemory(l Live) (uint64, bool) {
	r, ok := rootOf(l)
	if !ok {
		return 0, false
	}
	u, alive := in.srv.f.opts.TreeUsage([]proc.Root{r})
	if len(u) != 1 || !alive[0] {
		return 0, false
	}
	return u[0].MemoryBytes, true
}

// rootOf is the process tree of a live connection, if it has a local one.
// A test's connection says its own (Root).
func rootOf(l Live) (proc.Root, bool) {
	switch c := l.(type) {
	case *backend.Conn:
		if c != nil && c.Process() != nil {
			return c.Process().Root(), true
		}
	case interface{ Root() proc.Root }:
		return c.Root(), true
	}
	return proc.Root{}, false
}
