package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Options.StallTimeout, for writers whose Write nothing interrupts. The
// tests run in synctest bubbles: a Write blocked on a channel is durably
// blocked, as a blocking pipe's would be in the kernel.

// stuckWriter blocks every Write until release is closed, and nothing
// else (closing it included) interrupts it.
type stuckWriter struct {
	entered chan struct{} // closed at the first Write
	release chan struct{}
	once    sync.Once
	closed  chan struct{}
	cOnce   sync.Once
}

func newStuckWriter() *stuckWriter {
	return &stuckWriter{entered: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return len(p), nil
}

func (s *stuckWriter) Close() error {
	s.cOnce.Do(func() { close(s.closed) })
	return nil
}

// stallConn runs a Conn with the given StallTimeout over w; it returns
// the channel of Run's result. The test releases w itself.
func stallConn(t *testing.T, w io.Writer, stall time.Duration) (*Conn, <-chan error, *io.PipeWriter) {
	t.Helper()
	r, peerW := io.Pipe()
	c := NewConn(r, w, Options{PeerName: "client", StallTimeout: stall})
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		c.Close()
		peerW.Close()
	})
	return c, ran, peerW
}

// A Write that does not return within StallTimeout ends the connection
// with ErrWriteStalled, and Run returns while that Write is still
// blocked; the writer's goroutine ends when the Write returns.
func TestStallTimeoutEndsTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStuckWriter()
		c, ran, _ := stallConn(t, w, time.Minute)
		start := time.Now()
		note := timed(func() error { return c.NotifyContext(t.Context(), "stuck", nil) })
		<-w.entered
		err := <-ran
		if !errors.Is(err, ErrWriteStalled) || !errors.Is(err, ErrClosed) || time.Since(start) != time.Minute {
			t.Fatalf("Run = %v after %v, want ErrWriteStalled after a minute", err, time.Since(start))
		}
		if want := "rpc: connection closed: rpc: the peer stopped reading: client has not taken a write for 1m0s"; err.Error() != want {
			t.Errorf("Run = %q, want %q", err, want)
		}
		if r := <-note; !errors.Is(r.err, ErrWriteStalled) {
			t.Errorf("NotifyContext = %v", r.err)
		}
		select {
		case <-w.closed:
		default:
			t.Error("the writer was not closed")
		}
		close(w.release)
		synctest.Wait() // the writer's goroutine ends; the bubble checks it
	})
}

// Once the connection ends for another reason, Run does not wait for a
// Write in progress, however long StallTimeout.
func TestStallTimeoutRunLeavesABlockedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStuckWriter()
		c, ran, _ := stallConn(t, w, time.Hour)
		callAsync(t.Context(), c, "stuck", "")
		<-w.entered
		c.Close()
		synctest.Wait()
		select {
		case err := <-ran:
			if !errors.Is(err, ErrClosed) || errors.Is(err, ErrWriteStalled) {
				t.Fatalf("Run = %v", err)
			}
		default:
			t.Fatal("Run waits for the blocked Write")
		}
		if err := c.Flush(t.Context()); err != nil {
			t.Fatalf("Flush = %v", err)
		}
		close(w.release)
	})
}

// slowWriter takes delay for every 256 KiB it is given (a peer that reads
// slowly, but steadily) and records the size of each Write.
type slowWriter struct {
	delay time.Duration
	mu    sync.Mutex
	sizes []int
	all   strings.Builder
}

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(s.delay * time.Duration(len(p)) / (256 << 10))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizes = append(s.sizes, len(p))
	s.all.Write(p)
	return len(p), nil
}

// StallTimeout bounds each 256 KiB of a write, not the whole: a peer that
// takes every piece within it gets a line of a megabyte whole, though the
// line takes four times as long.
func TestStallTimeoutPerPiece(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &slowWriter{delay: 40 * time.Second}
		c, _, _ := stallConn(t, w, time.Minute)
		start := time.Now()
		if err := c.NotifyContext(t.Context(), "big", json.RawMessage(hugeParams)); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took <= time.Minute {
			t.Fatalf("the line took %v: the test proves nothing", took)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("the connection ended: %v", err)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, n := range w.sizes {
			if n > 256<<10 {
				t.Fatalf("a Write of %d bytes", n)
			}
		}
		m, err := Decode([]byte(w.all.String()))
		if err != nil || m.Method != "big" || string(m.Params) != hugeParams {
			t.Fatalf("written: %v, %.80q", err, w.all.String())
		}
	})
}
