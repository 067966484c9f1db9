package bridge

import "errors"

var (
	// ErrInUse: another live process (a daemon) holds the socket. Listen
	// never takes a socket from a live owner.
	ErrInUse = errors.New("bridge: the socket is in use by another mcpvisor serve")

	// ErrRefused: the daemon answered the preface with an error (a
	// *RefusedError, which carries the daemon's message).
	ErrRefused = errors.New("bridge: the daemon refused the connection")

	// ErrDaemonClosed: the daemon closed the connection while the client
	// was still connected (its stdin still open).
	ErrDaemonClosed = errors.New("bridge: the daemon closed the connection")

	// ErrBadPreface: the first line of a connection is not a connect
	// preface (too long, not JSON, no version).
	ErrBadPreface = errors.New("bridge: not a connect preface")

	// ErrUnsupportedVersion: the preface names a version this side does
	// not speak.
	ErrUnsupportedVersion = errors.New("bridge: unsupported preface version")
)

// RefusedError is the daemon's refusal of a preface, with its reason.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "the daemon refused the connection: " + e.Reason }

// Unwrap makes a RefusedError match ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }
