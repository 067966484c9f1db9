package fleet

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Stages a server's process can end in (Exit.Stage).
const (
	StageSpawn     = "spawn"     // the process could not be started
	StageHandshake = "handshake" // it started, but did not complete initialize (or server/discover)
	StageServing   = "serving"   // it served, then ended unasked
)

// historyLen is how many ends a server's history keeps.
const historyLen = 20

// stderrLines is how many of its last stderr lines go with an end.
const stderrLines = 10

// Exit is one end of a server's process, or one failed start, as kept in
// its history: when, at which stage, how, and the last lines it wrote to
// stderr before (secrets redacted).
type Exit struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Stage   string    `json:"stage"`
	// Code and Signal are the exit status, when the process exited, and
	// Kind how it ended (proc.ExitKind: "crashed", "oom" for a tree its
	// memory limit killed, ...).
	Code   *int   `json:"code,omitempty"`
	Signal string `json:"signal,omitempty"`
	Kind   string `json:"kind,omitempty"`
	// OOMKills and PIDsLimitHits are the tree's cgroup counters: the
	// processes the OOM killer killed within its memory limit, the forks
	// its pids limit refused.
	OOMKills      int      `json:"oomKills,omitempty"`
	PIDsLimitHits int      `json:"pidsLimitHits,omitempty"`
	Error         string   `json:"error"`
	Stderr        []string `json:"stderr,omitempty"`
}

// StartError is the error of a start that failed: at which stage, why,
// and in the server's own words — the last lines it wrote to stderr
// (secrets redacted). Its message is one sentence that names the server
// once: "server NAME exited during its handshake (exit code 3); stderr:
// …". Requests, ps, inspect, events and the dashboard all show it so.
type StartError struct {
	Server string
	Stage  string
	Err    error
	Stderr []string
	reason string // why, without the server's name, redacted as Stderr is (startReason)
}

func (e *StartError) Error() string { return "server " + e.Server + " " + e.cause() }

// cause is the message without the server's name: why, and the stderr
// tail.
func (e *StartError) cause() string {
	msg := e.reason
	if n := len(e.Stderr); n > 0 {
		msg += "; stderr: " + strings.Join(e.Stderr[max(0, n-3):], " | ")
	}
	return msg
}

func (e *StartError) Unwrap() error { return e.Err }

// startReason says in a few words why a start failed with err, without
// the server's name or the failure classes the layers below wrap err in:
// "could not be started: /x: no such file or directory", "exited during
// its handshake (exit code 3)", "did not finish its handshake within 30s",
// "failed its handshake: …".
func startReason(name string, err error, initTimeout time.Duration) string {
	var ee *backend.ExitError
	var xe *exec.Error
	var pe *fs.PathError
	switch {
	case errors.Is(err, backend.ErrSpawn) && errors.As(err, &pe):
		return "could not be started: " + pe.Path + ": " + pe.Err.Error()
	case errors.Is(err, backend.ErrSpawn) && errors.As(err, &xe):
		return "could not be started: " + xe.Name + ": " + xe.Err.Error()
	case errors.Is(err, backend.ErrSpawn):
		return "could not be started: " + bareText(name, err)
	case errors.As(err, &ee):
		return exitReason(ee.Status, "during its handshake")
	case errors.Is(err, lifecycle.ErrInitTimeout) && initTimeout > 0:
		return fmt.Sprintf("did not finish its handshake within %v", initTimeout)
	case errors.Is(err, lifecycle.ErrInitTimeout):
		return "did not finish its handshake in time"
	}
	return "failed its handshake: " + bareText(name, err)
}

// exitReason says how a process ended, and when: "exited during its
// handshake (exit code 3)", "was killed by SIGKILL during its handshake",
// "was killed by its memory limit during its handshake".
func exitReason(st proc.ExitStatus, when string) string {
	switch {
	case st.Kind == proc.ExitOOM:
		return "was killed by its memory limit " + when
	case st.Signal != 0:
		return "was killed by " + proc.SignalName(st.Signal) + " " + when
	}
	return fmt.Sprintf("exited %s (exit code %d)", when, st.Code)
}

// failureClasses are lifecycle's failure classes, whose names Classify
// puts before a message.
var failureClasses = []error{lifecycle.ErrTransport, lifecycle.ErrServerUnavailable, lifecycle.ErrServerCrashed,
	lifecycle.ErrInitTimeout, lifecycle.ErrInitNotification, lifecycle.ErrCapabilityMissing,
	lifecycle.ErrAuthRequired, lifecycle.ErrSessionMissing, lifecycle.ErrNotStarted}

// bareText is err's message without the prefixes the layers below put
// before the cause: the server's name ("server NAME: "), the failure
// classes ("server unavailable: ", …) and the process layer's "proc: ".
func bareText(name string, err error) string {
	msg := err.Error()
	prefixes := []string{"server " + name + ": ", "proc: ", backend.ErrSpawn.Error() + ": "}
	for _, c := range failureClasses {
		prefixes = append(prefixes, c.Error()+": ")
	}
	for trimmed := true; trimmed; {
		trimmed = false
		for _, p := range prefixes {
			if rest, ok := strings.CutPrefix(msg, p); ok {
				msg, trimmed = rest, true
			}
		}
	}
	return msg
}

// ends is what the ends of a server's processes and starts left: its
// history, and the counts of its resource limits' work.
type ends struct {
	history []Exit
	// oomKills counts the process trees its memory limit killed (exit
	// kind oom), pidsLimitHits the forks its pids limit refused in the
	// trees that ended.
	oomKills, pidsLimitHits int
}

// endsLocked is s.ends, made if need be; mu is held.
func (s *Server) endsLocked() *ends {
	if s.ends == nil {
		s.ends = &ends{}
	}
	return s.ends
}

// history lists the server's last ends (Detail.History).
func (s *Server) history() []Exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ends == nil {
		return nil
	}
	return append([]Exit(nil), s.ends.history...)
}

// recordExit keeps e in the history (a dormant server that never failed
// pays one pointer for it).
func (s *Server) recordExit(e Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	en := s.endsLocked()
	h := en.history
	if len(h) == historyLen {
		h = append(h[:0], h[1:]...)
	}
	en.history = append(h, e)
}

// stderrMark is where the server's kept stderr stands now, for
// stderrSince; 0 when it is not kept.
func (s *Server) stderrMark() uint64 {
	if b := s.stderrBuf(); b != nil {
		return b.Tail(1).Last
	}
	return 0
}

// stderrBuf is the buffer the server's stderr lines are kept in, or nil:
// none are kept, or the server has none (an http server, or one a reload
// removed, whose buffer is closed). Lookup, never Get: a draining
// instance of a removed server must not bring back an open buffer that
// nothing would ever close.
func (s *Server) stderrBuf() *logbuf.Buffer {
	if s.f.opts.Logs == nil {
		return nil
	}
	return s.f.opts.Logs.Lookup(s.Name())
}

// stderrSince is the last lines in's last process wrote to stderr after
// mark, as kept: redacted when they were captured, each with the config
// of the launch that wrote it (Fleet.stdioConnector), not with the config
// in force now, which a reload may have changed since. Lines of the
// server's other instances are not its: not another session's, nor those
// of the instance a restart or reload replaced, which drains beside it
// under the same key; nor those of an earlier process of the same start
// (a server that ended when probed is started again to be initialized).
func (s *Server) stderrSince(mark uint64, in *instance) []string {
	b := s.stderrBuf()
	if b == nil {
		return nil
	}
	var out []string
	pid := 0
	for _, e := range b.After(mark).Entries {
		if e.Origin != in.id {
			continue
		}
		if e.PID != pid {
			out, pid = out[:0], e.PID
		}
		out = append(out, e.Line)
	}
	return out[max(0, len(out)-stderrLines):]
}

// startFailure makes the error of a failed start a StartError with its
// stage and the stderr its process wrote since mark, and records it.
func (in *instance) startFailure(err error, mark uint64) *StartError {
	se, record := in.startError(err, mark)
	record()
	return se
}

// startError is startFailure without the record, which the returned
// function makes: a start records its failure only once it knows no close
// raced it (a start a close interrupted is no failure).
func (in *instance) startError(err error, mark uint64) (*StartError, func()) {
	s := in.srv
	cfg := s.Config()
	reason := cfg.RedactText(startReason(s.Name(), err, cfg.InitTimeout))
	se := &StartError{Server: s.Name(), Stage: StageHandshake, Err: err, Stderr: s.stderrSince(mark, in), reason: reason}
	if errors.Is(err, backend.ErrSpawn) {
		se.Stage = StageSpawn
	}
	var ee *backend.ExitError
	if len(se.Stderr) == 0 && errors.As(err, &ee) && ee.Stderr != "" {
		// No lines kept (no log buffer): the process layer's own tail.
		for _, l := range strings.Split(ee.Stderr, "\n") {
			se.Stderr = append(se.Stderr, cfg.RedactText(l))
		}
	}
	// The history keeps the sentence without its stderr tail: its own
	// Stderr holds the lines.
	e := Exit{Time: time.Now(), Session: in.key, Stage: se.Stage, Error: "server " + se.Server + " " + se.reason, Stderr: se.Stderr}
	return se, func() {
		if ee := e.status(err); ee != nil {
			// A tree that ended during its start (killed by its memory
			// limit before it answered, say) never connected:
			// disconnected does not count it, this does.
			s.countStatus(ee.Status)
		}
		s.recordExit(e)
	}
}

// status fills in the exit code and signal when err is a process's exit,
// and returns that exit (nil otherwise).
func (e *Exit) status(err error) *backend.ExitError {
	var ee *backend.ExitError
	if !errors.As(err, &ee) {
		return nil
	}
	code := ee.Status.Code
	e.Code = &code
	if ee.Status.Signal != 0 {
		e.Signal = ee.Status.Signal.String()
	}
	e.Kind = ee.Status.Kind.String()
	e.OOMKills, e.PIDsLimitHits = ee.Status.OOMKills, ee.Status.PIDsLimitHits
	return ee
}

// servingExit records the end of a process that served: err is how its
// connection ended.
func (in *instance) servingExit(err error, pid int) Exit {
	s := in.srv
	e := Exit{Time: time.Now(), Session: in.key, PID: pid, Stage: StageServing, Error: s.Config().RedactText(err.Error())}
	if ee := e.status(err); ee != nil && ee.Stderr != "" {
		e.Stderr = strings.Split(ee.Stderr, "\n") // the proc layer's ring, redacted by it (proc.Spec.Redact)
	}
	s.recordExit(e)
	return e
}
