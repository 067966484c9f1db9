package shutdown

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGracefulWithinDeadline(t *testing.T) {
	s := New()
	s.Trigger("stdin closed")
	s.Trigger("second reason is ignored")
	forced := false
	code := s.Run(time.Second, func(ctx context.Context) error { return nil }, func() { forced = true })
	if code != ExitOK || forced || s.Reason() != "stdin closed" {
		t.Fatalf("code %d, forced %v, reason %q", code, forced, s.Reason())
	}
}

func TestGracefulError(t *testing.T) {
	s := New()
	s.Trigger("x")
	if code := s.Run(time.Second, func(context.Context) error { return errors.New("boom") }, func() {}); code != ExitError {
		t.Fatalf("code %d", code)
	}
}

func TestDeadlineForces(t *testing.T) {
	s := New()
	s.Trigger("x")
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	forced := make(chan struct{})
	code := s.Run(50*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done() // a graceful step that honours its context
		<-release
		return nil
	}, func() { close(forced) })
	if code != ExitForced {
		t.Fatalf("code %d", code)
	}
	<-forced
	if took := time.Since(start); took > time.Second {
		t.Fatalf("forced after %v", took)
	}
}

func TestSecondSignalForces(t *testing.T) {
	s := New()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("first signal did not begin the shutdown")
	}
	if s.Reason() != "signal terminated" {
		t.Fatalf("reason %q", s.Reason())
	}
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	var code int
	done := make(chan struct{})
	go func() {
		code = s.Run(time.Hour, func(ctx context.Context) error {
			close(started)
			<-release
			return nil
		}, func() {})
		close(done)
	}()
	<-started
	second := time.Now()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-done
	if code != ExitForced {
		t.Fatalf("code %d", code)
	}
	if took := time.Since(second); took > 100*time.Millisecond {
		t.Fatalf("second signal took %v to force the exit", took)
	}
}
