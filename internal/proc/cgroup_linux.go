package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupV2Dir returns the directory of mcpvisor's own cgroup in the cgroup
// v2 hierarchy (pure v2 or the "unified" mount of a hybrid layout).
func cgroupV2Dir() (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, rel), nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mountpoint ... - fstype source options
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) >= 5 {
			return fields[4], nil
		}
	}
	return "", errors.New("cgroup v2 is not mounted")
}

// openCgroupParent creates mcpvisor's per-instance cgroup under its own
// cgroup and checks that it can kill through cgroup.kill.
func openCgroupParent(id string) (string, error) {
	base, err := cgroupV2Dir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "mcpvisor-"+id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create a cgroup under %s: %w", base, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("cgroup.kill not available (kernel < 5.14?): %w", err)
	}
	return dir, nil
}

// cgroupProcs lists the pids in a cgroup.
func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		var pid int
		if _, err := fmt.Sscan(string(f), &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killPids SIGKILLs each of pids through a pidfd, mcpvisor itself aside
// (a v1 cgroup lists a process any of whose threads it holds).
func killPids(pids []int) {
	self := os.Getpid()
	for _, pid := range pids {
		if pid == self {
			continue
		}
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			unix.Close(fd)
		}
	}
}

func cgroupKill(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
}

// removeCgroup kills what is left in dir and its children, waits (bounded)
// for them to go and removes the directories, deepest first.
func removeCgroup(dir string, wait time.Duration) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	deadline := time.Now().Add(wait)
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if pids := cgroupProcs(d); len(pids) > 0 {
			if err := cgroupKill(d); err != nil {
				killPids(pids) // a v1 cgroup has no cgroup.kill
			}
		}
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
