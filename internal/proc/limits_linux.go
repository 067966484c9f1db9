package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Resource limits on Linux.
//
// Each kind of limit is enforced by one cgroup controller: the cgroup v2
// one when the unified hierarchy offers it to mcpvisor's per-instance
// directory, else the v1 one where a v1 hierarchy has it mounted (a
// hybrid host: v1 controllers, and a v2 tree with none or few). A v2 leaf
// is entered atomically at clone (CLONE_INTO_CGROUP, see start); a v1
// cgroup cannot be, so the tree enters its v1 leaves by inheritance: the
// spawner thread moves itself into them just before the fork and back
// just after (enterV1), and the child, forked from that thread, starts in
// them. Why this and not having the pid-namespace init join them before it
// execs the server: it holds in every containment mode (with or without a
// pid namespace or shim), costs no extra exec, and no process of the tree
// ever runs outside its leaves — the child is in them from its first
// instruction, so a fork right at its start is too. What the spawner
// thread does while it sits there is guarded: it is never the thread-group
// leader (spawner.loop), so mcpvisor's memory is never charged to the leaf
// (v1 charges a process's pages to the memory cgroup of its mm's owner,
// the leader); the leaf's pids.max is raised by one for the thread while it
// is in, so the tree gets exactly its limit; and the OOM killer is held off
// in a memory leaf meanwhile (memory.oom_control), so that an OOM in the
// first microseconds of the tree can never pick mcpvisor.

// ctl is a set of cgroup controllers.
type ctl uint8

const (
	ctlMemory ctl = 1 << iota
	ctlPIDs
	ctlCPU
	ctlCPUAcct // v1 accounting only: v2 counts CPU in every cgroup (cpu.stat)
)

// ctlNames are the controllers by the names the kernel gives them.
var ctlNames = []struct {
	c    ctl
	name string
}{{ctlMemory, "memory"}, {ctlPIDs, "pids"}, {ctlCPU, "cpu"}, {ctlCPUAcct, "cpuacct"}}

// limitCtls are the controllers that enforce a limit, by Limits kind.
var limitCtls = []struct {
	kind string
	c    ctl
}{{LimitMemory, ctlMemory}, {LimitPIDs, ctlPIDs}, {LimitCPU, ctlCPU}}

// needs is the set of controllers l needs.
func needs(l *Limits) ctl {
	var c ctl
	if l == nil {
		return 0
	}
	if l.MemoryBytes > 0 {
		c |= ctlMemory
	}
	if l.PIDs > 0 {
		c |= ctlPIDs
	}
	if l.CPU > 0 {
		c |= ctlCPU
	}
	return c
}

// cpuPeriod is the CFS period a CPU limit's quota is given per, in µs.
const cpuPeriod = 100_000

// cpuQuota is the CFS quota of cores per cpuPeriod, in µs; the kernel
// takes no less than 1 ms.
func cpuQuota(cores float64) int64 {
	return max(int64(cores*cpuPeriod+0.5), 1000)
}

// v1Hier is one cgroup v1 hierarchy in use: the controllers mounted there
// that mcpvisor needs, mcpvisor's own cgroup in it (base) and the
// per-instance directory under it (inst) that holds the trees' leaves.
type v1Hier struct {
	ctls ctl
	base string
	inst string
}

// v1Leaf is one tree's leaf in a v1 hierarchy.
type v1Leaf struct {
	ctls ctl
	dir  string
	base string // where the spawner thread goes back to
}

// limitsRuntime is what a Runtime knows of the limits it can enforce.
type limitsRuntime struct {
	v2    ctl    // controllers enabled for the leaves of the v2 instance directory
	v2Dir string // that directory (plat.cgroup), "" when unused
	v1    []v1Hier
	memV1 struct {
		swap bool // memory.memsw.limit_in_bytes exists: swap can be capped
		oom  bool // memory.oom_control counts oom_kill
	}
	swapV2 bool // memory.swap.max exists in a v2 leaf
}

// has is the set of controllers in use, v2 or v1.
func (l *limitsRuntime) has() ctl {
	c := l.v2
	for _, h := range l.v1 {
		c |= h.ctls
	}
	return c
}

// openLimits finds the controllers that can enforce limits here, creates
// the per-instance directories of the v1 hierarchies that have any, and
// reports each kind of limit and where usage is read from. v2 is the
// per-instance directory of the v2 hierarchy ("" when unused); why says
// why cgroups are not used at all when that is so.
func (rt *Runtime) openLimits(rep *Report, v2 string, why string) {
	lr := &rt.plat.limits
	if why != "" {
		for _, k := range limitCtls {
			rep.addLimit(k.kind, false, why)
		}
		rep.Accounting = "from /proc: " + why
		return
	}
	reasons := map[ctl][]string{}
	v2root, v2err := cgroup2Mount()
	if v2 != "" {
		lr.v2Dir = v2
		var notes map[ctl]string
		lr.v2, notes = enableV2(v2, v2root)
		for c, n := range notes {
			reasons[c] = append(reasons[c], n)
		}
		if lr.v2&ctlMemory != 0 {
			_, err := os.Stat(filepath.Join(v2, "memory.swap.max"))
			lr.swapV2 = err == nil
		}
	} else if v2err != nil {
		for _, k := range limitCtls {
			reasons[k.c] = append(reasons[k.c], "cgroup v2: "+v2err.Error())
		}
	} else {
		for _, k := range limitCtls {
			reasons[k.c] = append(reasons[k.c], "cgroup v2 is not used here (see the cgroup-v2 layer)")
		}
	}

	want := (ctlMemory | ctlPIDs | ctlCPU | ctlCPUAcct) &^ lr.v2
	hiers, err := v1Hierarchies(want)
	if err != nil {
		for _, k := range limitCtls {
			if want&k.c != 0 {
				reasons[k.c] = append(reasons[k.c], "cgroup v1: "+err.Error())
			}
		}
	}
	found := ctl(0)
	for _, h := range hiers {
		found |= h.ctls
		h.inst = filepath.Join(h.base, "mcpvisor-"+rt.id)
		if err := os.Mkdir(h.inst, 0o755); err != nil {
			for _, c := range ctlNames {
				if h.ctls&c.c != 0 {
					reasons[c.c] = append(reasons[c.c], fmt.Sprintf("cgroup v1: cannot create a cgroup under %s: %v", h.base, err))
				}
			}
			continue
		}
		lr.v1 = append(lr.v1, h)
		if h.ctls&ctlMemory != 0 {
			_, err := os.Stat(filepath.Join(h.inst, "memory.memsw.limit_in_bytes"))
			lr.memV1.swap = err == nil
			b, _ := os.ReadFile(filepath.Join(h.inst, "memory.oom_control"))
			_, lr.memV1.oom = statField(string(b), "oom_kill")
		}
	}
	for _, k := range limitCtls {
		if want&k.c != 0 && found&k.c == 0 && err == nil {
			reasons[k.c] = append(reasons[k.c], "no cgroup v1 hierarchy has the "+ctlName(k.c)+" controller mounted")
		}
	}

	for _, k := range limitCtls {
		rep.addLimit(k.kind, lr.has()&k.c != 0, rt.limitDetail(k.kind, k.c, reasons[k.c]))
	}
	rep.Accounting = rt.accountingDetail()
}

// limitDetail says how kind is enforced through controller c, or why it
// is not (reasons, v2's first).
func (rt *Runtime) limitDetail(kind string, c ctl, reasons []string) string {
	lr := &rt.plat.limits
	name := ctlName(c)
	var how string
	switch {
	case lr.v2&c != 0:
		how = "cgroup v2 " + name + " controller, in a leaf under " + lr.v2Dir
	default:
		for _, h := range lr.v1 {
			if h.ctls&c != 0 {
				how = "cgroup v1 " + name + " controller, in a leaf under " + h.inst
			}
		}
	}
	if how == "" {
		return strings.Join(reasons, "; ")
	}
	switch kind {
	case LimitMemory:
		v1 := lr.v2&c == 0
		switch {
		case v1 && lr.memV1.swap:
			how += "; swap capped with it (memory.memsw.limit_in_bytes = the limit)"
		case !v1 && lr.swapV2:
			how += "; swap refused (memory.swap.max 0); a whole tree is killed together (memory.oom.group)"
		default:
			how += "; swap NOT capped (the kernel accounts no swap for cgroups here)"
		}
		if v1 && !lr.memV1.oom {
			how += "; OOM kills cannot be counted (memory.oom_control has no oom_kill: kernel < 4.13)"
		}
	case LimitCPU:
		how += fmt.Sprintf("; a CFS quota per %d ms period", cpuPeriod/1000)
	}
	if len(reasons) > 0 {
		how += " (" + strings.Join(reasons, "; ") + ")"
	}
	return how
}

// accountingDetail says where TreeUsage reads each tree's usage.
func (rt *Runtime) accountingDetail() string {
	lr := &rt.plat.limits
	var from []string
	src := func(c ctl, what, v2file, v1file string) {
		switch {
		case lr.v2&c != 0:
			from = append(from, what+" from cgroup v2 "+v2file)
		default:
			for _, h := range lr.v1 {
				if h.ctls&c != 0 {
					from = append(from, what+" from cgroup v1 "+v1file)
					return
				}
			}
		}
	}
	src(ctlMemory, "memory and its peak", "memory.current and memory.peak", "memory.usage_in_bytes and memory.max_usage_in_bytes")
	if lr.v2Dir != "" {
		from = append(from, "CPU time from cgroup v2 cpu.stat") // every v2 cgroup counts it
	} else {
		src(ctlCPUAcct, "CPU time", "cpu.stat", "cpuacct.usage")
	}
	src(ctlPIDs, "tasks", "pids.current", "pids.current")
	if len(from) == 0 {
		return "every tree's usage from /proc (no cgroup leaf counts it)"
	}
	return strings.Join(from, ", ") + " of each tree's leaves; the rest from /proc"
}

func ctlName(c ctl) string {
	for _, n := range ctlNames {
		if n.c == c {
			return n.name
		}
	}
	return "?"
}

// enableV2 enables, in the subtree of the v2 per-instance directory dir,
// the limit controllers it is offered, and returns them; notes say why
// each other one is not. mount is the v2 hierarchy's root.
func enableV2(dir, mount string) (ctl, map[ctl]string) {
	notes := map[ctl]string{}
	words := func(path string) map[string]bool {
		b, _ := os.ReadFile(path)
		m := map[string]bool{}
		for _, w := range strings.Fields(string(b)) {
			m[w] = true
		}
		return m
	}
	offered := words(filepath.Join(dir, "cgroup.controllers"))
	inTree := words(filepath.Join(mount, "cgroup.controllers"))
	var names []string
	for n := range inTree {
		names = append(names, n)
	}
	slices.Sort(names)
	treeList := "none at all"
	if len(names) > 0 {
		treeList = "only " + strings.Join(names, ", ")
	}
	var got ctl
	for _, k := range limitCtls {
		name := ctlName(k.c)
		switch {
		case offered[name]:
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+name), 0); err != nil {
				notes[k.c] = fmt.Sprintf("cgroup v2: enabling %s in %s: %v", name, dir, err)
				continue
			}
			got |= k.c
		case inTree[name]:
			// mcpvisor's own cgroup holds mcpvisor, so it cannot enable
			// the controller for its children (unless it is the root).
			notes[k.c] = fmt.Sprintf("cgroup v2 has the %s controller, but mcpvisor's cgroup %s does not enable it for its children, and cannot while processes (mcpvisor itself) run in it: v2's no-internal-process rule", name, filepath.Dir(dir))
		default:
			notes[k.c] = fmt.Sprintf("the cgroup v2 hierarchy at %s has no %s controller, %s", mount, name, treeList)
		}
	}
	return got, notes
}

// v1Hierarchies finds the cgroup v1 hierarchies that have any of the
// controllers in want mounted, each with mcpvisor's own cgroup in it.
func v1Hierarchies(want ctl) ([]v1Hier, error) {
	if want == 0 {
		return nil, nil
	}
	// The mounts: controllers (super options) → mount point and root.
	type mnt struct{ point, root string }
	mounts := map[string]mnt{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, opts := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(opts) < 3 || opts[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(opts[2], ",") {
			if _, dup := mounts[o]; !dup {
				mounts[o] = mnt{point: fields[4], root: fields[3]}
			}
		}
	}
	// mcpvisor's cgroup in each hierarchy: "ID:controllers:path".
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var out []v1Hier
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue
		}
		var c ctl
		var m mnt
		for _, name := range strings.Split(parts[1], ",") {
			for _, n := range ctlNames {
				if n.name == name && want&n.c != 0 {
					if mm, ok := mounts[name]; ok {
						c |= n.c
						m = mm
					}
				}
			}
		}
		if c == 0 {
			continue
		}
		rel := parts[2]
		if m.root != "/" {
			rel = strings.TrimPrefix(rel, m.root)
		}
		out = append(out, v1Hier{ctls: c, base: filepath.Join(m.point, rel)})
	}
	return out, nil
}

// limitFile is one file of a leaf and the value to write to it.
type limitFile struct{ name, value string }

// v2LimitFiles are the files a v2 leaf gets for l.
func (lr *limitsRuntime) v2LimitFiles(l *Limits) []limitFile {
	var out []limitFile
	if l == nil {
		return nil
	}
	if l.MemoryBytes > 0 && lr.v2&ctlMemory != 0 {
		out = append(out, limitFile{"memory.max", strconv.FormatUint(l.MemoryBytes, 10)})
		if lr.swapV2 {
			out = append(out, limitFile{"memory.swap.max", "0"})
		}
		out = append(out, limitFile{"memory.oom.group", "1"})
	}
	if l.PIDs > 0 && lr.v2&ctlPIDs != 0 {
		out = append(out, limitFile{"pids.max", strconv.Itoa(l.PIDs)})
	}
	if l.CPU > 0 && lr.v2&ctlCPU != 0 {
		out = append(out, limitFile{"cpu.max", fmt.Sprintf("%d %d", cpuQuota(l.CPU), cpuPeriod)})
	}
	return out
}

// v1LimitFiles are the files a leaf of a v1 hierarchy with controllers c
// gets for l, in the order they must be written. The pids limit is written
// raised by one: the spawner thread counts there while it forks (enterV1
// lowers it after).
func (lr *limitsRuntime) v1LimitFiles(c ctl, l *Limits) []limitFile {
	var out []limitFile
	if l == nil {
		return nil
	}
	if l.MemoryBytes > 0 && c&ctlMemory != 0 {
		v := strconv.FormatUint(l.MemoryBytes, 10)
		out = append(out, limitFile{"memory.limit_in_bytes", v})
		if lr.memV1.swap {
			// memsw is memory and swap together, never below the memory
			// limit: equal, the tree gets no swap beyond its limit.
			out = append(out, limitFile{"memory.memsw.limit_in_bytes", v})
		}
		out = append(out, limitFile{"memory.oom_control", "1"}) // held off while the spawner is in (enterV1)
	}
	if l.PIDs > 0 && c&ctlPIDs != 0 {
		out = append(out, limitFile{"pids.max", strconv.Itoa(l.PIDs + 1)})
	}
	if l.CPU > 0 && c&ctlCPU != 0 {
		out = append(out, limitFile{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
			limitFile{"cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(l.CPU), 10)})
	}
	return out
}

func writeLimitFiles(dir string, files []limitFile) error {
	for _, f := range files {
		if err := writeCgroupFile(filepath.Join(dir, f.name), []byte(f.value), 0); err != nil {
			return fmt.Errorf("cgroup %s: %s = %s: %w", dir, f.name, f.value, err)
		}
	}
	return nil
}

// limitLeaves gives p's v2 leaf (made already, if any) the limits of its
// spec that v2 enforces, and makes its v1 leaves (makeV1Leaves); then it
// records every leaf that counts usage in p.cgroups, for Root.
func (rt *Runtime) limitLeaves(p *Process, name string) error {
	lr := &rt.plat.limits
	if files := lr.v2LimitFiles(p.spec.Limits); len(files) > 0 {
		if p.plat.cgroup == "" {
			return errors.New("proc: resource limits: the tree's cgroup v2 leaf could not be made")
		}
		if err := writeLimitFiles(p.plat.cgroup, files); err != nil {
			return fmt.Errorf("proc: resource limits: %w", err)
		}
	}
	if err := rt.makeV1Leaves(p, name); err != nil {
		return err
	}
	p.cgroups = nil
	if p.plat.cgroup != "" {
		p.cgroups = append(p.cgroups, p.plat.cgroup)
	}
	p.cgroups = append(p.cgroups, p.v1Dirs()...)
	return nil
}

// makeV1Leaves creates p's leaf in every v1 hierarchy in use, named name,
// with the limits of p's spec — when it has any: a tree without limits
// gets no v1 leaf (its usage comes from its v2 leaf and /proc), which
// keeps its start as cheap as before (here, a tree's four v1 leaves cost
// about 0.4 ms to make and enter, 0.2 ms to remove). A limited tree gets a leaf in
// every hierarchy, so that all its usage — the memory its limit counts
// above all — comes from the cgroups. A leaf that cannot be made is left
// out when no limit needs it, and is an error when one does.
func (rt *Runtime) makeV1Leaves(p *Process, name string) error {
	lr := &rt.plat.limits
	if p.spec.Limits.IsZero() {
		return nil
	}
	need := needs(p.spec.Limits)
	for _, h := range lr.v1 {
		dir := filepath.Join(h.inst, name)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			p.plat.v1 = append(p.plat.v1, v1Leaf{ctls: h.ctls, dir: dir, base: h.base})
			err = writeLimitFiles(dir, lr.v1LimitFiles(h.ctls, p.spec.Limits))
		}
		if err != nil {
			if need&h.ctls != 0 {
				return fmt.Errorf("proc: resource limits: %w", err)
			}
			p.log.Debug("no cgroup v1 leaf for the tree's usage", "err", err)
		}
	}
	return nil
}

// writeCgroupFile writes one cgroup control file (a seam for tests).
var writeCgroupFile = os.WriteFile

// enterV1 moves the calling thread — the spawner's, locked to it — into
// p's v1 leaves, and returns the function that moves it back and lowers
// what entering raised (see v1LimitFiles). It must run on the spawner
// thread, right before the fork; leave right after. On error the thread is
// back where it was, as far as it could be moved.
//
// leave works in the order that never lets the tree exceed its limits nor
// exposes mcpvisor to the tree's OOM killer: pids.max goes back to the
// limit while the thread is still inside (a fork the tree makes in between
// finds the limit, not the limit plus one); the thread moves out; then the
// OOM killer of each memory leaf the thread did leave is enabled again —
// never of one it is still in, whose OOM kill could pick mcpvisor itself.
// Its error says what it could not do: the spawn fails then.
func (p *Process) enterV1() (leave func() error, err error) {
	leaves := p.plat.v1
	if len(leaves) == 0 {
		return func() error { return nil }, nil
	}
	tid := []byte(strconv.Itoa(unix.Gettid()))
	moved := 0
	leave = func() error {
		var errs []error
		lim := p.spec.Limits
		if lim != nil && lim.PIDs > 0 {
			for _, l := range leaves {
				if l.ctls&ctlPIDs != 0 {
					if err := writeLimitFiles(l.dir, []limitFile{{"pids.max", strconv.Itoa(lim.PIDs)}}); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		out := make([]bool, len(leaves))
		for i, l := range leaves[:moved] {
			if err := writeCgroupFile(filepath.Join(l.base, "tasks"), tid, 0); err != nil {
				errs = append(errs, fmt.Errorf("moving the spawner thread back to %s: %w", l.base, err))
				continue
			}
			out[i] = true
		}
		for i := moved; i < len(leaves); i++ {
			out[i] = true // never entered
		}
		if lim != nil && lim.MemoryBytes > 0 {
			for i, l := range leaves {
				if l.ctls&ctlMemory == 0 {
					continue
				}
				if !out[i] {
					errs = append(errs, fmt.Errorf("cgroup %s: its OOM killer stays off while the spawner thread is in it", l.dir))
					continue
				}
				if err := writeLimitFiles(l.dir, []limitFile{{"memory.oom_control", "0"}}); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(errs...)
	}
	for _, l := range leaves {
		if err := writeCgroupFile(filepath.Join(l.dir, "tasks"), tid, 0); err != nil {
			_ = leave()
			return nil, fmt.Errorf("proc: entering cgroup %s: %w", l.dir, err)
		}
		moved++
	}
	return leave, nil
}

// v1Dirs are the leaf directories of p in the v1 hierarchies that count
// usage (memory, CPU, tasks), for Root.
func (p *Process) v1Dirs() []string {
	var out []string
	for _, l := range p.plat.v1 {
		if l.ctls&(ctlMemory|ctlCPUAcct|ctlPIDs) != 0 {
			out = append(out, l.dir)
		}
	}
	return out
}

// limitEvents reads the OOM kills and the forks refused by the pids limit
// from p's leaves, v2 and v1; it runs before they are removed.
func (p *Process) limitEvents() limitEvents {
	var ev limitEvents
	read := func(dir, file, key string) int {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0
		}
		n, _ := statField(string(b), key)
		return int(n)
	}
	if d := p.plat.cgroup; d != "" {
		ev.oomKills += read(d, "memory.events", "oom_kill")
		ev.pidsMax += read(d, "pids.events", "max")
	}
	for _, l := range p.plat.v1 {
		if l.ctls&ctlMemory != 0 {
			ev.oomKills += read(l.dir, "memory.oom_control", "oom_kill")
		}
		if l.ctls&ctlPIDs != 0 {
			ev.pidsMax += read(l.dir, "pids.events", "max")
		}
	}
	return ev
}

// releaseV1 removes p's v1 leaves.
func (p *Process) releaseV1() {
	for _, l := range p.plat.v1 {
		if err := removeCgroup(l.dir, time.Second); err != nil {
			p.log.Warn("could not remove cgroup", "err", err)
		}
	}
	p.plat.v1 = nil
}

// closeLimits removes the per-instance directories of the v1 hierarchies.
func (rt *Runtime) closeLimits() error {
	var errs []error
	for _, h := range rt.plat.limits.v1 {
		errs = append(errs, removeCgroup(h.inst, time.Second))
	}
	return errors.Join(errs...)
}

// v1Instances lists the per-instance directories of the v1 hierarchies,
// for the ledger.
func (rt *Runtime) v1Instances() []string {
	var out []string
	for _, h := range rt.plat.limits.v1 {
		out = append(out, h.inst)
	}
	return out
}
