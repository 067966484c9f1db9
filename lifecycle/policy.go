package lifecycle

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Defaults applied by Policy and Backoff to zero fields.
const (
	DefaultMaxAttempts       = 5
	DefaultHealthyPeriod     = 5 * time.Minute
	DefaultInitTimeout       = 30 * time.Second
	DefaultBackoffInitial    = 1 * time.Second
	DefaultBackoffMax        = 32 * time.Second
	DefaultBackoffMultiplier = 2.0
)

// Restart says whether a Supervisor reconnects after a session ends on its
// own. Whatever the mode, a session that ends with a permanent error (see
// IsPermanent) is never restarted, and a restart asked for with
// RestartAndWait always happens.
type Restart int

const (
	// RestartOnFailure reconnects after a session ends with an error. A
	// session that ends cleanly (Wait returns nil) leaves the Supervisor
	// Stopped. The default.
	RestartOnFailure Restart = iota
	// RestartNever does not reconnect. A session that ends with an error
	// leaves the Supervisor Failed (OnFailed is called); one that ends
	// cleanly leaves it Stopped.
	RestartNever
	// RestartAlways reconnects after every session end, clean or not.
	RestartAlways
)

// String returns "on-failure", "never" or "always" (the configuration
// spelling), or "Restart(n)" for other values.
func (r Restart) String() string {
	switch r {
	case RestartOnFailure:
		return "on-failure"
	case RestartNever:
		return "never"
	case RestartAlways:
		return "always"
	}
	return "Restart(" + strconv.Itoa(int(r)) + ")"
}

// Backoff is a capped exponential delay with optional jitter between restart
// attempts. Attempt n (counting from 1) waits
//
//	min(Initial × Multiplier^(n−1), Max)
//
// reduced by a random fraction of up to Jitter of itself. Zero fields take
// the defaults: Initial 1s, Max 32s, Multiplier 2, Jitter 0.
type Backoff struct {
	// Initial is the delay before the first restart attempt. Zero or
	// negative means DefaultBackoffInitial (1s).
	Initial time.Duration
	// Max caps the delay. Zero or negative means DefaultBackoffMax (32s);
	// a Max below Initial is raised to Initial.
	Max time.Duration
	// Multiplier is the growth factor between attempts. Values below 1
	// (including zero and NaN) mean DefaultBackoffMultiplier (2); exactly 1
	// gives a constant delay.
	Multiplier float64
	// Jitter, between 0 and 1, spreads restarts of many servers apart: each
	// delay d becomes a uniformly random value in [d×(1−Jitter), d], so
	// jitter never lengthens a delay beyond the schedule above. 0 (the
	// default) disables it; values outside 0..1 are clamped.
	Jitter float64
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0) {
		b.Multiplier = DefaultBackoffMultiplier
	}
	switch {
	case !(b.Jitter > 0): // also NaN
		b.Jitter = 0
	case b.Jitter > 1:
		b.Jitter = 1
	}
	return b
}

// Delay returns the wait before restart attempt n (n < 1 counts as 1), with
// defaults applied and jitter drawn from math/rand/v2. It is safe for
// concurrent use.
func (b Backoff) Delay(attempt int) time.Duration {
	return b.withDefaults().delay(attempt, rand.Float64())
}

// delay computes the wait for attempt with defaults already applied; u in
// [0, 1) chooses the jitter (0 means none taken).
func (b Backoff) delay(attempt int, u float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(attempt-1))
	if d > float64(b.Max) || math.IsInf(d, 0) {
		d = float64(b.Max)
	}
	d -= d * b.Jitter * u
	return time.Duration(d)
}

// Policy says how a Supervisor treats a connection over time. The zero
// value is usable: restart on failure, at most 5 attempts between healthy
// periods of 5 minutes, 1s…32s doubling backoff without jitter, a 30s
// connect timeout, no callbacks, slog.Default for logs.
//
// Callbacks run on the Supervisor's own goroutine, one at a time, in the
// order the events happen. They must return promptly and must not call
// Stop or RestartAndWait on the same Supervisor (those wait for that very
// goroutine); hand such work to another goroutine.
type Policy struct {
	// Restart chooses when an ended session is reconnected. Default
	// RestartOnFailure; values outside the enum behave as RestartOnFailure.
	Restart Restart

	// MaxAttempts bounds the runs in a row that may fail before answering
	// anything (StateInfo.Failures) while the Supervisor restarts on its
	// own: the attempt that would follow more failures than MaxAttempts is
	// not made, and the Supervisor moves to StateFailed with an error
	// wrapping ErrRestartLimit (a Start may still try again, as the crash
	// loop's delay allows). 0 means DefaultMaxAttempts (5); negative means
	// unlimited.
	MaxAttempts int

	// Backoff spaces the attempts of a crash loop (RetryDelay); zero
	// fields take Backoff defaults.
	Backoff Backoff

	// HealthyPeriod is how long a session must stay up to count as a
	// success — the count of failures in a row reset — even if it answered
	// nothing (a session that answered counts at once: Answerer). 0 means
	// DefaultHealthyPeriod (5 minutes); negative means only an answer
	// resets the count.
	HealthyPeriod time.Duration

	// InitTimeout bounds each Connect call: its context carries this
	// deadline, and a failure caused by the deadline is reported as an
	// error wrapping ErrInitTimeout (and the Connector's own error). 0
	// means DefaultInitTimeout (30s); negative means no deadline.
	InitTimeout time.Duration

	// Streak, if set, is the crash-loop record the Supervisor keeps its
	// failures in a row in, shared with the other Supervisors given the
	// same Streak: a new Supervisor of something in a crash loop starts
	// in it (its Start refuses at once until the next attempt is due).
	// Stop does not reset a shared Streak: its owner does (Streak.Reset).
	// Nil: the Supervisor's own, which Stop resets.
	Streak *Streak

	// OnDisconnect is called after every session that reached Ready has
	// ended — on its own, through RestartAndWait, or through Stop — with
	// Wait's result passed through Classify (nil for a clean end).
	OnDisconnect func(err error)

	// OnRestart is called after each successful reconnect, with the
	// Supervisor already Ready and before RestartAndWait callers and
	// Restarted channels are released. Not called for the connect made by
	// Start.
	OnRestart func()

	// OnRestarting is called before each attempt of a restart the
	// Supervisor makes on its own (not one RestartAndWait asked for), with
	// the attempt number since the session ended (1-based), the delay
	// before it (0 after a run that answered, or after a single failure)
	// and the error that caused it (the session's end, or the previous
	// attempt's failure). It runs on the Supervisor's goroutine and must
	// not block.
	OnRestarting func(attempt int, delay time.Duration, cause error)

	// OnFailed is called once each time the Supervisor enters StateFailed,
	// with the error it recorded.
	OnFailed func(err error)

	// Logger receives lifecycle logs, with a "server" attribute holding
	// the Supervisor's name. Nil means slog.Default().
	Logger *slog.Logger
}

// crashLoopRuns is how many runs in a row must fail before answering
// anything for a Supervisor to be in a crash loop: one failure is as
// likely a chance (a kill, a busy machine) as a loop, and is retried at
// once.
const crashLoopRuns = 2

// RetryDelay is the wait before the attempt that follows failures runs in
// a row that failed before answering anything (DESIGN: backoff is for
// crash loops, not for demand): none after a run that answered (0) or
// after a single failure (1), then the Backoff schedule from its first
// step — Backoff.Delay(failures−1): 1s, 2s, 4s … 32s by default.
func (p Policy) RetryDelay(failures int) time.Duration {
	if failures < crashLoopRuns {
		return 0
	}
	return p.Backoff.Delay(failures - 1)
}

func (p Policy) withDefaults() Policy {
	switch p.Restart {
	case RestartOnFailure, RestartNever, RestartAlways:
	default:
		p.Restart = RestartOnFailure
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	p.Backoff = p.Backoff.withDefaults()
	if p.HealthyPeriod == 0 {
		p.HealthyPeriod = DefaultHealthyPeriod
	}
	if p.InitTimeout == 0 {
		p.InitTimeout = DefaultInitTimeout
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	return p
}
