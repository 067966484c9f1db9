// Package lifecycle keeps one long-lived connection alive: it connects,
// watches the session, reconnects with capped exponential backoff, gives up
// when restarts come too fast or an error cannot be fixed by retrying, and
// shuts everything down on request.
//
// The package knows nothing about what it connects to. A transport — a
// child process speaking over stdio, a remote HTTP server — implements
// Connector and Session; a Supervisor applies a Policy to it; failures are
// described by the error classes in this package (ErrTransport,
// ErrServerCrashed, ErrAuthRequired, …) so that policy is decided with
// errors.Is rather than by reading messages.
//
// # States
//
// A Supervisor is always in one State. Only these moves are possible;
// Tracker refuses every other one.
//
//	           Start              connected
//	Stopped ──────────▶ Starting ──────────▶ Ready ◀──────▶ Degraded
//	 ▲  ▲                 │   │       ended  │  ▲             │
//	 │  └─ transient err ─┘   │ permanent    │  │ reconnected │ ended
//	 │                        ▼ err          ▼  │             │
//	 └─────── Stop ─────── Failed ◀─────── Restarting ◀───────┘
//	                               gave up
//
// Not drawn: Stop leads from every state to Stopped, Start from Failed to
// Starting, and a session end can also lead from Ready or Degraded straight
// to Failed or Stopped (see below).
//
// In words:
//   - Stopped → Starting: Start.
//   - Starting → Ready when the first Connect succeeds; → Stopped when it
//     fails with a transient error, or Stop or Start's context interrupts
//     it (Start does not retry; its caller decides when to try again);
//     → Failed when it fails with a permanent error (IsPermanent).
//   - Ready ↔ Degraded: MarkDegraded and MarkHealthy, for the owner's health
//     checks. The Supervisor treats both as serving.
//   - Ready or Degraded → Restarting when the session ends and the Policy
//     restarts it, or RestartAndWait asked for a restart; → Stopped when it
//     ends cleanly and the Policy does not restart clean ends (OnFailure,
//     Never); → Failed when it ends with a permanent error, or with any
//     error under RestartNever.
//   - Restarting → Ready when a reconnect succeeds; → Failed when the
//     restart limit is reached or a reconnect fails permanently.
//   - Every non-terminal state → Stopped on Stop. Failed → Stopped on Stop,
//     Failed → Starting on Start.
//
// Stopped and Failed are terminal (State.IsTerminal): nothing runs there
// and only Start or Stop moves on. Failed carries the error that caused it.
//
// # Restarts
//
// A session that ends is reported to Policy.OnDisconnect. If the Policy
// restarts it, the Supervisor counts an attempt, waits the Backoff delay for
// that attempt number, and calls Connect again; every failed Connect is
// another attempt. Once the count would pass Policy.MaxAttempts the
// Supervisor enters Failed with an error wrapping ErrRestartLimit and calls
// Policy.OnFailed. The count is not reset by a successful reconnect, only
// after a session has stayed up for Policy.HealthyPeriod (or by Start): a
// server that crashes a minute after every restart is still given up on
// after MaxAttempts restarts, and one that crashes once a day never is.
// Permanent errors (ErrAuthRequired, ErrCapabilityMissing) are never
// retried.
//
// # Implementing a Connector
//
// Connect should do all the work needed before the session can serve
// (spawn and handshake, dial and initialize) and return only then. Its
// context is for that phase alone: it carries Policy.InitTimeout, is
// cancelled by Stop, and is cancelled when Connect returns, so a process
// backend must not start its child with exec.CommandContext(ctx, …) on that
// context — the child would be killed the moment Connect returned. Tie the
// child to the Session instead: Close stops it (for a process: close stdin,
// signal, kill, reap), and Wait returns once it has been reaped, with nil
// for an exit the Supervisor asked for and an error otherwise. Close must
// be idempotent and must not wait for Wait's caller; Wait must return after
// Close. Classify errors before returning them (a non-zero exit is
// ErrServerCrashed, a missing binary ErrServerUnavailable, an EOF on the
// protocol stream ErrTransport); the Supervisor classifies again, and an
// expired InitTimeout is reported as ErrInitTimeout whatever Connect
// returned.
//
// A Supervisor never calls Connect concurrently with itself, and calls
// Wait once per Session.
package lifecycle
