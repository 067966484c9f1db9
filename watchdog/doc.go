// Package watchdog makes a stdio MCP server (or any stdio child process)
// terminate itself once it has clearly been abandoned.
//
// A stdio server normally exits when its stdin reaches EOF or it receives
// SIGTERM. A client that reconnects may instead start a fresh server and
// abandon the old one without either: the old server's stdin is still held
// open (by a sibling, a shell, a leaked descriptor), no EOF ever arrives,
// and it blocks forever on a read — one stray process per reconnect. The
// client starts a new server the next time it needs one, so an abandoned
// server can safely go.
//
// # Rules
//
// ShouldTerminate is the whole decision, as a pure function:
//
//   - Orphaned: the parent that started the process has exited. This is
//     always checked and always wins, even over a request in flight: the
//     client that would read the answer is gone.
//   - Idle: optional (Config.IdleTimeout > 0). Fires when nothing is in
//     flight and the last activity is at least IdleTimeout ago. A request
//     in flight is never reaped by it, however long it runs.
//
// # Use
//
// Keep a Tracker of requests, and start the watchdog next to the read loop:
//
//	var activity watchdog.Tracker
//	wd, err := watchdog.Start(ctx, watchdog.Config{
//		IdleTimeout: 30 * time.Minute,
//		State:       activity.Snapshot,
//	})
//	if err != nil { … }
//	defer wd.Stop()
//	for each request read from stdin {
//		activity.Begin()
//		handle it and flush the response
//		activity.End()
//	}
//
// By default the watchdog sends SIGTERM to its own process, so the program's
// usual shutdown runs (Config.OnTerminate replaces that).
//
// # How the parent is followed
//
// The parent to follow is the parent pid read when this package was
// initialised, before main (Config.OriginalPPID overrides it). When a
// parent exits, the kernel re-parents its children to PID 1 or to the
// nearest subreaper, so any change of the parent pid means orphaned.
//
//   - Linux 5.3+: a pidfd on the parent, waited for in the Go runtime's
//     poller. Detection is immediate and costs no polling and no thread.
//     (PR_SET_PDEATHSIG is not used: a library cannot own the process's
//     signals, and it fires when the parent's forking thread exits, which
//     for a Go parent can happen while the parent lives on.)
//   - macOS: a kqueue EVFILT_PROC NOTE_EXIT filter on the parent, with the
//     parent pid also polled every Config.PollInterval as a backstop.
//   - Elsewhere, or when the above cannot be set up: the parent pid is
//     polled every Config.PollInterval (default 1 s).
//
// A process whose original parent is PID 1 (for example a server started
// directly as a container's command under tini or docker-init) is never
// reported as orphaned: its parent cannot exit while it lives. On Windows
// a dead parent's pid does not change, so only the idle rule applies.
//
// # Idle timing
//
// The idle check does not sweep on a fixed period: the watchdog sleeps
// until the idle deadline (last activity + IdleTimeout) and checks again
// then, so an idle server goes exactly at its deadline and activity in the
// meantime simply moves the deadline. While requests are in flight it
// re-checks every quarter of IdleTimeout (between 10 ms and 1 s), so after
// a long request it goes at most that late.
package watchdog
