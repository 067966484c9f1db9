package testserver

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// Processes returns the pids of the processes whose environment holds
// MarkerEnv=marker, read from /proc/PID/environ. It skips processes it may not
// read and this process itself. A zombie has no environment left, so it is
// normally not found; [LiveProcesses] also drops processes that are dying.
// Off Linux it returns nil.
func Processes(marker string) []int {
	if marker == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(MarkerEnv + "=" + marker)
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// LiveProcesses is [Processes] without zombies and dead processes (state Z
// or X in /proc/PID/stat) and without processes that are already gone.
// Off Linux it returns nil.
func LiveProcesses(marker string) []int {
	var live []int
	for _, pid := range Processes(marker) {
		switch processState(pid) {
		case 0, 'Z', 'X', 'x':
			continue
		}
		live = append(live, pid)
	}
	return live
}

// KillProcesses sends SIGKILL to every live process with MarkerEnv=marker
// and returns their pids. Off Linux it does nothing and returns nil.
func KillProcesses(marker string) []int {
	pids := LiveProcesses(marker)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return pids
}

// processState returns the state letter of /proc/PID/stat, or 0 if the
// process is gone.
func processState(pid int) byte {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name in parentheses may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}
