package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ledgerEntry records one running mcpvisor instance, so that the next start
// can tell a live instance from a killed one and clean up after the latter.
type ledgerEntry struct {
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	Start  uint64 `json:"start"` // /proc starttime of PID: guards against pid reuse
	Cgroup string `json:"cgroup,omitempty"`
	// CgroupsV1 are its per-instance directories in the cgroup v1
	// hierarchies (limits_linux.go).
	CgroupsV1 []string `json:"cgroupsV1,omitempty"`
}

type sweepCount struct{ procs, cgroups int }

// openLedger sweeps the trees of dead instances and records this one.
func (rt *Runtime) openLedger() (sweepCount, error) {
	dir := filepath.Join(rt.opts.StateDir, "instances")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sweepCount{}, fmt.Errorf("state directory: %w", err)
	}
	n, err := sweepStale(dir, rt.log)
	if err != nil {
		return n, err
	}
	self, ok := readStat(os.Getpid())
	if !ok {
		return n, errors.New("cannot read /proc/self/stat")
	}
	e := ledgerEntry{ID: rt.id, PID: os.Getpid(), Start: self.startTime, Cgroup: rt.plat.cgroup, CgroupsV1: rt.v1Instances()}
	b, _ := json.Marshal(e)
	path := filepath.Join(dir, rt.id+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return n, fmt.Errorf("state directory: %w", err)
	}
	rt.plat.ledger = path
	return n, nil
}

// sweepStale removes what instances that are no longer running left
// behind: processes carrying their TreeEnv, and their cgroups.
func sweepStale(dir string, log interface{ Warn(string, ...any) }) (sweepCount, error) {
	var n sweepCount
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return n, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var e ledgerEntry
		if err := json.Unmarshal(b, &e); err != nil || e.ID == "" || strings.ContainsAny(e.ID, "./") {
			log.Warn("removing unreadable ledger entry", "file", f)
			_ = os.Remove(f)
			continue
		}
		if st, ok := readStat(e.PID); ok && st.startTime == e.Start && st.state != 'Z' {
			continue // that instance is alive: its trees are its own
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			k := killTree(e.ID, true, 0)
			n.procs += k
			if k == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, cg := range append([]string{e.Cgroup}, e.CgroupsV1...) {
			// Only the instance's own directory, by its name: a ledger
			// entry never names another cgroup to remove.
			if cg == "" || filepath.Base(cg) != "mcpvisor-"+e.ID {
				continue
			}
			if _, err := os.Stat(cg); err == nil {
				n.cgroups++
				if err := removeCgroup(cg, 2*time.Second); err != nil {
					log.Warn("stale cgroup not removed", "cgroup", cg, "err", err)
				}
			}
		}
		_ = os.Remove(f)
	}
	return n, nil
}
