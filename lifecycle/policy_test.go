package lifecycle

import (
	"log/slog"
	"math"
	"testing"
	"time"
)

func TestBackoffSchedule(t *testing.T) {
	s := time.Second
	tests := []struct {
		name string
		b    Backoff
		want []time.Duration // attempts 1, 2, …
	}{
		{"defaults", Backoff{}, []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 32 * s, 32 * s}},
		{"custom", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3},
			[]time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond, s, s}},
		{"constant", Backoff{Initial: 5 * s, Multiplier: 1}, []time.Duration{5 * s, 5 * s, 5 * s}},
		{"max below initial", Backoff{Initial: 10 * s, Max: 2 * s}, []time.Duration{10 * s, 10 * s}},
		{"multiplier below one", Backoff{Multiplier: 0.5}, []time.Duration{1 * s, 2 * s, 4 * s}},
		{"NaN multiplier", Backoff{Multiplier: math.NaN()}, []time.Duration{1 * s, 2 * s}},
		{"infinite multiplier", Backoff{Multiplier: math.Inf(1)}, []time.Duration{1 * s, 2 * s}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.b.withDefaults()
			for i, want := range tt.want {
				if got := b.delay(i+1, 0); got != want {
					t.Errorf("attempt %d: delay = %v, want %v", i+1, got, want)
				}
			}
			// With no jitter configured, Delay is exactly the schedule.
			if tt.b.Jitter == 0 {
				if got := tt.b.Delay(1); got != tt.want[0] {
					t.Errorf("Delay(1) = %v, want %v", got, tt.want[0])
				}
			}
		})
	}
}

func TestBackoffEdges(t *testing.T) {
	b := Backoff{}.withDefaults()
	if got := b.delay(0, 0); got != time.Second {
		t.Errorf("attempt 0: %v, want 1s", got)
	}
	if got := b.delay(-3, 0); got != time.Second {
		t.Errorf("attempt -3: %v, want 1s", got)
	}
	for _, n := range []int{64, 1000, math.MaxInt32, math.MaxInt} {
		if got := b.delay(n, 0); got != 32*time.Second {
			t.Errorf("attempt %d: %v, want the 32s cap", n, got)
		}
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	for _, jitter := range []float64{0.1, 0.5, 1} {
		b := Backoff{Jitter: jitter}.withDefaults()
		for attempt := 1; attempt <= 8; attempt++ {
			full := b.delay(attempt, 0)
			lo := time.Duration(float64(full) * (1 - jitter))
			// The extremes of u.
			if got := b.delay(attempt, 0); got != full {
				t.Errorf("jitter %v attempt %d u=0: %v, want %v", jitter, attempt, got, full)
			}
			if got := b.delay(attempt, 1); got < lo-1 || got > lo+1 {
				t.Errorf("jitter %v attempt %d u=1: %v, want %v", jitter, attempt, got, lo)
			}
			// Random draws stay within [lo, full] and actually vary.
			seen := map[time.Duration]bool{}
			for range 200 {
				got := Backoff{Jitter: jitter}.Delay(attempt)
				if got < lo || got > full {
					t.Fatalf("jitter %v attempt %d: %v outside [%v, %v]", jitter, attempt, got, lo, full)
				}
				seen[got] = true
			}
			if len(seen) < 2 {
				t.Errorf("jitter %v attempt %d: no variation in 200 draws", jitter, attempt)
			}
		}
	}
}

func TestBackoffJitterClamp(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{
		{-1, 0}, {0, 0}, {math.NaN(), 0}, {0.3, 0.3}, {1, 1}, {7, 1},
	} {
		if got := (Backoff{Jitter: tt.in}).withDefaults().Jitter; got != tt.want {
			t.Errorf("Jitter %v → %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestPolicyDefaults(t *testing.T) {
	p := Policy{}.withDefaults()
	if p.Restart != RestartOnFailure || p.MaxAttempts != 5 || p.HealthyPeriod != 5*time.Minute ||
		p.InitTimeout != 30*time.Second || p.Logger != slog.Default() {
		t.Fatalf("defaults: %+v", p)
	}
	if p.Backoff != (Backoff{Initial: time.Second, Max: 32 * time.Second, Multiplier: 2}) {
		t.Fatalf("backoff defaults: %+v", p.Backoff)
	}

	l := slog.New(slog.DiscardHandler)
	p = Policy{Restart: RestartAlways, MaxAttempts: -1, HealthyPeriod: -1, InitTimeout: -1, Logger: l}.withDefaults()
	if p.Restart != RestartAlways || p.MaxAttempts != -1 || p.HealthyPeriod != -1 || p.InitTimeout != -1 || p.Logger != l {
		t.Fatalf("explicit values changed: %+v", p)
	}
	if got := (Policy{Restart: 9}).withDefaults().Restart; got != RestartOnFailure {
		t.Fatalf("unknown Restart → %v, want on-failure", got)
	}
}

func TestRestartString(t *testing.T) {
	for r, want := range map[Restart]string{
		RestartOnFailure: "on-failure", RestartNever: "never", RestartAlways: "always", Restart(7): "Restart(7)",
	} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(r), r.String(), want)
		}
	}
}
