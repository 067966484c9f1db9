package watchdog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Helper roles: the test binary re-executed as one link of a process chain
// test → root → middle → grandchild. The grandchild runs a watchdog on the
// middle process with the real detector; the test SIGKILLs the middle one
// and times how long the grandchild takes to notice. Every link inherits
// the report pipe as fd 3.
const (
	roleRoot       = "root"       // optionally a subreaper; starts middle, reaps
	roleMiddle     = "middle"     // starts grandchild, waits
	roleGrandchild = "grandchild" // runs the watchdog, reports on fd 3
	roleSleeper    = "sleeper"    // sleeps until killed

	subreaperEnv = "WATCHDOG_TEST_SUBREAPER"
	reportFD     = 3
)

// orphanBound is how fast the grandchild must report being orphaned: far
// below any polling interval, so only an OS notification can meet it.
const orphanBound = 500 * time.Millisecond

func runRole(role string) int {
	report := os.NewFile(reportFD, "report")
	switch role {
	case roleRoot:
		return runRoot(report)
	case roleMiddle:
		cmd := helper(roleGrandchild, report)
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(report, "error", err)
			return 1
		}
		cmd.Wait() // never returns: the test kills us first
		return 1
	case roleGrandchild:
		return runGrandchild(report)
	case roleSleeper:
		time.Sleep(time.Hour)
		return 1
	}
	return 2
}

// helper returns a command that runs this binary in role, with report as
// its fd 3.
func helper(role string, report *os.File, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	if report != nil {
		cmd.ExtraFiles = []*os.File{report}
	}
	return cmd
}

func runRoot(report *os.File) int {
	subreaper := os.Getenv(subreaperEnv) != ""
	if subreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(report, "error", err)
			return 1
		}
	}
	cmd := helper(roleMiddle, report)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(report, "error", err)
		return 1
	}
	cmd.Wait() // the middle process is SIGKILLed by the test
	if subreaper {
		// The grandchild is ours now; reap it and say how it ended.
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				break // ECHILD: nothing left
			}
			fmt.Fprintln(report, "reaped", pid, ws.ExitStatus())
		}
	}
	return 0
}

func runGrandchild(report *os.File) int {
	terminated := make(chan struct{})
	wd, err := Start(context.Background(), Config{
		// Polling could not meet orphanBound at this interval: a pass
		// proves the pidfd did the work.
		PollInterval: time.Hour,
		Logger:       slog.New(slog.DiscardHandler),
		OnTerminate: func(r Reason) {
			fmt.Fprintln(report, "terminated", r, os.Getppid())
			close(terminated)
		},
	})
	if err != nil {
		fmt.Fprintln(report, "error", err)
		return 1
	}
	fmt.Fprintln(report, "ready", os.Getpid(), os.Getppid(), wd.detector)
	<-terminated
	wd.Stop()
	return 0
}

// TestOrphanDetectedImmediately kills a real parent with SIGKILL and checks
// that its child's watchdog notices within orphanBound, both when the child
// is re-parented to init and when it goes to a subreaper (where the seed's
// "ppid == 1" test would never fire).
func TestOrphanDetectedImmediately(t *testing.T) {
	for _, tc := range []struct {
		name      string
		subreaper bool
	}{
		{"reparented to init", false},
		{"reparented to subreaper", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			latency, ppid := orphanChain(t, tc.subreaper)
			t.Logf("orphan detected %v after SIGKILL of the parent (re-parented to %d)", latency, ppid)
			if latency > orphanBound {
				t.Errorf("orphan detected after %v, want ≤ %v", latency, orphanBound)
			}
		})
	}
}

// orphanChain starts test → root → middle → grandchild, SIGKILLs middle,
// checks that every process of the chain ends, and returns the time from
// the kill to the grandchild's report and the grandchild's new parent.
func orphanChain(t *testing.T, subreaper bool) (latency time.Duration, newPPID int) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var env []string
	if subreaper {
		env = append(env, subreaperEnv+"=1")
	}
	root := helper(roleRoot, w, env...)
	err = root.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	rootFD := pidfd(t, root.Process.Pid)
	rootWaited := false
	t.Cleanup(func() {
		if !rootWaited {
			unix.PidfdSendSignal(rootFD, unix.SIGKILL, nil, 0)
			root.Wait()
		}
	})

	lines := bufio.NewReader(r)
	r.SetReadDeadline(time.Now().Add(30 * time.Second))
	ready := readLine(t, lines)
	var gpid, mpid int
	var detector string
	if _, err := fmt.Sscanf(ready, "ready %d %d %s", &gpid, &mpid, &detector); err != nil {
		t.Fatalf("grandchild said %q: %v", ready, err)
	}
	// Both are alive (middle waits for grandchild, grandchild for its
	// watchdog), so these pidfds are theirs; cleanup through them cannot
	// hit a recycled pid.
	middleFD := pidfd(t, mpid)
	grandchildFD := pidfd(t, gpid)
	if detector != "pidfd" {
		t.Fatalf("grandchild watches its parent with %q, want pidfd", detector)
	}

	killed := time.Now()
	if err := unix.PidfdSendSignal(middleFD, unix.SIGKILL, nil, 0); err != nil {
		t.Fatal(err)
	}
	got := readLine(t, lines)
	latency = time.Since(killed)
	var reason string
	if _, err := fmt.Sscanf(got, "terminated %s %d", &reason, &newPPID); err != nil || reason != "orphaned" {
		t.Fatalf("grandchild said %q, want \"terminated orphaned <ppid>\"", got)
	}
	switch {
	case subreaper && newPPID != root.Process.Pid:
		t.Errorf("grandchild re-parented to %d, want the subreaper %d", newPPID, root.Process.Pid)
	case newPPID == mpid:
		t.Errorf("grandchild still reports parent %d", mpid)
	}

	if subreaper {
		want := fmt.Sprintf("reaped %d 0", gpid)
		if got := readLine(t, lines); got != want {
			t.Errorf("subreaper said %q, want %q", got, want)
		}
	}
	// EOF: every holder of the pipe — root, middle, grandchild — is gone.
	if rest, err := io.ReadAll(lines); err != nil || len(rest) > 0 {
		t.Errorf("report pipe: %q, %v; want EOF", rest, err)
	}
	err = root.Wait()
	rootWaited = true
	if err != nil {
		t.Errorf("root: %v", err)
	}
	for name, fd := range map[string]int{"root": rootFD, "middle": middleFD, "grandchild": grandchildFD} {
		if !exited(fd, 5*time.Second) {
			t.Errorf("%s process still running", name)
		}
	}
	return latency, newPPID
}

// pidfd opens a pidfd on pid, to be closed — after a SIGKILL, in case the
// test failed and left the process running — when the test ends.
func pidfd(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	t.Cleanup(func() {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		unix.Close(fd)
	})
	return fd
}

// exited reports whether the process behind pidfd fd has exited (a zombie
// counts), waiting up to d.
func exited(fd int, d time.Duration) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, int(d.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("report pipe: read %q: %v", line, err)
	}
	line = strings.TrimSuffix(line, "\n")
	if strings.HasPrefix(line, "error ") {
		t.Fatalf("helper failed: %s", line)
	}
	return line
}

// TestWatchPidfd drives the pidfd watch on a child we can kill: it reports
// the exit, and it closes without leaving a goroutine behind.
func TestWatchPidfd(t *testing.T) {
	cmd := helper(roleSleeper, nil)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	pw, err := watchPidfd(fd)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	defer pw.close()
	if !pw.exact || pw.how != "pidfd" {
		t.Errorf("watch = %q exact %v, want pidfd exact", pw.how, pw.exact)
	}
	select {
	case <-pw.exited:
		t.Fatal("exit reported for a running process")
	default:
	}
	killed := time.Now()
	cmd.Process.Kill()
	select {
	case <-pw.exited:
		t.Logf("exit reported after %v", time.Since(killed))
	case <-time.After(5 * time.Second):
		t.Error("exit not reported")
	}
	cmd.Wait()
}

// TestWatchParentClose watches this test's real parent, which outlives the
// test, and checks that closing the watch ends it promptly.
func TestWatchParentClose(t *testing.T) {
	pw, err := watchParent(os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-pw.exited:
		t.Fatal("parent reported exited")
	default:
	}
	pw.close() // goleak checks the goroutine is gone
}

// TestWatchParentNotOurParent: a pid that is not our parent is reported as
// an exit at once, since after pidfd_open it might be a recycled pid.
func TestWatchParentNotOurParent(t *testing.T) {
	cmd := helper(roleSleeper, nil)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for _, pid := range []int{cmd.Process.Pid, 1 << 30} {
		pw, err := watchParent(pid)
		if err != nil {
			t.Fatalf("watchParent(%d): %v", pid, err)
		}
		select {
		case <-pw.exited:
		default:
			t.Errorf("watchParent(%d) did not report an exit", pid)
		}
		pw.close()
	}
}

// TestStartDefaults: the zero Config follows the real parent through a
// pidfd and polls nothing.
func TestStartDefaults(t *testing.T) {
	wd, err := Start(t.Context(), Config{OnTerminate: func(r Reason) {
		t.Errorf("terminated: %v", r)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Stop()
	if wd.detector != "pidfd" || wd.poll {
		t.Errorf("detector %q, polling %v; want pidfd without polling", wd.detector, wd.poll)
	}
	if wd.originalPPID != os.Getppid() {
		t.Errorf("original parent %d, want %d", wd.originalPPID, os.Getppid())
	}
}
