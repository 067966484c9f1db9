package proc

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100
// on every architecture Linux supports today (the kernel's ABI fixes it,
// whatever CONFIG_HZ is).
const clockTicks = 100

// TreeUsage returns the usage of each root's tree, in the order of roots,
// reading /proc once for all of them; ok[i] is false when roots[i]'s
// leader is gone (its usage is then zero).
func TreeUsage(roots []Root) (out []Usage, ok []bool) {
	out, ok = make([]Usage, len(roots)), make([]bool, len(roots))
	if len(roots) == 0 {
		return out, ok
	}
	stats := map[int]procStat{}
	children := map[int][]int{}
	for _, pid := range allPids() {
		st, good := readStat(pid)
		if !good {
			continue
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
	}
	page := uint64(os.Getpagesize())
	for i, r := range roots {
		if _, alive := stats[r.PID]; !alive {
			continue
		}
		ok[i] = true
		var u Usage
		var ticks uint64
		seen := map[int]bool{}
		stack := []int{r.PID}
		for len(stack) > 0 {
			pid := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[pid] {
				continue
			}
			seen[pid] = true
			st := stats[pid]
			rss, peak := residentMemory(pid)
			if rss == 0 {
				rss = st.rss * page // the process is gone, or has no status
			}
			u.MemoryBytes += rss
			u.MemoryPeakBytes += max(peak, rss)
			ticks += st.cpuTicks
			u.Tasks += st.threads
			stack = append(stack, children[pid]...)
		}
		u.CPUSeconds = float64(ticks) / clockTicks
		u.MemoryPeakBytes = max(u.MemoryPeakBytes, u.MemoryBytes)
		cgroupUsage(&u, r.Cgroups)
		out[i] = u
	}
	return out, ok
}

// cgroupUsage sets, from the cgroup directories dirs (a v2 leaf, or v1
// leaves), what they count of u, each from the first directory that has
// it (a controller that is not enabled there has no file): the memory
// they are charged, and the CPU time and tasks, which replace the /proc
// sums. The memory shown stays the resident memory (Usage).
func cgroupUsage(u *Usage, dirs []string) {
	// read is the content of the first of names found in dirs, and which
	// name it was.
	read := func(names ...string) (name, val string, found bool) {
		for _, d := range dirs {
			for _, n := range names {
				if b, err := os.ReadFile(filepath.Join(d, n)); err == nil {
					return n, strings.TrimSpace(string(b)), true
				}
			}
		}
		return "", "", false
	}
	number := func(names ...string) (uint64, bool) {
		_, v, found := read(names...)
		if !found {
			return 0, false
		}
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	}
	if n, found := number("memory.current", "memory.usage_in_bytes"); found {
		u.ChargedBytes = n
	}
	// CPU: v2's cpu.stat usage_usec, or v1's cpuacct.usage; a v1 cpu
	// hierarchy's cpu.stat (throttling counts, no usage) is passed over.
cpu:
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "cpu.stat")); err == nil {
			if n, found := statField(string(b), "usage_usec"); found {
				u.CPUSeconds = float64(n) / 1e6
				break cpu
			}
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpuacct.usage")); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
				u.CPUSeconds = float64(n) / 1e9 // nanoseconds
				break cpu
			}
		}
	}
	if n, found := number("pids.current"); found {
		u.Tasks = int(n)
	}
}

// statField is the value of key in a flat-keyed cgroup file ("key value"
// lines, as cpu.stat).
func statField(text, key string) (uint64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), " ")
		if found && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// residentMemory is the resident memory of process pid and its peak
// (VmRSS and VmHWM of /proc/PID/status), 0 each when unknown. VmRSS is the
// exact count that statm and top read; the rss field of /proc/PID/stat
// is the kernel's approximate per-CPU one, off by hundreds of KiB.
func residentMemory(pid int) (rss, peak uint64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	kb := func(rest []byte) uint64 {
		f := bytes.Fields(rest) // "1234 kB"
		if len(f) >= 1 {
			if n, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil {
				return n * 1024
			}
		}
		return 0
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if rest, found := bytes.CutPrefix(line, []byte("VmHWM:")); found {
			peak = kb(rest)
		} else if rest, found := bytes.CutPrefix(line, []byte("VmRSS:")); found {
			rss = kb(rest)
			break // after VmHWM in the file
		}
	}
	return rss, peak
}
