// Package lifecycle keeps one long-lived connection alive: it connects,
// watches the session, reconnects — at once after a session that did
// useful work, with capped exponential backoff in a crash loop —, gives up
// when a crash loop goes on too long or an error cannot be fixed by
// retrying, and shuts everything down on request.
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
//   - Stopped or Failed in a crash loop: Start refuses at once (see
//     Restarts) until the loop's next attempt is due.
//   - Every non-terminal state → Stopped on Stop. Failed → Stopped on Stop,
//     Failed → Starting on Start.
//
// Stopped and Failed are terminal (State.IsTerminal): nothing runs there
// and only Start or Stop moves on. Failed carries the error that caused it.
//
// # Restarts
//
// Backoff is for crash loops, not for demand. What counts is whether a
// run did useful work: a session that answered at least one request
// (Answerer), however short its life, was a success; a run that failed
// before answering anything — a Connect that failed, a session that ended
// unanswered — is a failure. StateInfo.Failures counts the failures in a
// row; a success resets it, and so does a session that stays up for
// Policy.HealthyPeriod or a Stop. Nothing else does: the count spans
// Starts.
//
// A session that ends is reported to Policy.OnDisconnect. If the Policy
// restarts it, the Supervisor connects again after Policy.RetryDelay of
// the count: at once after a success and after a single failure (one
// failure is as likely a kill or a busy machine as a loop), then along the
// Backoff — 1 s, 2 s, 4 s … 32 s by default. Two failures in a row make a
// crash loop: while its next attempt is not due, Supervisor.CrashLoop
// reports a *CrashLoopError (how many runs failed, the last failure, when
// the next attempt is due), and Start returns it at once rather than
// connect, so that an owner with a request to serve answers it at once
// instead of making it wait out the backoff. Once the count passes
// Policy.MaxAttempts the Supervisor stops restarting on its own and enters
// Failed with an error wrapping ErrRestartLimit, calling Policy.OnFailed;
// a Start may still try again when the backoff allows. Permanent errors
// (ErrAuthRequired, ErrCapabilityMissing) are never retried by the
// Supervisor.
//
// How this compares. supervisord counts a start as successful once the
// process stayed up for startsecs (1 s by default) and retries a failed
// start startretries times (3) with a delay that grows by a second each
// time, then gives up (FATAL); a process that ran longer is restarted at
// once. systemd restarts after RestartSec (100 ms) and refuses any start,
// manual ones included, beyond StartLimitBurst (5) within
// StartLimitIntervalSec (10 s). Kubernetes restarts a container at once
// after its first exit, then after 10 s, 20 s, 40 s … capped at 5
// minutes, and resets the delay once the container ran for 10 minutes.
// All three judge a run by how long it lasted, which is all a process
// supervisor can see. An MCP server's supervisor sees more — whether the
// server answered — and serves requests that must not wait: a server that
// answered and was then killed a second later is no crash loop and comes
// back at once, where startsecs or a start limit would let it pile up
// delays under repeated kills; and a server that keeps dying before it
// answers is held off by the backoff like CrashLoopBackOff, but requests
// get an error that says so at once instead of queueing behind it.
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
