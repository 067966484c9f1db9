package fleet

import (
	"context"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
)

// WithTimeout is config.WithTimeout: a configured bound of 0 (or less)
// is no deadline.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return config.WithTimeout(ctx, d)
}

// PlusTimeouts is config.PlusTimeouts.
func PlusTimeouts(a, b time.Duration) time.Duration { return config.PlusTimeouts(a, b) }

// startMargin is what a caller waiting on a start adds to the server's
// init timeout, so that a start that fails at that timeout reaches it as
// that failure (its reason, its stderr) rather than as its own deadline.
const startMargin = 2 * time.Second

// StartWait is how long a caller waits for a server to start: its init
// timeout and startMargin, or no deadline (0) when it has none.
func StartWait(initTimeout time.Duration) time.Duration {
	return PlusTimeouts(initTimeout, startMargin)
}

// MinTimeout is the tighter of two configured bounds, 0 (no deadline) when
// neither has one.
func MinTimeout(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}
