package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

const closeRaceEnv = "PROC_TEST_CLOSE_RACE"

// runCloseRace is this test binary re-executed in its own process group:
// Close takes in a Process whose spawn then fails. Its Stop must signal
// nothing; before the fix it sent SIGTERM, then SIGKILL, to group 0, which
// is this process's own group.
func runCloseRace() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	rt, err := Open(Options{NoPIDNamespace: true, NoCgroup: true})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	hold, closing := make(chan struct{}), make(chan struct{})
	beforeStart = func() { <-hold }
	spawned := make(chan error, 1)
	go func() {
		_, err := rt.Spawn(context.Background(), Spec{Command: "/nonexistent/server", StdinWait: 50 * time.Millisecond, TermWait: 50 * time.Millisecond})
		spawned <- err
	}()
	closed := make(chan error, 1)
	go func() {
		for {
			rt.mu.Lock()
			n, c := len(rt.live), rt.closed
			rt.mu.Unlock()
			if n == 1 && !c {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(closing)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- rt.Close(ctx)
	}()
	<-closing
	for { // Close has taken the process in: let its spawn fail
		rt.mu.Lock()
		c := rt.closed
		rt.mu.Unlock()
		if c {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // what the stop's waits would take
	close(hold)
	if err := <-spawned; err == nil || !errors.Is(err, os.ErrNotExist) && !strings.Contains(err.Error(), "no such file") {
		fmt.Println("spawn:", err)
		return 1
	}
	if err := <-closed; err != nil {
		fmt.Println("close:", err)
		return 1
	}
	select {
	case <-term:
		fmt.Println("signalled")
		return 3
	case <-time.After(200 * time.Millisecond):
	}
	fmt.Println("ok")
	return 0
}

// Close racing a spawn that fails signals nobody, least of all mcpvisor's
// own process group. The scenario runs in a child in its own group, so that
// a regression cannot reach the test run.
func TestCloseDuringFailingSpawn(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), closeRaceEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("the scenario ended with %v, printing %q", err, out)
	}
}
