package config

import (
	"context"
	"time"
)

// WithTimeout is context.WithTimeout for a configured bound, with the
// configuration's convention that a bound of 0 (or less) is no deadline:
// the context then ends only with ctx or when cancel is called.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// PlusTimeouts is the bound of something that takes up to a and then up to
// b: their sum, or no deadline (0) when either has none.
func PlusTimeouts(a, b time.Duration) time.Duration {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a + b
}
