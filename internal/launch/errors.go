package launch

import "errors"

// The package's error sentinels, all in one place: each is wrapped by the
// errors of the operations its comment names. Why a resolution failed is
// an *Error, why a command line is not flattened a *NotUnderstood.

// ErrNoPackage is wrapped by Parse's error for a launcher given nothing
// to run.
var ErrNoPackage = errors.New("no package to run")

// ErrNoLauncher is wrapped by Flattener.Refresh's error for a server that
// has no package launcher to resolve: a remote one, one whose command is
// not a launcher, one configured "launch": "as-written".
var ErrNoLauncher = errors.New("no package launcher to resolve")
