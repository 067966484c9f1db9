package backend

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// connectStubborn starts the fixture as a server that ignores stdin EOF
// and SIGTERM, with an hour for each stop stage: only SIGKILL ends it.
func connectStubborn(t *testing.T) *Conn {
	t.Helper()
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	sc := &StdioConnector{
		Name:    "stubborn",
		Runtime: rt,
		Spec: proc.Spec{
			Command:   testserver.Build(t),
			Args:      []string{"-ignore-term", "-ignore-eof"},
			Env:       append(proc.Environ(), testserver.MarkerEnv+"="+testserver.NewMarker(t)),
			StdinWait: time.Hour,
			TermWait:  time.Hour,
		},
		Logger: quiet(),
	}
	return connectWith(t, sc)
}

// A later CloseContext does not wait on the first one: it returns when
// its own ctx ends, while the first is still stopping the server. The
// first one's ctx, when it ends, kills the tree at once, and every call
// waiting then returns.
func TestCloseContextLaterCallerIsBoundedByItsContext(t *testing.T) {
	c := connectStubborn(t)
	firstCtx, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	first := make(chan error, 1)
	go func() { first <- c.CloseContext(firstCtx) }()
	for !c.closing.Load() {
		time.Sleep(time.Millisecond) // until the first close is under way
	}

	later := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		later <- c.CloseContext(ctx)
	}()
	select {
	case err := <-later:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the later call returned %v, want its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a later CloseContext with a 100 ms deadline waited for the first close")
	}
	select {
	case err := <-first:
		t.Fatalf("the first close returned (%v) though the server ignores EOF and SIGTERM", err)
	default:
	}

	// A third caller with no deadline waits; the first caller's ctx ends:
	// the tree is killed and both return.
	third := make(chan error, 1)
	go func() { third <- c.CloseContext(context.Background()) }()
	cancelFirst()
	for i, ch := range []chan error{first, third} {
		select {
		case err := <-ch:
			if i == 0 && !errors.Is(err, context.Canceled) {
				t.Fatalf("the first close returned %v, want context.Canceled", err)
			}
			if i == 1 && err != nil {
				t.Fatalf("the third close returned %v, want nil once the stop ended", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("close %d did not return after the first caller's ctx ended", i+1)
		}
	}
	select {
	case <-c.proc.Exited():
	default:
		t.Fatal("the server is still running after every close returned")
	}
}

// A handshake that fails because Connect's ctx ended stops the server with
// that ctx: Connect returns promptly instead of running the stop's waits,
// and the tree, killed at once, is gone soon after.
func TestConnectHandshakeTimeoutKillsAtOnce(t *testing.T) {
	rt, err := proc.Open(proc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	marker := testserver.NewMarker(t)
	sc := &StdioConnector{
		Name:    "mute",
		Runtime: rt,
		Spec: proc.Spec{
			Command:   testserver.Build(t),
			Args:      []string{"-never-answer", "-ignore-term", "-ignore-eof"},
			Env:       append(proc.Environ(), testserver.MarkerEnv+"="+marker),
			StdinWait: time.Hour,
			TermWait:  time.Hour,
		},
		Logger: quiet(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		s, err := sc.Connect(ctx)
		if s != nil {
			_ = s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Connect succeeded with a server that never answers")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Connect with a 300 ms ctx took %v", d)
		}
	case <-time.After(5 * time.Second):
		testserver.KillProcesses(marker) // lets Connect return
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		t.Fatal("Connect did not return within 5 s of a 300 ms ctx")
	}
	testserver.WaitGone(t, marker, 5*time.Second)
}
