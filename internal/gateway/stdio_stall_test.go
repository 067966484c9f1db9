package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// stuckWriter is a client's stdout pipe that nobody reads, in blocking
// mode: a Write blocks until release closes, and nothing — not even
// closing the pipe — interrupts it.
type stuckWriter struct {
	entered chan struct{} // closed at the first Write
	release chan struct{}
	once    sync.Once
}

func newStuckWriter() *stuckWriter {
	return &stuckWriter{entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return 0, io.ErrClosedPipe
}

const stdioPing = `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"

// serveStalled runs the stdio front with a client that sends a ping and
// never reads the answer.
func serveStalled(t *testing.T, ctx context.Context, opts StdioOptions) (w *stuckWriter, stdin *io.PipeWriter, done chan error) {
	t.Helper()
	r, stdin := io.Pipe()
	w = newStuckWriter()
	done = make(chan error, 1)
	go func() { done <- opts.Serve(ctx, newHTTPFake(), r, w) }()
	t.Cleanup(func() {
		stdin.Close()
		close(w.release)
		<-done
	})
	if _, err := io.WriteString(stdin, stdioPing); err != nil {
		t.Fatal(err)
	}
	<-w.entered
	return w, stdin, done
}

// A client that does not read its output within WriteTimeout is dropped:
// the session ends with ErrClientStalled.
func TestStdioStalledClientIsDropped(t *testing.T) {
	_, _, done := serveStalled(t, context.Background(), StdioOptions{WriteTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	select {
	case err := <-done:
		if !errors.Is(err, ErrClientStalled) {
			t.Fatalf("Serve: %v, want ErrClientStalled", err)
		}
		done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the stdio front still waits for a client that does not read")
	}
}

// A write blocked on a client that stopped reading cannot hold the
// shutdown: when ctx ends, ServeStdio returns, however long WriteTimeout.
func TestStdioShutdownWithStalledClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, _, done := serveStalled(t, ctx, StdioOptions{WriteTimeout: time.Hour})
	cancel()
	select {
	case err := <-done:
		done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return after its context ended")
	}
}
