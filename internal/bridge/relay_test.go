package bridge

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// relayed runs Relay between pipes standing for stdin and stdout and one
// end of a socket pair; the test plays the client on the pipes and the
// daemon on the other end.
type relayed struct {
	stdin  *os.File // the client writes here
	stdout *bufio.Reader
	// stdoutFile is the read end of stdout.
	stdoutFile *os.File
	daemon     *net.UnixConn
	daemonR    *bufio.Reader
	done       chan error
}

func startRelay(t *testing.T, ctx context.Context, opts RelayOptions) *relayed {
	t.Helper()
	client, daemon := socketPair(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &relayed{stdin: inW, stdout: bufio.NewReader(outR), stdoutFile: outR, daemon: daemon, daemonR: bufio.NewReader(daemon), done: make(chan error, 1)}
	go func() { r.done <- Relay(ctx, client, client, inR, outW, opts) }()
	t.Cleanup(func() {
		inW.Close()
		outR.Close()
		daemon.Close()
		r.wait(t)
	})
	return r
}

func (r *relayed) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Relay did not return")
	}
	return nil
}

func TestRelayCopiesBothWaysAndFlushesAfterEOF(t *testing.T) {
	r := startRelay(t, context.Background(), RelayOptions{})
	big := strings.Repeat("x", 3*relayBuffer) // more than a buffer
	io.WriteString(r.stdin, "one\n"+big+"\n")
	for _, want := range []string{"one\n", big + "\n"} {
		if l, err := r.daemonR.ReadString('\n'); l != want || err != nil {
			t.Fatalf("the daemon read %d bytes %v, want %d", len(l), err, len(want))
		}
	}
	r.daemon.Write([]byte("answer\n"))
	if l, _ := r.stdout.ReadString('\n'); l != "answer\n" {
		t.Fatalf("the client read %q", l)
	}
	// The client's EOF reaches the daemon, whose answers under way
	// still reach the client; its close ends the relay cleanly.
	r.stdin.Close()
	if _, err := r.daemonR.ReadString('\n'); err != io.EOF {
		t.Fatalf("the daemon did not see the client's EOF: %v", err)
	}
	r.daemon.Write([]byte("late answer\n"))
	r.daemon.Close()
	if l, _ := r.stdout.ReadString('\n'); l != "late answer\n" {
		t.Fatalf("an answer under way at the client's EOF: %q", l)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Relay after the client's EOF: %v", err)
	}
}

// A daemon that never closes after the client's EOF holds the relay for
// FlushTimeout at most.
func TestRelayFlushIsBounded(t *testing.T) {
	r := startRelay(t, context.Background(), RelayOptions{FlushTimeout: 50 * time.Millisecond})
	r.stdin.Close()
	if err := r.wait(t); err != nil {
		t.Fatalf("Relay: %v", err)
	}
}

func TestRelayDaemonClosed(t *testing.T) {
	r := startRelay(t, context.Background(), RelayOptions{})
	r.daemon.Close()
	if err := r.wait(t); !errors.Is(err, ErrDaemonClosed) {
		t.Fatalf("Relay: %v, want ErrDaemonClosed", err)
	}
}

func TestRelayClientGone(t *testing.T) {
	r := startRelay(t, context.Background(), RelayOptions{})
	r.stdoutFile.Close() // the client stops reading: the next write fails
	r.daemon.Write([]byte("x\n"))
	if err := r.wait(t); !errors.Is(err, ErrClientGone) {
		t.Fatalf("Relay: %v, want ErrClientGone", err)
	}
}

func TestRelayEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	r := startRelay(t, ctx, RelayOptions{})
	why := errors.New("parent gone")
	cancel(why)
	if err := r.wait(t); !errors.Is(err, why) {
		t.Fatalf("Relay: %v, want its context's cause", err)
	}
	// The daemon sees the connection close.
	if _, err := r.daemonR.ReadString('\n'); err != io.EOF {
		t.Fatalf("the daemon's end: %v", err)
	}
}
