package catalog

import "errors"

// The catalog's error sentinels, all in one place: each is wrapped (or,
// for ErrToolHeld, matched) by the errors of the operations its comment
// names.

// Errors of Approve.
var (
	// ErrNotPending: a named tool is not held back (the error lists those
	// that are).
	ErrNotPending = errors.New("not pending approval")
	// ErrStaleApproval: a named tool's definition changed since the
	// fingerprint the approval gave.
	ErrStaleApproval = errors.New("definition changed since it was reviewed")
)

// ErrNotLost is AcceptLost's error for a server whose tools are not lost.
var ErrNotLost = errors.New("has not lost its tools")

// ErrToolHeld is matched (errors.Is) by CheckTool's error for a tool a
// pinned server holds back, a *HeldError.
var ErrToolHeld = errors.New("held back until approved")
