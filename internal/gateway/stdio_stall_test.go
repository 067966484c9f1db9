package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
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
// shutdown: when ctx ends, Serve returns, however long WriteTimeout.
func TestStdioShutdownWithStalledClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, _, done := serveStalled(t, ctx, StdioOptions{WriteTimeout: time.Hour})
	cancel()
	select {
	case err := <-done:
		done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

// bigEndpoint answers every request with result.
type bigEndpoint struct{ result json.RawMessage }

func (bigEndpoint) Open(out Sink) *Session { return NewSession(out) }
func (bigEndpoint) Close(*Session)         {}
func (e bigEndpoint) Stateless(ctx context.Context, m *rpc.Message, _ *Modern, related Sink) *rpc.Message {
	return e.Handle(ctx, nil, m, related)
}
func (e bigEndpoint) Handle(_ context.Context, _ *Session, m *rpc.Message, _ Sink) *rpc.Message {
	if !m.IsRequest() {
		return nil
	}
	return &rpc.Message{ID: m.ID, Result: e.result}
}

// WriteTimeout bounds each 256 KiB of a write, not the whole: a client
// that reads its output slowly but steadily gets a long reply whole.
func TestStdioWriteTimeoutPerPiece(t *testing.T) {
	const timeout = 500 * time.Millisecond
	big := json.RawMessage(`{"pad":"` + strings.Repeat("x", 8<<20) + `"}`)
	inR, stdin := io.Pipe()
	outR, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- StdioOptions{WriteTimeout: timeout}.Serve(context.Background(), bigEndpoint{big}, inR, stdout)
	}()
	defer func() {
		stdin.Close()
		outR.Close()
		if err := <-done; !errors.Is(err, io.EOF) {
			t.Errorf("Serve: %v, want the end of its input", err)
		}
	}()
	start := time.Now()
	if _, err := io.WriteString(stdin, stdioPing); err != nil {
		t.Fatal(err)
	}
	var line []byte
	buf := make([]byte, 64<<10)
	for !bytes.HasSuffix(line, []byte("\n")) {
		n, err := outR.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(line), err)
		}
		line = append(line, buf[:n]...)
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took < timeout {
		t.Logf("the reply took %v, less than WriteTimeout: the test proves nothing on this machine", took)
	}
	m, err := rpc.Decode(line)
	if err != nil || !bytes.Equal(m.Result, big) {
		t.Fatalf("the client read %d bytes: %v", len(line), err)
	}
}

// closeRecorder records whether it was closed.
type closeRecorder struct {
	io.Writer
	closed chan struct{}
}

func (c *closeRecorder) Close() error { close(c.closed); return nil }

// When the session ends, the client's output is closed.
func TestStdioClosesOutput(t *testing.T) {
	r, stdin := io.Pipe()
	out := &closeRecorder{Writer: io.Discard, closed: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- StdioOptions{}.Serve(context.Background(), newHTTPFake(), r, out) }()
	if _, err := io.WriteString(stdin, stdioPing); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	<-done
	select {
	case <-out.closed:
	default:
		t.Fatal("the output was not closed")
	}
}
