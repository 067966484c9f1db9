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
	"time"
)

// Failure classes. A Connector wraps the errors it returns (from Connect and
// from Session.Wait) with one of these, usually through Classify, so that the
// Supervisor and its callers decide policy with errors.Is instead of by
// reading messages. Add a new class here rather than inventing an ad-hoc
// string elsewhere.
var (
	// ErrTransport means the connection to the server broke or could not
	// carry a message: EOF, a closed pipe, a reset connection. The server may
	// still be fine. Transient: the Supervisor retries.
	ErrTransport = errors.New("transport failure")

	// ErrServerUnavailable means the server could not be reached at all: the
	// executable is missing, the address refuses connections, the host is
	// unreachable. Transient (someone may install the binary or start the
	// service), but often slow to recover, which is what the backoff is for.
	ErrServerUnavailable = errors.New("server unavailable")

	// ErrServerCrashed means the server started and then exited or died
	// without being asked to. Transient: the Supervisor restarts per Policy.
	ErrServerCrashed = errors.New("server crashed")

	// ErrInitTimeout means the connect phase (for MCP, the initialize
	// handshake) did not finish within Policy.InitTimeout. Transient.
	ErrInitTimeout = errors.New("initialization timed out")

	// ErrInitNotification means the server answered the initialize request
	// but the follow-up "initialized" notification could not be delivered.
	// Transient.
	ErrInitNotification = errors.New("initialized notification failed")

	// ErrCapabilityMissing means the server does not offer a capability the
	// caller requires. Permanent: restarting the same server cannot fix it,
	// so the Supervisor parks in StateFailed instead of retrying.
	ErrCapabilityMissing = errors.New("required capability missing")

	// ErrAuthRequired means the server wants credentials (for example an
	// OAuth login) that the caller has not supplied. Permanent: the
	// Supervisor parks in StateFailed; call Start again once the user has
	// authenticated.
	ErrAuthRequired = errors.New("authentication required")

	// ErrSessionMissing means the server no longer knows the client's
	// session (a remote server restarted, a session expired). Transient: a
	// fresh connection fixes it.
	ErrSessionMissing = errors.New("session missing")

	// ErrNotStarted means an operation needs a running session and there is
	// none: the Supervisor is Stopped, Starting or Failed.
	ErrNotStarted = errors.New("not started")
)

// Errors about using the Supervisor and Tracker themselves. They are not
// failure classes: Classify leaves them alone, and IsPermanent and
// IsTransient report false for them.
var (
	// ErrInvalidTransition is returned by Tracker methods asked to make a
	// state change the lifecycle state machine does not allow. The change
	// is not applied.
	ErrInvalidTransition = errors.New("invalid state transition")

	// ErrStopped is returned by Start and RestartAndWait when Stop ended
	// the run they were waiting on.
	ErrStopped = errors.New("supervisor stopped")

	// ErrRestartLimit is the error a Supervisor records (wrapping the last
	// failure, if any) when it gives up because more than
	// Policy.MaxAttempts runs in a row failed before answering anything.
	ErrRestartLimit = errors.New("restart limit reached")

	// ErrCrashLoop is wrapped by the *CrashLoopError that Start and
	// Supervisor.CrashLoop return while a crash loop's next attempt is not
	// due.
	ErrCrashLoop = errors.New("crash loop")
)

// CrashLoopError says that a connection is in a crash loop: Failures runs
// in a row failed before answering anything, the last with Last, and the
// next attempt is due at Next. It wraps ErrCrashLoop and Last.
type CrashLoopError struct {
	Name     string // the Supervisor's name
	Failures int
	Next     time.Time
	Last     error // nil if none was recorded
}

func (e *CrashLoopError) Error() string {
	msg := fmt.Sprintf("%s is in a crash loop: %d starts in a row failed, next attempt at %s (in %v)",
		e.Name, e.Failures, e.Next.Format("15:04:05.000"), time.Until(e.Next).Round(time.Millisecond))
	if e.Last != nil {
		msg += "; the last: " + e.Last.Error()
	}
	return msg
}

func (e *CrashLoopError) Unwrap() []error {
	if e.Last == nil {
		return []error{ErrCrashLoop}
	}
	return []error{ErrCrashLoop, e.Last}
}

// classes lists the failure classes in the order IsTransient/classOf check
// them. Permanent classes come first so that an error carrying both a
// permanent and a transient class is treated as permanent.
var classes = []error{
	ErrCapabilityMissing,
	ErrAuthRequired,
	ErrSessionMissing,
	ErrInitTimeout,
	ErrInitNotification,
	ErrServerUnavailable,
	ErrServerCrashed,
	ErrTransport,
	ErrNotStarted,
}

// classError attaches a failure class to an error without hiding it:
// errors.Is and errors.As see both.
type classError struct {
	class error
	err   error
}

func (e *classError) Error() string   { return e.class.Error() + ": " + e.err.Error() }
func (e *classError) Unwrap() []error { return []error{e.class, e.err} }

// withClass returns err wrapped so that errors.Is matches class as well.
func withClass(class, err error) error {
	return &classError{class: class, err: err}
}

// Classify attaches one of this package's failure classes to err, so that
// errors.Is(result, ErrX) holds for that class and errors.Is / errors.As
// still find everything err matched before. The message becomes
// "<class>: <original message>".
//
// Classify is idempotent:
//   - nil returns nil;
//   - an error that already matches a failure class (ErrTransport …
//     ErrNotStarted) is returned unchanged;
//   - an error Classify cannot place is returned unchanged, so callers
//     decide their own policy for it (the Supervisor retries it).
//
// Context errors (context.Canceled, context.DeadlineExceeded) are left
// unclassified: what a deadline means depends on who set it. The Supervisor
// turns the expiry of its own InitTimeout into ErrInitTimeout.
//
// Typed checks come first, through errors.Is / errors.As on the error chain:
//   - exec.ErrNotFound, fs.ErrNotExist, fs.ErrPermission, ECONNREFUSED,
//     EHOSTUNREACH, ENETUNREACH and *net.DNSError → ErrServerUnavailable;
//   - *exec.ExitError → ErrServerCrashed;
//   - io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, os.ErrClosed,
//     net.ErrClosed, ECONNRESET, EPIPE and any other net.Error →
//     ErrTransport.
//
// Only when no typed check matches does Classify look at the message, for
// errors that some SDKs flatten with %v. Matching is case-insensitive on
// fixed phrases (for example "unauthorized", "capability not supported",
// "session not found", "connection refused", "broken pipe", "exit status");
// see the phrases table in errors.go. It is a last resort: a Connector that
// knows the class should wrap with the sentinel itself.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if classOf(err) != nil {
		return err
	}
	if class := detect(err); class != nil {
		return withClass(class, err)
	}
	return err
}

// classOf returns the failure class err already carries, or nil.
func classOf(err error) error {
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// IsPermanent reports whether err carries a class that retrying cannot fix:
// ErrCapabilityMissing or ErrAuthRequired. It looks only at the error
// chain; pass the error through Classify first if it may be unclassified.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrCapabilityMissing) || errors.Is(err, ErrAuthRequired)
}

// IsTransient reports whether err carries a class worth retrying:
// ErrTransport, ErrServerUnavailable, ErrServerCrashed, ErrInitTimeout,
// ErrInitNotification or ErrSessionMissing — and no permanent class.
// Unclassified errors, nil and ErrNotStarted report false. Like
// IsPermanent, it looks only at the error chain.
func IsTransient(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	for _, c := range []error{ErrTransport, ErrServerUnavailable, ErrServerCrashed,
		ErrInitTimeout, ErrInitNotification, ErrSessionMissing} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// detect finds the class of an unclassified error: typed checks first, then
// message phrases.
func detect(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	switch {
	case errors.Is(err, exec.ErrNotFound),
		errors.Is(err, fs.ErrNotExist),
		errors.Is(err, fs.ErrPermission),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		return ErrServerUnavailable
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return ErrServerUnavailable
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return ErrServerCrashed
	}
	switch {
	case errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.ErrClosedPipe),
		errors.Is(err, os.ErrClosed),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return ErrTransport
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return ErrTransport
	}
	return detectText(err.Error())
}

// phrases maps lower-case message fragments to classes, checked in order.
// Permanent classes come first. Keep fragments specific: a short fragment
// such as "401" or "eof" would match unrelated words and numbers.
var phrases = []struct {
	fragment string
	class    error
}{
	{"capability not supported", ErrCapabilityMissing},
	{"capability missing", ErrCapabilityMissing},
	{"does not support capability", ErrCapabilityMissing},
	{"unauthorized", ErrAuthRequired},
	{"authentication required", ErrAuthRequired},
	{"auth required", ErrAuthRequired},
	{"invalid_token", ErrAuthRequired},
	{"session not found", ErrSessionMissing},
	{"session missing", ErrSessionMissing},
	{"unknown session", ErrSessionMissing},
	{"invalid session", ErrSessionMissing},
	{"initialized notification", ErrInitNotification},
	{"executable file not found", ErrServerUnavailable},
	{"no such file or directory", ErrServerUnavailable},
	{"connection refused", ErrServerUnavailable},
	{"no such host", ErrServerUnavailable},
	{"exit status", ErrServerCrashed},
	{"signal: killed", ErrServerCrashed},
	{"broken pipe", ErrTransport},
	{"connection reset", ErrTransport},
	{"use of closed", ErrTransport},
	{"file already closed", ErrTransport},
	{"unexpected eof", ErrTransport},
}

func detectText(msg string) error {
	lower := strings.ToLower(msg)
	for _, p := range phrases {
		if strings.Contains(lower, p.fragment) {
			return p.class
		}
	}
	// A bare or trailing "EOF" (as in "read: EOF") is the io.EOF text
	// after %v flattening; anywhere else the letters may be part of a word.
	if lower == "eof" || strings.HasSuffix(lower, ": eof") {
		return ErrTransport
	}
	return nil
}
