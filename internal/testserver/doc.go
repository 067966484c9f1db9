// Package testserver is mcp-fixture: a small, hand-written MCP server that
// speaks newline-delimited JSON-RPC 2.0 on stdin/stdout and logs to stderr.
//
// It is the server every mcpvisor test supervises and the quick-start demo
// server. It offers the tools echo, sleep, progress, pid, crash, log, sample, meta, wedge, stderr, grow and whoami, and can be
// told to misbehave (start slowly, crash, ignore SIGTERM or stdin EOF, leave
// grandchildren behind, write garbage or huge lines, never answer, grow past
// a memory limit, fork until a pids limit stops it) by a flag or
// by the matching FIXTURE_* environment variable; a flag wins over the
// environment. With -skills it serves the skills extension (SEP-2640);
// with -http it speaks over HTTP instead of stdio, for clients that speak
// MCP over HTTP only. Run `go run ./internal/testserver/cmd/mcp-fixture -h` for the
// list.
//
// Besides [Main], which is the whole server, the package has helpers for
// tests: [Build] compiles the mcp-fixture binary once per test process, and
// [NewMarker], [Processes], [LiveProcesses], [KillProcesses] and [WaitGone]
// find every process of a fixture tree by the [MarkerEnv] environment variable
// that a test puts in the spawn environment (children inherit it).
package testserver
