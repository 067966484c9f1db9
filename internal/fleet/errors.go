package fleet

import (
	"errors"
	"fmt"
)

// The fleet's error sentinels, all in one place: each is wrapped (or, for
// ErrToolHeld, matched) by the errors of the operations its comment names.

// errRetired is what acquire returns on a retired instance: the caller
// asks its server for the instance now in service.
var errRetired = errors.New("instance retired")

// ErrNotReloaded is wrapped by the error of a reload that applied
// nothing: the fleet is closing (ErrReloadClosed), or its caller gave up
// before its turn.
var ErrNotReloaded = errors.New("nothing reloaded")

// ErrReloadClosed is returned by a reload once the fleet is closing.
var ErrReloadClosed = fmt.Errorf("mcpvisor is shutting down: %w", ErrNotReloaded)

// ErrFleetClosed is wrapped by the error a request gets once the fleet is
// closing: nothing starts any more.
var ErrFleetClosed = errors.New("mcpvisor is shutting down")

// ErrInstanceLimit is wrapped by the error Acquire returns when a
// per-session server already runs its maximum of instances.
var ErrInstanceLimit = errors.New("per-session instance limit reached")

// ErrStopped is wrapped by the error a request gets while the operator
// has stopped its server (Server.Stop), until Server.Start.
var ErrStopped = errors.New("stopped by the operator")

// ErrRemoved is wrapped by the error a request gets on a server a reload
// removed from the configuration.
var ErrRemoved = errors.New("removed from the configuration")

// ErrNotRunning is wrapped by Sleep's error for a server that has no
// running process to put to sleep: not started yet, starting, restarting,
// failed, already dormant, or served per client session.
var ErrNotRunning = errors.New("not running")

// ErrBusy is wrapped by Sleep's error for a server that must stay up for
// now: requests are in flight, or a client subscribed to its resources
// (whose updates only a running server can send).
var ErrBusy = errors.New("busy")
