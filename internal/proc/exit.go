package proc

import (
	"fmt"
	"syscall"
)

// ExitKind classifies how a process tree ended, for the supervisor.
type ExitKind int

const (
	// ExitRunning means the process has not exited yet.
	ExitRunning ExitKind = iota
	// ExitClean is exit code 0 that mcpvisor did not force (the server quit,
	// or closed down after its stdin was closed).
	ExitClean
	// ExitStopped means mcpvisor stopped it: it exited after Stop began, by
	// stdin close, SIGTERM or SIGKILL.
	ExitStopped
	// ExitCrashed is a non-zero exit code or a death by signal that mcpvisor
	// did not send.
	ExitCrashed
	// ExitStartFailed means the process could not be started at all.
	ExitStartFailed
	// ExitOOM means the tree's memory limit ended it: its cgroup counted
	// an OOM kill, and it crashed (an exit or death mcpvisor did not
	// cause) or its leader died by a SIGKILL mcpvisor had not sent (a stop
	// under way had only closed stdin or sent SIGTERM). The kill is read
	// from the cgroup's own counter (v2 memory.events, v1
	// memory.oom_control: oom_kill), never guessed from the signal. It
	// counts as a crash: the restart policy applies.
	ExitOOM
)

func (k ExitKind) String() string {
	switch k {
	case ExitRunning:
		return "running"
	case ExitClean:
		return "clean"
	case ExitStopped:
		return "stopped"
	case ExitCrashed:
		return "crashed"
	case ExitStartFailed:
		return "start-failed"
	case ExitOOM:
		return "oom"
	}
	return fmt.Sprintf("ExitKind(%d)", int(k))
}

// ExitStatus describes the end of a process tree.
type ExitStatus struct {
	Kind ExitKind
	// Code is the exit code, or -1 when the process died by a signal.
	Code int
	// Signal is the signal that ended the process, or 0.
	Signal syscall.Signal
	// Stage is the last stop step mcpvisor had taken when the process ended:
	// "" (none), "stdin", "term" or "kill".
	Stage string
	// OOMKills counts the processes of the tree the kernel's OOM killer
	// killed within its memory limit, and PIDsLimitHits the forks (and
	// thread creations) its pids limit refused: the tree's cgroup
	// counters, read before its leaves are removed. Zero without a
	// leaf that counts them.
	OOMKills      int
	PIDsLimitHits int
}

// Crashed reports whether the supervisor should treat the end as a failure.
func (s ExitStatus) Crashed() bool {
	return s.Kind == ExitCrashed || s.Kind == ExitStartFailed || s.Kind == ExitOOM
}

func (s ExitStatus) String() string {
	var how string
	switch {
	case s.Kind == ExitRunning:
		return "running"
	case s.Signal != 0:
		how = "signal " + SignalName(s.Signal)
	default:
		how = fmt.Sprintf("exit code %d", s.Code)
	}
	if s.Stage != "" {
		how += ", after " + s.Stage
	}
	if s.OOMKills > 0 {
		how += fmt.Sprintf(", %d OOM kill(s)", s.OOMKills)
	}
	if s.PIDsLimitHits > 0 {
		how += fmt.Sprintf(", %d fork(s) refused by the pids limit", s.PIDsLimitHits)
	}
	return fmt.Sprintf("%s (%s)", s.Kind, how)
}

// SignalName is sig's name as kill(1) spells it ("SIGKILL"), or its
// description for the rarer ones.
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return fmt.Sprintf("%d (%s)", int(sig), sig.String())
}

// classifyLimited is classify with the tree's cgroup counters: a tree
// that counted an OOM kill is ExitOOM when it crashed, or when its leader
// died by a SIGKILL mcpvisor had not sent yet (a stop under way had only
// closed stdin or sent SIGTERM: the kill was the OOM killer's).
func classifyLimited(code int, sig syscall.Signal, stage string, ev limitEvents) ExitStatus {
	s := classify(code, sig, stage)
	s.OOMKills, s.PIDsLimitHits = ev.oomKills, ev.pidsMax
	if ev.oomKills > 0 && (s.Kind == ExitCrashed || s.Kind == ExitStopped && sig == syscall.SIGKILL && stage != stageKill) {
		s.Kind = ExitOOM
	}
	return s
}

// limitEvents are a tree's cgroup counters at its end.
type limitEvents struct{ oomKills, pidsMax int }

// classify turns a raw wait status into an ExitStatus. stage is the stop
// step in force when the process ended ("" when Stop was never called).
func classify(code int, sig syscall.Signal, stage string) ExitStatus {
	s := ExitStatus{Code: code, Signal: sig, Stage: stage}
	if sig != 0 {
		s.Code = -1
	}
	switch {
	case stage != "":
		s.Kind = ExitStopped
	case sig == 0 && code == 0:
		s.Kind = ExitClean
	default:
		s.Kind = ExitCrashed
	}
	return s
}
