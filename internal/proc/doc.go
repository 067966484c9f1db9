// Package proc owns one server process tree from spawn to reap.
//
// A Runtime (one per mcpvisor process) detects which containment layers the
// machine allows, sweeps what a previous, killed mcpvisor left behind, and
// spawns Processes. Each Process runs in its own process group; on Linux it
// also gets a pidfd, a parent-death signal tied to a spawner thread that
// stays alive while any child lives, and — where permitted — its own pid
// namespace (under a small init: the mcpvisor-shim binary when it is
// installed next to mcpvisor, else mcpvisor re-executed; see package shim)
// and its
// own cgroup v2 leaf. The Runtime makes mcpvisor a child subreaper, so
// descendants that escape their group (double fork + setsid) come back to
// mcpvisor and are killed and reaped when their server stops.
//
// Stop escalates once per tree: close stdin, wait (2 s by default),
// SIGTERM the whole group, wait (10 s by default), SIGKILL the group (and the
// cgroup), then sweep escaped descendants and reap. Every deadline put on
// that one escalation — the context of any caller of Stop, the first or a
// later one, and Runtime.BoundStops, which bounds every stop of the runtime
// under way or to come — moves SIGKILL forward, never back, so that the
// tree is reaped before the earliest of them; the end of the first
// caller's context means SIGKILL at once. The leader is kept
// unreaped (observed through its pidfd with WNOWAIT) until the group is
// swept, so a group signal can never reach a recycled process group.
//
// A Spec may carry resource Limits (memory, tasks, CPU), enforced per tree
// by cgroup controllers, v2 or v1 (limits_linux.go); a tree killed by its
// memory limit ends ExitOOM. Report.Limits says which kinds the machine
// can enforce and how, or why not.
//
// On other systems only the process group and kill escalation are available;
// Report says so plainly.
package proc
