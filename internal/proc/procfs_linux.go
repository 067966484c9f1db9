package proc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procStat is the part of /proc/PID/stat the containment code needs.
type procStat struct {
	pid, ppid, pgrp, session int
	state                    byte
	startTime                uint64 // clock ticks after boot; with pid, identifies a process
	rss                      uint64 // resident pages
	cpuTicks                 uint64 // utime+stime+cutime+cstime: its CPU and that of the children it reaped
	threads                  int
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(b)
}

// parseStat parses a /proc/PID/stat line. The command name is in
// parentheses and may itself contain spaces and parentheses, so the fields
// are read after the last ')'.
func parseStat(b []byte) (procStat, bool) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 >= len(b) {
		return procStat{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return procStat{}, false
	}
	f := strings.Fields(string(b[end+2:]))
	// f[0]=state f[1]=ppid f[2]=pgrp f[3]=session ... f[19]=starttime
	if len(f) < 20 {
		return procStat{}, false
	}
	s := procStat{pid: pid, state: f[0][0]}
	s.ppid, _ = strconv.Atoi(f[1])
	s.pgrp, _ = strconv.Atoi(f[2])
	s.session, _ = strconv.Atoi(f[3])
	s.startTime, _ = strconv.ParseUint(f[19], 10, 64)
	for _, i := range []int{11, 12, 13, 14} {
		n, _ := strconv.ParseInt(f[i], 10, 64) // cutime and cstime are signed in the kernel's format
		s.cpuTicks += uint64(max(n, 0))
	}
	s.threads, _ = strconv.Atoi(f[17])
	if len(f) > 21 {
		s.rss, _ = strconv.ParseUint(f[21], 10, 64)
	}
	return s, true
}

// allPids lists the numeric entries of /proc.
func allPids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hasEnv reports whether /proc/PID/environ holds key=value exactly, or
// key=value+"." prefix matches when prefix is true.
func hasEnv(pid int, key, value string, prefix bool) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(key + "=" + value)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if prefix && bytes.HasPrefix(kv, want) && len(kv) > len(want) && kv[len(want)] == '.' {
			return true
		}
		if !prefix && bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// childrenOf lists the children of pid across all its threads. The
// reaper calls it at every SIGCHLD: it lists the task directory once and
// reads each thread's children file into one buffer (a glob of
// task/*/children would list every task's directory too).
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	tids, _ := d.Readdirnames(-1)
	_ = d.Close()
	var out []int
	var buf bytes.Buffer
	for _, tid := range tids {
		f, err := os.Open(dir + tid + "/children")
		if err != nil {
			continue
		}
		buf.Reset()
		_, err = buf.ReadFrom(f)
		_ = f.Close()
		if err != nil {
			continue
		}
		for f := range bytes.FieldsSeq(buf.Bytes()) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// hasEnvKey reports whether /proc/PID/environ defines key.
func hasEnvKey(pid int, key string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	return bytes.HasPrefix(b, []byte(key+"=")) || bytes.Contains(b, []byte("\x00"+key+"="))
}
