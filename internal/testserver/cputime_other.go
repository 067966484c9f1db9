//go:build !unix

package testserver

import "time"

// cpuTime is not read off Unix: -spin counts wall-clock time there.
func cpuTime() (time.Duration, bool) { return 0, false }
