package testserver

import (
	"bytes"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// procStat is what the tests need from /proc/PID/stat.
type procStat struct {
	state               byte
	ppid, pgrp, session int
}

func readStat(t *testing.T, pid int) procStat {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("reading stat of %d: %v", pid, err)
	}
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 4 {
		t.Fatalf("odd stat of %d: %q", pid, data)
	}
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("odd stat of %d: %q", pid, data)
		}
		return n
	}
	return procStat{state: f[0][0], ppid: atoi(f[1]), pgrp: atoi(f[2]), session: atoi(f[3])}
}

// waitLive waits until exactly n live processes carry marker and returns
// them, sorted.
func waitLive(t *testing.T, marker string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		pids := LiveProcesses(marker)
		if len(pids) == n {
			slices.Sort(pids)
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("live processes with the marker: %v, want %d of them", pids, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// without returns pids less pid.
func without(pids []int, pid int) []int {
	return slices.DeleteFunc(slices.Clone(pids), func(p int) bool { return p == pid })
}

// waitReaped waits until /proc/PID is gone: the process ended and was
// reaped, not left a zombie.
func waitReaped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not reaped after %v (state %c)", pid, waitLong, processState(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProcessesByMarker(t *testing.T) {
	t.Parallel()
	marker := NewMarker(t)
	p := startFixture(t, marker, nil)
	pid := p.cmd.Process.Pid
	if got := waitLive(t, marker, 1); got[0] != pid {
		t.Errorf("LiveProcesses = %v, want [%d]", got, pid)
	}
	if got := Processes(marker); !slices.Equal(got, []int{pid}) {
		t.Errorf("Processes = %v, want [%d]", got, pid)
	}
	if got := LiveProcesses(NewMarker(t)); got != nil {
		t.Errorf("LiveProcesses of a fresh marker = %v", got)
	}
	if got := Processes(""); got != nil {
		t.Errorf("Processes(\"\") = %v", got)
	}
	// The pid tool agrees.
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pid"}}`)
	if got := callText(t, p.next(), "1"); got != strconv.Itoa(pid) {
		t.Errorf("pid tool = %s, want %d", got, pid)
	}
	p.stdin.Close()
	p.mustExit(0)
	if got := LiveProcesses(marker); got != nil {
		t.Errorf("LiveProcesses after exit = %v", got)
	}
}

func TestProcessSetsidChild(t *testing.T) {
	t.Parallel()
	marker := NewMarker(t)
	p := startFixture(t, marker, []string{"FIXTURE_SETSID_CHILD=1"})
	p.initialize()
	pid := p.cmd.Process.Pid
	kids := without(waitLive(t, marker, 2), pid)
	if len(kids) != 1 {
		t.Fatalf("want one grandchild besides %d, got %v", pid, kids)
	}
	gc := kids[0]
	fs, gs := readStat(t, pid), readStat(t, gc)
	if gs.ppid != pid {
		t.Errorf("grandchild's parent = %d, want %d", gs.ppid, pid)
	}
	if gs.session != gc || gs.session == fs.session || gs.pgrp == fs.pgrp {
		t.Errorf("grandchild %d: session %d, group %d; fixture session %d, group %d: want a new session",
			gc, gs.session, gs.pgrp, fs.session, fs.pgrp)
	}
	// Killing the fixture's process group leaves the grandchild alive.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.killedBy(syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	if got := LiveProcesses(marker); !slices.Equal(got, []int{gc}) {
		t.Errorf("after killing the group, live = %v, want [%d]", got, gc)
	}
	// The grandchild ignores SIGTERM and SIGHUP.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		if err := syscall.Kill(gc, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if got := LiveProcesses(marker); !slices.Equal(got, []int{gc}) {
		t.Errorf("after SIGTERM and SIGHUP, live = %v, want [%d]", got, gc)
	}
	if got := KillProcesses(marker); !slices.Equal(got, []int{gc}) {
		t.Errorf("KillProcesses = %v, want [%d]", got, gc)
	}
	WaitGone(t, marker, waitLong)
}

func TestProcessStdoutChild(t *testing.T) {
	t.Parallel()
	marker := NewMarker(t)
	p := startFixture(t, marker, nil, "-stdout-child")
	p.initialize()
	pid := p.cmd.Process.Pid
	kids := without(waitLive(t, marker, 2), pid)
	if len(kids) != 1 {
		t.Fatalf("want one grandchild besides %d, got %v", pid, kids)
	}
	gc := kids[0]
	if gs := readStat(t, gc); gs.ppid != pid || gs.pgrp != pid {
		t.Errorf("grandchild %d: parent %d, group %d; want both %d", gc, gs.ppid, gs.pgrp, pid)
	}
	// SIGTERM to the group ends the fixture, not the grandchild, which
	// keeps stdout open.
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.killedBy(syscall.SIGTERM)
	select {
	case line, ok := <-p.lines:
		if ok {
			t.Fatalf("unexpected output %q", line)
		}
		t.Fatal("stdout reached EOF while the grandchild lives")
	case <-time.After(300 * time.Millisecond):
	}
	if got := LiveProcesses(marker); !slices.Equal(got, []int{gc}) {
		t.Errorf("after SIGTERM to the group, live = %v, want [%d]", got, gc)
	}
	// SIGKILL to the group takes the grandchild, and stdout ends.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case line, ok := <-p.lines:
		if ok {
			t.Fatalf("unexpected output %q", line)
		}
	case <-time.After(waitLong):
		t.Fatal("stdout still open after SIGKILL to the group")
	}
	WaitGone(t, marker, waitLong)
}

func TestProcessReapsItsChildren(t *testing.T) {
	t.Parallel()
	marker := NewMarker(t)
	p := startFixture(t, marker, []string{"FIXTURE_STDOUT_CHILD=1"}, "-setsid-child")
	p.initialize()
	pid := p.cmd.Process.Pid
	kids := without(waitLive(t, marker, 3), pid)
	for _, gc := range kids {
		if err := syscall.Kill(gc, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, gc := range kids {
		waitReaped(t, gc)
	}
	p.mustRun(50 * time.Millisecond)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	var r map[string]any
	result(t, p.next(), "1", &r)
	p.stdin.Close()
	p.mustExit(0)
	WaitGone(t, marker, waitLong)
}

// -spin burns the CPU time it is given however busy the machine is: a
// fixture sharing one CPU with another spinning fixture still has used
// 300 ms of CPU by the time it serves (the tests that read what a server
// burned hold it to that), where counting wall-clock time it had used
// about half.
func TestProcessSpinUsesTheCPUTimeGiven(t *testing.T) {
	const spin = 300 * time.Millisecond
	Build(t) // not on one CPU
	// Both fixtures are started from this thread pinned to one CPU, and
	// inherit that.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		t.Fatal(err)
	}
	for cpu := 0; cpu < 1024; cpu++ {
		if was.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	startFixture(t, NewMarker(t), []string{"FIXTURE_SPIN=1m"})
	p := startFixture(t, NewMarker(t), []string{"FIXTURE_SPIN=" + spin.String()})
	if err := unix.SchedSetaffinity(0, &was); err != nil {
		t.Fatal(err)
	}
	p.initialize()
	p.stdin.Close()
	p.mustExit(0)
	if used := p.state.UserTime() + p.state.SystemTime(); used < spin {
		t.Errorf("spinning %v used %v of CPU", spin, used)
	}
}
