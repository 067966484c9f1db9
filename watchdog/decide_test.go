package watchdog

import (
	"testing"
	"time"
)

func TestShouldTerminate(t *testing.T) {
	const parent = 4242
	tests := []struct {
		name        string
		idle        time.Duration
		idleTimeout time.Duration
		ppid, orig  int
		inflight    int
		want        Reason
	}{
		// Orphaning: any change of parent, and it beats everything.
		{"parent alive, idle off", time.Hour, 0, parent, parent, 0, None},
		{"reparented to init", 0, 0, 1, parent, 0, Orphaned},
		{"reparented to a subreaper", 0, 0, 777, parent, 0, Orphaned},
		{"orphaned with work in flight", 0, time.Minute, 1, parent, 3, Orphaned},
		{"orphaned while also idle", time.Hour, time.Minute, 1, parent, 0, Orphaned},
		{"orphaned with idle off", 0, -time.Second, 1, parent, 0, Orphaned},
		// Original parent unknown: only PID 1 counts.
		{"unknown original, under init", 0, 0, 1, 0, 0, Orphaned},
		{"unknown original, other parent", 0, 0, 777, 0, 0, None},
		{"negative original, under init", 0, 0, 1, -1, 0, Orphaned},
		{"namespace init: ppid 0", time.Hour, 0, 0, 0, 0, None},
		// Started by init (a container's PID 1): never orphaned.
		{"original parent is init", time.Hour, 0, 1, 1, 0, None},
		{"original init, idle", time.Hour, time.Minute, 1, 1, 0, Idle},
		{"original init, another parent now", time.Hour, 0, parent, 1, 0, None},
		// In flight: never idle, however small the timeout.
		{"in flight, long idle", 24 * time.Hour, time.Nanosecond, parent, parent, 1, None},
		{"many in flight", time.Hour, time.Second, parent, parent, 100, None},
		// Idle: only with a positive timeout, at or after the deadline.
		{"idle off (zero)", 24 * time.Hour, 0, parent, parent, 0, None},
		{"idle off (negative)", 24 * time.Hour, -time.Minute, parent, parent, 0, None},
		{"before deadline", time.Minute - time.Nanosecond, time.Minute, parent, parent, 0, None},
		{"at deadline", time.Minute, time.Minute, parent, parent, 0, Idle},
		{"past deadline", time.Hour, time.Minute, parent, parent, 0, Idle},
		{"negative in-flight count treated as none", time.Hour, time.Minute, parent, parent, -1, Idle},
		{"clock behind last activity", -time.Second, time.Minute, parent, parent, 0, None},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stop, reason := ShouldTerminate(tt.idle, tt.idleTimeout, tt.ppid, tt.orig, tt.inflight)
			if reason != tt.want || stop != (tt.want != None) {
				t.Errorf("ShouldTerminate(%v, %v, ppid %d, orig %d, inflight %d) = %v, %v; want %v",
					tt.idle, tt.idleTimeout, tt.ppid, tt.orig, tt.inflight, stop, reason, tt.want)
			}
		})
	}
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{
		None:       "none",
		Orphaned:   "orphaned",
		Idle:       "idle",
		Reason(42): "Reason(42)",
	} {
		if got := r.String(); got != want {
			t.Errorf("Reason(%d).String() = %q, want %q", int(r), got, want)
		}
	}
}
