package shim

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func init() {
	// Under -race the shim (this binary) would sleep a second at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
}

func TestMain(m *testing.M) {
	RunIfRequested() // the tests run this binary as the shim
	os.Exit(m.Run())
}

// runShim runs this test binary as the shim of argv, with the stop pipe
// already at EOF when stopNow is set, and returns the server's stdout, the
// status line and the shim's process state.
func runShim(t *testing.T, stopNow bool, argv ...string) (stdout, status string, st *os.ProcessState) {
	t.Helper()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stopR, stopW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], append([]string{"1s", "--", argv[0]}, argv...)...)
	cmd.Env = append(os.Environ(), Env+"="+Run)
	cmd.ExtraFiles = []*os.File{statusW, stopR}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	statusW.Close()
	stopR.Close()
	if stopNow {
		stopW.Close()
	} else {
		defer stopW.Close()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shim: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the shim did not exit")
	}
	b := make([]byte, 64)
	n, _ := statusR.Read(b)
	statusR.Close()
	return out.String(), string(b[:n]), cmd.ProcessState
}

// The server inherits neither the status pipe nor the stop pipe: it could
// forge its status or hold the stop pipe open.
func TestServerDoesNotInheritThePipes(t *testing.T) {
	script := `for fd in 3 4; do [ -e /proc/self/fd/$fd ] && echo "fd $fd open: $(readlink /proc/self/fd/$fd)"; done; echo checked; exit 7`
	out, status, _ := runShim(t, false, "/bin/sh", "-c", script)
	if strings.TrimSpace(out) != "checked" {
		t.Errorf("the server printed %q", out)
	}
	if code, _, ok := ParseStatus(status); !ok || code != 7 {
		t.Errorf("status %q, want exit 7", status)
	}
}

// A stop that begins while the server is still running (the stop pipe at
// EOF) must not make the shim spin while it waits for the server.
func TestShimIdlesWhileAStopWaits(t *testing.T) {
	_, status, st := runShim(t, true, "/bin/sleep", "1")
	if code, _, ok := ParseStatus(status); !ok || code != 0 {
		t.Errorf("status %q, want exit 0", status)
	}
	if cpu := st.UserTime() + st.SystemTime(); cpu > 300*time.Millisecond {
		t.Errorf("the shim used %v of CPU over the server's 1 s", cpu)
	}
}
