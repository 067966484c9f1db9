package connect

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A daemon that takes the connection but never answers the preface (a
// stopped process) holds connect only until its context ends, not for the
// whole preface bound: the end of ctx cuts the handshake, and the error
// says so.
func TestAnswerIsCutByItsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			held <- c // accepted, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, _, err = answer(ctx, Options{socket: path})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("answer against a daemon that never answers, its context ended: %v; want the context's end (not the %v preface bound's)", err, connectHandshakeTimeout)
	}
	select {
	case c := <-held:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the daemon stand-in never accepted")
	}
}
