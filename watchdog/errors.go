package watchdog

import "errors"

// ErrNoState is returned by Start when Config.IdleTimeout is positive but
// Config.State is nil: without knowing when the server was last active and
// what it has in flight, the idle rule would reap it IdleTimeout after Start
// whatever it was doing.
var ErrNoState = errors.New("watchdog: IdleTimeout needs a State function")
