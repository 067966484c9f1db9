//go:build unix

package watchdog

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestDefaultOnTerminate: the default sends SIGTERM to this process, where
// the program's own handler receives it.
func TestDefaultOnTerminate(t *testing.T) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	defer signal.Stop(sig)
	terminate(Orphaned)
	select {
	case s := <-sig:
		if s != syscall.SIGTERM {
			t.Errorf("got %v, want SIGTERM", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SIGTERM received")
	}
}
