package watchdog

import (
	"fmt"
	"time"
)

// Reason says why a process should terminate itself.
type Reason int

const (
	// None: keep running.
	None Reason = iota
	// Orphaned: the parent process that started this one has exited.
	Orphaned
	// Idle: nothing was in flight and there was no activity for at least the
	// idle timeout.
	Idle
)

// String returns "none", "orphaned" or "idle".
func (r Reason) String() string {
	switch r {
	case None:
		return "none"
	case Orphaned:
		return "orphaned"
	case Idle:
		return "idle"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// ShouldTerminate decides whether a server should terminate itself now. It
// is pure: it reads no clock and no process state, so a caller can test or
// reuse the rules with any values.
//
//   - idle is the time since the last activity, idleTimeout the configured
//     limit (zero or negative: the idle rule is off).
//   - ppid is the parent pid observed now, originalPPID the parent pid at
//     start. A positive originalPPID is orphaned as soon as ppid differs from
//     it: when a parent exits its children are re-parented, to PID 1 or to
//     the nearest subreaper (systemd --user, tini -s, a supervisor shim), so
//     any change means the parent is gone. A zero or negative originalPPID
//     means "unknown" (or a parent outside this PID namespace, for which
//     getppid returns 0); then only re-parenting to PID 1 counts.
//     An originalPPID of 1 turns the rule off, whatever ppid reads: a
//     process started by the container's or the system's init cannot
//     outlive it, and a program that must not follow its parent (a daemon
//     started detached) says so with 1.
//   - inflight is the number of requests being handled.
//
// The rules, in order:
//
//  1. Orphaning always wins, even over work in flight: the client that
//     would read the answer is gone, and nothing else will ever read it.
//  2. Work in flight (inflight > 0) is never reaped by the idle rule,
//     however small idleTimeout is and however long the request runs.
//  3. Idle fires only when idleTimeout > 0 and idle >= idleTimeout.
func ShouldTerminate(idle, idleTimeout time.Duration, ppid, originalPPID int, inflight int) (bool, Reason) {
	if orphaned(ppid, originalPPID) {
		return true, Orphaned
	}
	if inflight > 0 {
		return false, None
	}
	if idleTimeout > 0 && idle >= idleTimeout {
		return true, Idle
	}
	return false, None
}

// orphaned is rule 1 of ShouldTerminate.
func orphaned(ppid, originalPPID int) bool {
	switch {
	case originalPPID == 1:
		return false // off: see ShouldTerminate
	case originalPPID <= 0:
		return ppid == 1
	}
	return ppid != originalPPID
}
