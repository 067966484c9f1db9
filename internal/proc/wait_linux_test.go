package proc

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A running tree's leader is waited for through the runtime's poller, not
// by a blocking waitid: its watcher holds no OS thread while the server
// runs (threads the runtime made for blocking calls are never given back,
// nor their stacks). In every containment mode, each of n running trees
// has its watcher parked in the poller, in pollLeaderExit.
func TestLeaderWaitHoldsNoThread(t *testing.T) {
	const n = 6
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			for range n {
				p, err := rt.Spawn(t.Context(), fixtureSpec(t, testserver.NewMarker(t)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Stop(context.Background()) })
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				polled, blocking := watchers()
				if polled >= n && blocking == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 10 s, %d of %d leaders' watchers wait in the poller, %d in a blocking waitid", polled, n, blocking)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// watchers counts the goroutines waiting for a leader's exit: in the
// runtime's poller (IO wait, in pollLeaderExit), and otherwise (a
// blocking waitid, or /proc polling).
func watchers() (polled, blocking int) {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		switch {
		case !bytes.Contains(g, []byte("proc.(*Process).awaitLeaderExit")):
		case bytes.Contains(g, []byte("[IO wait")) && bytes.Contains(g, []byte("proc.pollLeaderExit")):
			polled++
		default:
			blocking++
		}
	}
	return polled, blocking
}
