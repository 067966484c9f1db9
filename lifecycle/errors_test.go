package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: err}}
	}
	tests := []struct {
		name string
		err  error
		want error // class; nil means returned unchanged
	}{
		{"exec not found", &exec.Error{Name: "nope", Err: exec.ErrNotFound}, ErrServerUnavailable},
		{"path not exist", &fs.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOENT}, ErrServerUnavailable},
		{"permission", &fs.PathError{Op: "fork/exec", Path: "/x", Err: syscall.EACCES}, ErrServerUnavailable},
		{"connection refused", opErr(syscall.ECONNREFUSED), ErrServerUnavailable},
		{"host unreachable", opErr(syscall.EHOSTUNREACH), ErrServerUnavailable},
		{"net unreachable", opErr(syscall.ENETUNREACH), ErrServerUnavailable},
		{"dns", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, ErrServerUnavailable},
		{"exit error", fmt.Errorf("wait: %w", &exec.ExitError{}), ErrServerCrashed},
		{"EOF", io.EOF, ErrTransport},
		{"wrapped unexpected EOF", fmt.Errorf("read frame: %w", io.ErrUnexpectedEOF), ErrTransport},
		{"closed pipe", io.ErrClosedPipe, ErrTransport},
		{"os closed", &fs.PathError{Op: "write", Path: "|1", Err: os.ErrClosed}, ErrTransport},
		{"net closed", net.ErrClosed, ErrTransport},
		{"reset", opErr(syscall.ECONNRESET), ErrTransport},
		{"epipe", &fs.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE}, ErrTransport},
		{"i/o timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, ErrTransport},
		{"context canceled", context.Canceled, nil},
		{"context deadline", fmt.Errorf("connect: %w", context.DeadlineExceeded), nil},
		{"unknown", errors.New("something odd"), nil},

		// Last-resort message matching (chains flattened with %v).
		{"text unauthorized", fmt.Errorf("http: %v", "401 Unauthorized"), ErrAuthRequired},
		{"text invalid token", errors.New(`www-authenticate: Bearer error="invalid_token"`), ErrAuthRequired},
		{"text capability", errors.New("Capability Not Supported: tools"), ErrCapabilityMissing},
		{"text session", errors.New("session not found"), ErrSessionMissing},
		{"text initialized", errors.New("sending initialized notification: write failed"), ErrInitNotification},
		{"text not found", fmt.Errorf("start: %v", &exec.Error{Name: "npx", Err: exec.ErrNotFound}), ErrServerUnavailable},
		{"text refused", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), ErrServerUnavailable},
		{"text exit", errors.New("server exited: exit status 1"), ErrServerCrashed},
		{"text killed", errors.New("signal: killed"), ErrServerCrashed},
		{"text pipe", errors.New("write |1: broken pipe"), ErrTransport},
		{"text bare EOF", errors.New("EOF"), ErrTransport},
		{"text trailing EOF", errors.New("calling tools/list: EOF"), ErrTransport},
		{"text unexpected EOF", errors.New("unexpected EOF"), ErrTransport},
		{"text eof inside word", errors.New("thereof we cannot speak"), nil},
		{"permanent wins over transient text", errors.New("unauthorized: connection reset"), ErrAuthRequired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.err)
			if !errors.Is(got, tt.err) {
				t.Fatalf("Classify(%v) = %v does not match the original", tt.err, got)
			}
			if tt.want == nil {
				if got != tt.err {
					t.Fatalf("Classify(%v) = %v, want it unchanged", tt.err, got)
				}
				if c := classOf(got); c != nil {
					t.Fatalf("unclassifiable error got class %v", c)
				}
				return
			}
			if !errors.Is(got, tt.want) {
				t.Fatalf("Classify(%v) = %v, want class %v", tt.err, got, tt.want)
			}
			if c := classOf(got); c != tt.want {
				t.Fatalf("classOf = %v, want %v", c, tt.want)
			}
			if !strings.Contains(got.Error(), tt.err.Error()) || !strings.HasPrefix(got.Error(), tt.want.Error()) {
				t.Fatalf("message %q should be %q + original %q", got.Error(), tt.want.Error(), tt.err.Error())
			}
			if again := Classify(got); again != got {
				t.Fatalf("Classify is not idempotent: %v → %v", got, again)
			}
		})
	}
}

func TestClassifyKeepsChain(t *testing.T) {
	if Classify(nil) != nil {
		t.Fatal("Classify(nil) != nil")
	}
	// Already classified: unchanged, even through further wrapping.
	pre := fmt.Errorf("backend: %w", fmt.Errorf("%w: tools", ErrCapabilityMissing))
	if Classify(pre) != pre {
		t.Fatal("already-classified error was rewrapped")
	}
	// errors.As still reaches the concrete type.
	src := &exec.Error{Name: "npx", Err: exec.ErrNotFound}
	var ee *exec.Error
	if got := Classify(src); !errors.As(got, &ee) || ee != src {
		t.Fatalf("errors.As lost the *exec.Error in %v", got)
	}
}

func TestIsPermanentIsTransient(t *testing.T) {
	tests := []struct {
		err                  error
		permanent, transient bool
	}{
		{nil, false, false},
		{errors.New("odd"), false, false},
		{ErrNotStarted, false, false},
		{ErrStopped, false, false},
		{ErrCapabilityMissing, true, false},
		{fmt.Errorf("x: %w", ErrAuthRequired), true, false},
		{ErrTransport, false, true},
		{ErrServerUnavailable, false, true},
		{ErrServerCrashed, false, true},
		{ErrInitTimeout, false, true},
		{ErrInitNotification, false, true},
		{ErrSessionMissing, false, true},
		{Classify(io.EOF), false, true},
		{errors.Join(ErrTransport, ErrAuthRequired), true, false},
	}
	for _, tt := range tests {
		if got := IsPermanent(tt.err); got != tt.permanent {
			t.Errorf("IsPermanent(%v) = %v", tt.err, got)
		}
		if got := IsTransient(tt.err); got != tt.transient {
			t.Errorf("IsTransient(%v) = %v", tt.err, got)
		}
	}
}

// FuzzClassify feeds arbitrary messages, bare and wrapped in typical ways,
// and checks that Classify never panics, keeps the original reachable and
// gives a stable class.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"", "EOF", "unexpected EOF", "401 Unauthorized", "session not found",
		"exit status 2", "connection refused", "capability not supported",
		"thereof", ": eof", "\x00\xff", strings.Repeat("eof", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		base := errors.New(msg)
		for _, err := range []error{
			base,
			fmt.Errorf("wrapped: %w", base),
			fmt.Errorf("flattened: %v", base),
			errors.Join(base, io.EOF),
		} {
			c1 := Classify(err)
			if !errors.Is(c1, err) {
				t.Fatalf("Classify(%q) lost the original", err)
			}
			c2 := Classify(c1)
			if c2 != c1 {
				t.Fatalf("Classify(Classify(%q)) changed the error", err)
			}
			if classOf(c1) != classOf(c2) {
				t.Fatalf("class of %q unstable: %v then %v", err, classOf(c1), classOf(c2))
			}
			// The same input classifies the same way every time.
			if classOf(Classify(err)) != classOf(c1) {
				t.Fatalf("class of %q not deterministic", err)
			}
			if IsPermanent(c1) && IsTransient(c1) {
				t.Fatalf("%q is both permanent and transient", err)
			}
			_ = c1.Error()
		}
	})
}
