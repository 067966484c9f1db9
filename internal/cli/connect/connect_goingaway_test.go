package connect

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/bridge"
)

// A daemon going away (its socket server cancelled) closes its listener
// with connections not yet accepted, and closes accepted ones whose
// preface it has not read (the AfterFunc's deadline). On a unix socket
// both reach the client as ECONNRESET, not EOF: answer() must report them
// as a daemon that closed before answering (bridge.ErrDaemonClosed), which
// reachDaemon and awaitAnswer retry with --start=auto; any other error
// makes connect exit 1 ("the mcpvisor daemon on ...: connection reset").
func TestConnectTakesAResetAsTheDaemonGoingAway(t *testing.T) {
	for _, c := range []struct {
		name   string
		accept bool
	}{{"listener closed with the connection in its backlog", false}, {"accepted, preface unread, closed", true}} {
		t.Run(c.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "goingaway")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			path := filepath.Join(dir, "s")
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				if c.accept {
					conn, err := ln.Accept()
					if err == nil {
						time.Sleep(200 * time.Millisecond) // the preface arrives, unread
						conn.Close()
					}
				} else {
					time.Sleep(200 * time.Millisecond) // the preface is in the backlog's socket
				}
				ln.Close()
			}()
			_, _, err = answer(context.Background(), Options{socket: path})
			if !errors.Is(err, bridge.ErrDaemonClosed) {
				t.Fatalf("answer() against a daemon going away: %v; want an error wrapping bridge.ErrDaemonClosed (retried), got one connect gives up on: %v", err, handshakeErr(Options{socket: path}, err))
			}
		})
	}
}
