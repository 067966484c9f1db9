package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpvisor/mcpvisor/internal/proc/shim"
)

type platformRuntime struct {
	subreaper bool
	pidns     bool
	userns    bool   // the pid namespace needs its own user namespace (not root)
	shimExec  string // what to exec as the pid namespace's init (see openInit)
	cgroup    string // per-instance cgroup directory, "" when unused
	ledger    string // this instance's ledger file, "" when unused
	limits    limitsRuntime
}

type platformProcess struct {
	pidfd    int
	cgroup   string // leaf directory, "" when unused
	cgroupFD int
	v1       []v1Leaf // leaves in the cgroup v1 hierarchies in use (limits_linux.go)
	shim     bool
	statusR  *os.File // shim's exit-status pipe (our end)
	statusW  *os.File // the shim's end, closed after start
	stopR    *os.File // the shim's end of the stop pipe, closed after start
	stopW    *os.File // closed when a stop begins

	sigMu   sync.Mutex
	reaping bool // set before the leader is reaped: no signal after that
}

func (rt *Runtime) openPlatform() error {
	rep := Report{OS: "linux"}
	rep.add(LayerProcessGroup, true, "every server runs in its own process group; stop signals the whole group")
	if fd, err := unix.PidfdOpen(os.Getpid(), 0); err == nil {
		unix.Close(fd)
		rep.add(LayerPidfd, true, "the leader is watched through a pidfd and kept unreaped until its group is swept")
	} else {
		rep.add(LayerPidfd, false, "pidfd_open failed ("+err.Error()+"); exit is detected by polling /proc")
	}
	rep.add(LayerPdeathsig, true, "servers get SIGKILL when mcpvisor dies (direct child only; set from a locked spawner thread)")

	sub, err := reaper.acquire()
	rt.plat.subreaper = sub
	if sub {
		rep.add(LayerSubreaper, true, "escaped descendants (double fork + setsid) are re-parented to mcpvisor, killed and reaped")
	} else {
		rep.add(LayerSubreaper, false, fmt.Sprintf("PR_SET_CHILD_SUBREAPER failed: %v", err))
	}

	switch {
	case rt.opts.NoPIDNamespace:
		rep.add(LayerPIDNamespace, false, "turned off by configuration")
	default:
		rt.choosePIDNamespace(&rep)
	}

	switch {
	case rt.opts.NoCgroup:
		rep.add(LayerCgroup, false, "turned off by configuration")
		rt.openLimits(&rep, "", "cgroups are turned off by configuration")
	default:
		if dir, err := openCgroupParent(rt.id); err != nil {
			rep.add(LayerCgroup, false, err.Error())
		} else {
			rt.plat.cgroup = dir
			rep.add(LayerCgroup, true, "each server gets a cgroup v2 leaf under "+filepath.Dir(dir)+"; stop ends with cgroup.kill")
		}
		rt.openLimits(&rep, rt.plat.cgroup, "")
	}

	if rt.opts.StateDir == "" {
		rep.add(LayerStaleSweep, false, "no state directory configured")
	} else {
		swept, err := rt.openLedger()
		if err != nil {
			rep.add(LayerStaleSweep, false, err.Error())
		} else {
			rep.add(LayerStaleSweep, true, fmt.Sprintf("trees of killed mcpvisor instances are removed at start-up (this start: %d processes, %d cgroups)", swept.procs, swept.cgroups))
		}
	}
	rt.report = rep
	return nil
}

func (rt *Runtime) closePlatform() error {
	var errs []error
	if rt.plat.cgroup != "" {
		errs = append(errs, removeCgroup(rt.plat.cgroup, time.Second))
	}
	errs = append(errs, rt.closeLimits())
	if rt.plat.ledger != "" {
		if err := os.Remove(rt.plat.ledger); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	reaper.release()
	return errors.Join(errs...)
}

// namespaceAttr adds the pid namespace (and, without root, an identity
// user namespace) to attr.
func namespaceAttr(attr *syscall.SysProcAttr, userns bool) {
	attr.Cloneflags |= syscall.CLONE_NEWPID
	if userns {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
}

// shimCandidate is an executable that can be the init of a pid namespace.
type shimCandidate struct {
	name string // as reported
	path string // what to open: the running binary is /proc/self/exe
	skip string // why it is not tried, if it is not
}

// shimCandidates lists the candidates, best first: the configured shim, or
// mcpvisor-shim next to the running binary; then the running binary
// itself, which always speaks the same protocol.
func (rt *Runtime) shimCandidates() []shimCandidate {
	me := shimCandidate{name: "mcpvisor itself, re-executed", path: "/proc/self/exe"}
	small := rt.opts.ShimPath
	if small == "" {
		self, err := os.Executable()
		if err != nil {
			return []shimCandidate{me} // never a relative lookup in the working directory
		}
		small = filepath.Join(filepath.Dir(self), shim.Name)
		st, err := os.Stat(small)
		switch {
		case err != nil:
			return []shimCandidate{me}
		case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
			return []shimCandidate{{name: small, skip: "is not an executable file"}, me}
		}
	}
	return []shimCandidate{{name: small, path: small}, me}
}

// choosePIDNamespace decides whether servers run in pid namespaces (plain,
// or inside a user namespace) and which executable is their init, by
// probing each candidate.
func (rt *Runtime) choosePIDNamespace(rep *Report) {
	const what = "each server runs under a small init in its own pid namespace; the kernel kills the whole tree when mcpvisor dies, even by SIGKILL"
	cands := rt.shimCandidates()
	var notes []string // candidates passed over, and why
	probe := func(userns bool) (string, shimCandidate, error) {
		notes = notes[:0]
		var last error
		for _, c := range cands {
			if c.skip != "" {
				notes = append(notes, c.name+" "+c.skip)
				continue
			}
			exe, err := openInit(c.path)
			if err == nil {
				err = probePIDNamespace(exe, userns)
			}
			if err == nil {
				return exe, c, nil
			}
			last = err
			notes = append(notes, fmt.Sprintf("%s failed its probe (%v)", c.name, err))
		}
		// The last candidate is mcpvisor itself: its failure is the
		// namespace's, not a stray shim's.
		return "", shimCandidate{}, last
	}
	exe, chosen, err := "", shimCandidate{}, errors.New("user namespace requested")
	if !rt.opts.UserNamespace {
		exe, chosen, err = probe(false)
	}
	detail := what
	if err != nil {
		var err2 error
		if exe, chosen, err2 = probe(true); err2 != nil {
			rep.add(LayerPIDNamespace, false, fmt.Sprintf("cannot create a pid namespace here (%v), nor inside a user namespace (%v)", err, err2))
			return
		}
		rt.plat.userns = true
		detail += " (inside an unprivileged user namespace that maps only your own uid and gid)"
	}
	rt.plat.pidns, rt.plat.shimExec = true, exe
	detail += "; init: " + chosen.name
	switch {
	case len(notes) > 0:
		detail += " (" + strings.Join(notes, "; ") + ")"
		rt.log.Warn("the pid-namespace init falls back to mcpvisor itself", "reason", strings.Join(notes, "; "))
	case len(cands) == 1:
		detail += " (install " + shim.Name + " next to it for faster starts and less memory per server)"
	}
	rep.add(LayerPIDNamespace, true, detail)
}

// initFiles holds the executables chosen as pid-namespace inits open for
// the life of the process, by path: what runs is what passed the probe,
// even if an upgrade replaces or removes the file while mcpvisor runs, and
// no Runtime's Close can pull a descriptor from under a spawn.
var initFiles struct {
	sync.Mutex
	byPath map[string]*os.File
}

// openInit returns the path to exec for the init at path: a descriptor of
// it (O_PATH, numbered 64 or more, out of the way of the low descriptors a
// child arranges before exec) under /proc/self/fd, or path itself for a
// script, whose interpreter could not open that descriptor after exec.
func openInit(path string) (string, error) {
	if f, err := os.Open(path); err == nil {
		var head [2]byte
		n, _ := f.Read(head[:])
		_ = f.Close()
		if n == 2 && string(head[:]) == "#!" {
			return path, nil
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: path, Err: err}
	}
	initFiles.Lock()
	defer initFiles.Unlock()
	if f := initFiles.byPath[path]; f != nil {
		var held unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && held.Dev == st.Dev && held.Ino == st.Ino {
			return fdPath(f), nil
		}
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	if high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 64); err == nil {
		unix.Close(fd)
		fd = high
	}
	f := os.NewFile(uintptr(fd), path)
	if initFiles.byPath == nil {
		initFiles.byPath = map[string]*os.File{}
	}
	initFiles.byPath[path] = f // a replaced file's old descriptor stays open: a spawn may use it
	return fdPath(f), nil
}

// fdPath names an open file so that exec starts exactly that file.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// probeTimeout bounds a shim candidate's probe: a binary that is not a
// shim (a test binary that does not run the shim at init, say) may run
// instead of answering.
var probeTimeout = 5 * time.Second

// probePIDNamespace starts exe as a probe in a new pid namespace and checks
// that it answers as a shim of this protocol version, within probeTimeout;
// past it the probe is killed (the namespace with it: it is its init).
func probePIDNamespace(exe string, userns bool) error {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	namespaceAttr(attr, userns)
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Args = []string{shim.Name}
	cmd.Env = append(Environ(), shim.Env+"="+shim.Probe)
	cmd.SysProcAttr = attr
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return fmt.Errorf("did not answer within %v", probeTimeout)
	}
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(out)); got != shim.Probe {
		return fmt.Errorf("answered %q, not %q (another version?)", truncate(got, 40), shim.Probe)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (rt *Runtime) start(p *Process) error {
	cmd := p.cmd
	p.plat.pidfd = -1
	p.plat.cgroupFD = -1
	attr := &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
		PidFD:     &p.plat.pidfd,
	}
	name := strconv.FormatInt(p.seq, 10) + "-" + sanitize(p.spec.Name)
	if rt.plat.cgroup != "" {
		leaf := filepath.Join(rt.plat.cgroup, name)
		if err := os.Mkdir(leaf, 0o755); err == nil {
			if fd, err := unix.Open(leaf, unix.O_DIRECTORY|unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
				p.plat.cgroup, p.plat.cgroupFD = leaf, fd
				attr.UseCgroupFD, attr.CgroupFD = true, fd
			} else {
				_ = os.Remove(leaf)
			}
		}
	}
	if err := rt.limitLeaves(p, name); err != nil {
		p.releaseCgroup()
		return err
	}
	if rt.plat.pidns {
		if err := p.wrapInShim(attr, rt.plat.shimExec, rt.plat.userns); err != nil {
			p.releaseCgroup()
			return err
		}
	}
	cmd.SysProcAttr = attr

	var err error
	theSpawner.do(func() {
		reaper.mu.Lock()
		defer reaper.mu.Unlock()
		// The tree's v1 leaves are entered by inheritance from this
		// thread (limits_linux.go); its v2 leaf at clone.
		leave, verr := p.enterV1()
		if verr != nil {
			err = verr
			return
		}
		err = startCmd(cmd)
		if lerr := leave(); lerr != nil {
			// The tree might run with its pids limit raised, its OOM
			// killer off or mcpvisor's thread among its tasks: it does
			// not run. Killed and reaped here, before anything owns it.
			lerr = fmt.Errorf("proc: the spawner thread could not leave the tree's cgroups: %w", lerr)
			p.log.Error("a spawn is undone", "err", lerr)
			if err == nil {
				pid := cmd.Process.Pid
				_ = unix.Kill(-pid, unix.SIGKILL)
				_ = unix.Kill(pid, unix.SIGKILL)
				_, _ = cmd.Process.Wait()
				err = lerr
			}
			// Once more, the tree gone: the thread must not stay in its
			// leaves (they could not be removed, and the next tree's
			// limits would count it).
			if again := leave(); again != nil {
				p.log.Error("the spawner thread is still in a tree's cgroups", "err", again)
			}
		}
		if err == nil {
			reaper.own(cmd.Process.Pid)
		}
	})
	if err != nil && strings.HasPrefix(cmd.Path, "/proc/self/fd/") && errors.Is(err, syscall.EACCES) {
		// Under load, a child forked into its cgroup leaf (clone3 with
		// CLONE_INTO_CGROUP) now and then gets EACCES from the kernel
		// when it execs the init through its /proc/self/fd link (about
		// one spawn in a thousand on a busy two-core VM; never with a
		// plain path or without the cgroup). The same exec a moment later
		// succeeds: the caller retries the spawn.
		err = &retryableStart{err}
	}
	if p.plat.statusW != nil {
		_ = p.plat.statusW.Close()
		p.plat.statusW = nil
	}
	if p.plat.stopR != nil {
		_ = p.plat.stopR.Close()
		p.plat.stopR = nil
	}
	if err != nil {
		theSpawner.release()
		p.releaseCgroup()
		closeAll(p.plat.statusR)
		if p.plat.stopW != nil {
			closeAll(p.plat.stopW)
		}
		if p.plat.pidfd >= 0 {
			unix.Close(p.plat.pidfd)
		}
		return err
	}
	return nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '-' || r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	return b.String()
}

// awaitLeaderExit blocks until the leader has exited, without reaping it.
func (p *Process) awaitLeaderExit() {
	if p.plat.pidfd >= 0 && pollLeaderExit(p.pid) {
		return
	}
	if p.plat.pidfd >= 0 {
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PIDFD, p.plat.pidfd, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				return
			}
		}
	}
	// No pidfd (kernel < 5.3): poll the leader's state.
	for {
		st, ok := readStat(p.pid)
		if !ok || st.state == 'Z' || st.state == 'X' {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pollLeaderExit waits for the leader, pid — an unreaped child, so pid
// names it until it is reaped — to exit through the runtime's poller: a
// pidfd of its own, non-blocking (PIDFD_NONBLOCK, Linux 5.10), turns
// readable when the process exits. The wait holds no OS thread, where a
// blocking waitid holds one for as long as the server runs; threads the
// runtime made for such waits are never given back, and each keeps its
// stacks (64 KiB). It reports false, having waited for nothing, where the
// pidfd cannot be opened so or polled: the caller waits blocking.
func pollLeaderExit(pid int) bool {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: in the poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	polled := false
	err = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT, nil)
		for err == unix.EINTR { // interrupted: ask again now (the poller signals only a change)
			err = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT, nil)
		}
		switch err {
		case unix.EAGAIN:
			return false // not yet: wait until the pidfd is readable
		default:
			polled = true // exited (or gone: nothing more to wait for)
			return true
		}
	})
	return err == nil && polled
}

// reap collects the leader's exit status.
func (p *Process) reap() error { return p.cmd.Wait() }

// treeAlive counts the live processes of the tree other than the leader.
func (p *Process) treeAlive() int {
	if p.plat.shim {
		// The pid namespace dies with its init: once the shim has exited,
		// nothing of the tree is left.
		return 0
	}
	n := 0
	if p.plat.cgroup != "" {
		for _, pid := range cgroupProcs(p.plat.cgroup) {
			if st, ok := readStat(pid); ok && pid != p.pid && st.state != 'Z' {
				n++
			}
		}
		return n
	}
	for _, pid := range allPids() {
		if pid == p.pid {
			continue
		}
		if st, ok := readStat(pid); ok && st.pgrp == p.pid && st.state != 'Z' {
			n++
		}
	}
	return n
}

// signalTree sends sig to the whole tree. It is a no-op once the leader is
// being reaped, so it can never reach a recycled process group.
func (p *Process) signalTree(sig syscall.Signal) {
	p.plat.sigMu.Lock()
	defer p.plat.sigMu.Unlock()
	if p.plat.reaping || p.pid <= 0 {
		return // never kill(-0): that is mcpvisor's own process group
	}
	if p.plat.pidfd >= 0 {
		_ = unix.PidfdSendSignal(p.plat.pidfd, sig, nil, 0)
	}
	if !p.plat.shim {
		// The leader is unreaped, so its pid, and thus the group id, is
		// still reserved.
		_ = syscall.Kill(-p.pid, sig)
	}
	if sig == syscall.SIGKILL && p.plat.cgroup != "" {
		_ = cgroupKill(p.plat.cgroup)
	}
}

// sweep kills every process still carrying this tree's TreeEnv (escaped
// descendants) and waits, bounded, for them to go. It then marks the leader
// as being reaped.
func (p *Process) sweep() {
	if !p.plat.shim {
		deadline := time.Now().Add(time.Second)
		for {
			left := killTree(p.tree, false, p.pid)
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	p.plat.sigMu.Lock()
	p.plat.reaping = true
	p.plat.sigMu.Unlock()
}

// killTree SIGKILLs every live process whose TreeEnv is tree (or, with
// prefix, starts with tree+".") except skip, and reports how many it found.
func killTree(tree string, prefix bool, skip int) int {
	self := os.Getpid()
	n := 0
	for _, pid := range allPids() {
		if pid == skip || pid == self {
			continue
		}
		st, ok := readStat(pid)
		if !ok || st.state == 'Z' || !hasEnv(pid, TreeEnv, tree, prefix) {
			continue
		}
		n++
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		// Re-check through the pidfd's process: the pid cannot be recycled
		// while fd is open.
		if hasEnv(pid, TreeEnv, tree, prefix) {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			if st.ppid == self {
				reaper.markAdopted(pid)
			}
		}
		unix.Close(fd)
	}
	return n
}

func (p *Process) release() {
	reaper.disown(p.pid)
	theSpawner.release()
	if p.plat.pidfd >= 0 {
		unix.Close(p.plat.pidfd)
		p.plat.pidfd = -1
	}
	p.releaseCgroup()
	closeAll(p.plat.statusR)
	if p.plat.stopW != nil {
		_ = p.plat.stopW.Close()
	}
	reaper.reapSoon()
}

// releaseCgroup removes the tree's leaves, v2 and v1.
func (p *Process) releaseCgroup() {
	if p.plat.cgroupFD >= 0 {
		unix.Close(p.plat.cgroupFD)
		p.plat.cgroupFD = -1
	}
	if p.plat.cgroup != "" {
		if err := removeCgroup(p.plat.cgroup, time.Second); err != nil {
			p.log.Warn("could not remove cgroup", "err", err)
		}
		p.plat.cgroup = ""
	}
	p.releaseV1()
}

// shimStatus reads the server's exit status that the shim reported.
func (p *Process) shimStatus() (code int, sig syscall.Signal, ok bool) {
	if !p.plat.shim || p.plat.statusR == nil {
		return 0, 0, false
	}
	b, _ := io.ReadAll(io.LimitReader(p.plat.statusR, 64))
	return shim.ParseStatus(string(b))
}

// killEscaped SIGKILLs every process that carries a TreeEnv of this
// runtime, whichever tree it escaped from.
func (rt *Runtime) killEscaped() { killTree(rt.id, true, 0) }

// stopping tells the pid-namespace shim that a stop has begun.
func (p *Process) stopping() {
	if p.plat.stopW != nil {
		_ = p.plat.stopW.Close()
	}
}
