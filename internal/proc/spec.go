package proc

import (
	"log/slog"
	"time"
)

// Default stop bounds.
const (
	DefaultStdinWait = 2 * time.Second
	DefaultTermWait  = 10 * time.Second
	// DefaultWaitDelay bounds how long reaping waits for stderr to drain
	// when a descendant keeps the pipe open.
	DefaultWaitDelay = 500 * time.Millisecond
)

// TreeEnv is the environment variable every spawned tree carries; its value
// names the owning mcpvisor instance and the tree. Escaped descendants keep
// it, which is how the stop sweep and the start-up sweep find them.
const TreeEnv = "MCPVISOR_TREE"

// Spec says what to run and how to stop it.
type Spec struct {
	// Name identifies the server in logs; it need not be unique.
	Name string
	// Command is the program, looked up in PATH when it has no slash.
	Command string
	Args    []string
	// Env is the complete environment of the process, used as given; nil
	// means mcpvisor's environment without mcpvisor's own variables
	// (Environ). TreeEnv is always added.
	Env []string
	// Dir is the working directory; "" means mcpvisor's.
	Dir string

	// StdinWait is how long Stop waits after closing stdin before SIGTERM
	// (default 2 s); TermWait how long after SIGTERM before SIGKILL
	// (default 10 s). Negative means no wait.
	StdinWait time.Duration
	TermWait  time.Duration
	// PostExit bounds the waits after stdout EOF and after the leader exits.
	PostExit PostExit

	// StderrLines and StderrBytes bound the stderr ring (defaults 200 lines,
	// 64 KiB).
	StderrLines int
	StderrBytes int
	// OnStderr, if set, is given every stderr line (without its newline)
	// with the pid of the tree's leader (Process.Pid), in order, as the
	// ring takes it. It is called on the goroutine that reads the
	// server's stderr: it must return quickly and never block, or the
	// server blocks once its stderr pipe fills.
	OnStderr func(pid int, line string)
	// Redact, if set, rewrites every stderr line before the ring and
	// OnStderr take it — the server's secrets hidden (config.Server's
	// RedactText) — so that neither the lines kept nor the errors that
	// quote the ring (an exit, a failed handshake) carry them. The debug
	// log gets the line as written.
	Redact func(line string) string

	// Limits, if set, bound what the tree may use (see Limits): a nil or
	// zero Limits sets none. A kind this machine cannot enforce is left
	// out, with a warning logged once per Name and kind.
	Limits *Limits

	// Logger receives stderr lines (at debug level) and lifecycle records,
	// tagged with server=Name. Nil means slog.Default().
	Logger *slog.Logger
}

func (s Spec) stdinWait() time.Duration { return orDefault(s.StdinWait, DefaultStdinWait) }
func (s Spec) termWait() time.Duration  { return orDefault(s.TermWait, DefaultTermWait) }

func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}
