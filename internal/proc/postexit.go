package proc

import (
	"context"
	"time"
)

// Verdict is the outcome of a post-exit wait.
type Verdict int

// Verdicts, in fire-reason precedence order: when both fire for one process,
// ExitHang is the one reported, because a leader that never exits makes the
// question of its descendants moot.
const (
	// VerdictExited: the process exited within the exit-hang window.
	VerdictExited Verdict = iota
	// VerdictQuiesced: no descendant was left alive within the quiesce window.
	VerdictQuiesced
	// VerdictExitHang fires when the process closed stdout but did not exit
	// within the exit-hang window.
	VerdictExitHang
	// VerdictDescendantHang fires when descendants were still alive after
	// the quiesce window.
	VerdictDescendantHang
	// VerdictCancelled: the context ended the wait before a decision.
	VerdictCancelled
)

func (v Verdict) String() string {
	switch v {
	case VerdictExited:
		return "exited"
	case VerdictQuiesced:
		return "quiesced"
	case VerdictExitHang:
		return "exit-hang"
	case VerdictDescendantHang:
		return "descendant-hang"
	case VerdictCancelled:
		return "cancelled"
	}
	return "unknown"
}

// Fired reports whether the verdict calls for the tree to be killed.
func (v Verdict) Fired() bool { return v == VerdictExitHang || v == VerdictDescendantHang }

// Default post-exit windows.
const (
	DefaultExitHangWait = 5 * time.Second
	DefaultQuiesceWait  = time.Second
	DefaultQuiescePoll  = 20 * time.Millisecond
)

// PostExit holds the bounded waits that follow the end of a server's output.
// After stdout reaches EOF the process should exit soon (ExitHangWait);
// after the leader exits its descendants should be gone soon (QuiesceWait,
// checked every Poll). Zero fields take the defaults above. Every wait
// honours its context and uses only timers, so tests run it under
// testing/synctest.
type PostExit struct {
	ExitHangWait time.Duration
	QuiesceWait  time.Duration
	Poll         time.Duration
}

func (w PostExit) withDefaults() PostExit {
	if w.ExitHangWait <= 0 {
		w.ExitHangWait = DefaultExitHangWait
	}
	if w.QuiesceWait <= 0 {
		w.QuiesceWait = DefaultQuiesceWait
	}
	if w.Poll <= 0 {
		w.Poll = DefaultQuiescePoll
	}
	return w
}

// WaitExit waits for exited to close. It returns VerdictExited at once when
// it already is, VerdictExitHang when the window passes first, and
// VerdictCancelled when ctx ends first.
func (w PostExit) WaitExit(ctx context.Context, exited <-chan struct{}) Verdict {
	w = w.withDefaults()
	select {
	case <-exited:
		return VerdictExited
	default:
	}
	t := time.NewTimer(w.ExitHangWait)
	defer t.Stop()
	select {
	case <-exited:
		return VerdictExited
	case <-t.C:
		// A last look: an exit that raced the timer still counts.
		select {
		case <-exited:
			return VerdictExited
		default:
			return VerdictExitHang
		}
	case <-ctx.Done():
		return VerdictCancelled
	}
}

// WaitQuiesce polls alive (the number of descendants still running) until it
// reports none, the window passes, or ctx ends. alive is checked before the
// first wait, so a tree that is already gone costs no time, and once more
// after the window closes.
func (w PostExit) WaitQuiesce(ctx context.Context, alive func() int) Verdict {
	w = w.withDefaults()
	if alive() == 0 {
		return VerdictQuiesced
	}
	deadline := time.NewTimer(w.QuiesceWait)
	defer deadline.Stop()
	tick := time.NewTicker(w.Poll)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if alive() == 0 {
				return VerdictQuiesced
			}
		case <-deadline.C:
			if alive() == 0 {
				return VerdictQuiesced
			}
			return VerdictDescendantHang
		case <-ctx.Done():
			return VerdictCancelled
		}
	}
}
