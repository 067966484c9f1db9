package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is one running server tree. Its stdin and stdout belong to the
// caller; its stderr is captured into a Ring and logged.
type Process struct {
	rt     *Runtime
	spec   Spec
	log    *slog.Logger
	cmd    *exec.Cmd
	pid    int
	tree   string // value of TreeEnv
	seq    int64  // this process's number in its runtime
	stdin  *os.File
	stdout *os.File
	stderr *Ring
	start  time.Time
	plat   platformProcess
	// cgroups are the cgroup leaves it was spawned into that count its
	// usage (its v2 leaf first, then its v1 memory, cpuacct and pids
	// leaves), for Root: set before Spawn returns, never changed.
	cgroups []string
	// act takes one stop step (takeStep); tests replace it to run the
	// stop logic without a process.
	act func(stage string)

	spawned     chan struct{} // spawn returned; spawnFailed tells how
	spawnFailed bool
	exited      chan struct{} // leader exited (possibly not yet reaped)
	done        chan struct{} // tree gone, leader reaped, status set
	stopBegun   chan struct{} // closed when Stop starts escalating
	stderrDone  chan struct{}
	stdoutEOF   sync.Once

	mu        sync.Mutex
	stage     string // last stop step taken
	exitStage string // stage when the leader's exit was seen: the one its status is classified with
	status    ExitStatus
	killAt    time.Time // the escalation's latest SIGKILL; zero: none yet (see boundKill)

	killMoved chan struct{} // capacity 1: wakes the escalation when killAt moved earlier

	stopOnce sync.Once     // begins the one escalation (see Stop)
	stopEnd  chan struct{} // closed when the escalation ended
	stopErr  error         // its outcome, set before stopEnd is closed
}

// Spawn starts spec as a new contained process tree. ctx bounds only the
// start itself; the process lives until Stop or its own exit.
func (rt *Runtime) Spawn(ctx context.Context, spec Spec) (*Process, error) {
	if spec.Command == "" {
		return nil, errors.New("proc: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := spec.Logger
	if log == nil {
		log = rt.log
	}
	p := newProcess(spec, log)
	rt.warnNotEnforced(spec, p.log)
	p.rt, p.seq = rt, rt.seq.Add(1)
	p.tree = fmt.Sprintf("%s.%d", rt.id, p.seq)
	if err := rt.track(p); err != nil {
		return nil, err
	}
	// Close may take p in while it spawns; its Stop waits for spawned.
	if err := p.spawn(); err != nil {
		p.spawnFailed = true
		close(p.spawned)
		close(p.done)
		rt.untrack(p)
		return nil, err
	}
	close(p.spawned)
	go p.watch()
	return p, nil
}

// newProcess returns a Process of spec that is not spawned yet: its
// channels made, nothing started.
func newProcess(spec Spec, log *slog.Logger) *Process {
	p := &Process{
		spec:       spec,
		log:        log.With("server", spec.Name),
		stderr:     NewRing(spec.StderrLines, spec.StderrBytes),
		spawned:    make(chan struct{}),
		exited:     make(chan struct{}),
		done:       make(chan struct{}),
		stopBegun:  make(chan struct{}),
		stopEnd:    make(chan struct{}),
		stderrDone: make(chan struct{}),
		killMoved:  make(chan struct{}, 1),
	}
	p.act = p.takeStep
	return p
}

// spawnAttempts bounds the starts of one spawn that fail in a way the
// platform reports as retryable (retryableStart).
const spawnAttempts = 3

func (p *Process) spawn() error {
	var err error
	for range spawnAttempts {
		var retry *retryableStart
		if err = p.spawnOnce(); !errors.As(err, &retry) {
			return err
		}
		p.log.Debug("process start failed transiently; retrying", "err", retry.err)
	}
	return err
}

// retryableStart is a start failure that a new attempt is expected to get
// past (see the Linux start).
type retryableStart struct{ err error }

func (e *retryableStart) Error() string { return e.err.Error() }
func (e *retryableStart) Unwrap() error { return e.err }

func (p *Process) spawnOnce() error {
	env := p.spec.Env
	if env == nil {
		env = Environ()
	}
	env = append(env[:len(env):len(env)], TreeEnv+"="+p.tree)

	inR, inW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("proc: stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return fmt.Errorf("proc: stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return fmt.Errorf("proc: stderr pipe: %w", err)
	}

	cmd := exec.Command(p.spec.Command, p.spec.Args...)
	cmd.Env = env
	cmd.Dir = p.spec.Dir
	// *os.File ends are handed to the child directly: no copying goroutine
	// can hold Wait hostage. WaitDelay still guards any that a platform
	// layer adds.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.WaitDelay = DefaultWaitDelay
	p.cmd = cmd

	beforeStart()
	err = p.rt.start(p)
	closeAll(inR, outW, errW) // the child's ends
	if err != nil {
		closeAll(inW, outR, errR)
		return fmt.Errorf("proc: start %s: %w", p.spec.Command, err)
	}
	p.pid = cmd.Process.Pid
	p.start = time.Now()
	p.stdin, p.stdout = inW, outR
	go p.readStderr(errR)
	p.log.Debug("process started", "pid", p.pid, "command", p.spec.Command, "tree", p.tree)
	return nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// readStderr feeds the ring, Spec.OnStderr and the log until EOF. After the tree is gone it
// gives a lingering writer DefaultWaitDelay, then closes the pipe itself.
func (p *Process) readStderr(r *os.File) {
	defer close(p.stderrDone)
	go func() {
		select {
		case <-p.stderrDone:
		case <-p.exited:
			select {
			case <-p.stderrDone:
			case <-time.After(DefaultWaitDelay + p.spec.PostExit.withDefaults().QuiesceWait):
				_ = r.Close()
			}
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		kept := line
		if p.spec.Redact != nil {
			kept = p.spec.Redact(line)
		}
		p.stderr.Add(kept)
		if p.spec.OnStderr != nil {
			p.spec.OnStderr(p.pid, kept)
		}
		p.log.Debug("stderr", "line", line)
	}
	_ = r.Close()
}

// Pid is the process id of the tree's leader (the shim under a pid
// namespace).
func (p *Process) Pid() int { return p.pid }

// Tree is the TreeEnv value that every process of this tree carries.
func (p *Process) Tree() string { return p.tree }

// Started is when the process was spawned.
func (p *Process) Started() time.Time { return p.start }

// Stdin is the write end of the server's stdin. Closing it is the first,
// polite step of a stop.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the read end of the server's stdout. Reaching EOF on it starts
// the post-exit watchdog: a server that closes stdout but does not exit
// within PostExit.ExitHangWait is stopped.
func (p *Process) Stdout() io.Reader { return eofReader{p} }

type eofReader struct{ p *Process }

func (r eofReader) Read(b []byte) (int, error) {
	n, err := r.p.stdout.Read(b)
	if err == io.EOF {
		r.p.stdoutEOF.Do(func() { go r.p.watchStdoutEOF() })
	}
	return n, err
}

func (p *Process) watchStdoutEOF() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stopBegun:
		case <-p.done:
		}
		cancel()
	}()
	if v := p.spec.PostExit.WaitExit(ctx, p.exited); v == VerdictExitHang {
		p.log.Warn("server closed stdout but did not exit; stopping it",
			"pid", p.pid, "verdict", v.String(), "window", p.spec.PostExit.withDefaults().ExitHangWait)
		_ = p.Stop(context.Background())
	}
}

// Stderr is the ring of the last stderr lines.
func (p *Process) Stderr() *Ring { return p.stderr }

// Exited is closed when the leader has exited (the tree may still be being
// swept); Done when the whole tree is gone and reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Done is closed when the tree is gone and the leader reaped; Status is
// then final.
func (p *Process) Done() <-chan struct{} { return p.done }

// Status returns the exit status (Kind ExitRunning before Done).
func (p *Process) Status() ExitStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Wait blocks until the tree is gone or ctx ends.
func (p *Process) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-p.done:
		return p.Status(), nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

func (p *Process) setStage(s string) {
	p.mu.Lock()
	p.stage = s
	p.mu.Unlock()
}

func (p *Process) currentStage() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stage
}

// beforeStart lets a test hold a spawn just before the process starts.
var beforeStart = func() {}

// startCmd starts a child; a test may make an attempt fail.
var startCmd = (*exec.Cmd).Start

// watch owns the end of the tree's life: leader exit, descendant quiesce,
// sweep, reap.
func (p *Process) watch() {
	p.awaitLeaderExit()
	// The status is classified with the stop step taken when the leader
	// ended, not with one a stop begun after (to sweep what it left) took.
	p.mu.Lock()
	p.exitStage = p.stage
	p.mu.Unlock()
	close(p.exited)

	// Descendants get the quiesce window to finish on their own, unless a
	// Stop is driving the escalation already.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.stopBegun:
			cancel()
		case <-ctx.Done():
		}
	}()
	v := p.spec.PostExit.WaitQuiesce(ctx, p.treeAlive)
	cancel()
	switch v {
	case VerdictDescendantHang:
		p.log.Warn("server exited but its descendants did not; killing them", "pid", p.pid, "verdict", v.String())
		p.signalTree(syscall.SIGKILL)
	case VerdictCancelled:
		// Stop escalates; wait for the group to go, bounded by killBound
		// after Stop's own last step.
		p.waitTreeGone()
	}
	p.sweep()
	err := p.reap()
	status := p.exitStatus(err)
	<-p.stderrDone
	p.mu.Lock()
	p.status = status
	p.mu.Unlock()
	p.release()
	p.rt.untrack(p)
	if status.Crashed() {
		p.log.Warn("server exited", "pid", p.pid, "status", status.String(), "stderr", p.stderr.Tail(5))
	} else {
		p.log.Debug("server exited", "pid", p.pid, "status", status.String())
	}
	close(p.done)
}

// waitTreeGone polls until no process of the group is alive. Stop's SIGKILL
// step guarantees progress; the poll gives up after Stop's worst case so
// watch can never hang.
func (p *Process) waitTreeGone() {
	limit := time.NewTimer(p.spec.stdinWait() + p.spec.termWait() + killBound)
	defer limit.Stop()
	tick := time.NewTicker(p.spec.PostExit.withDefaults().Poll)
	defer tick.Stop()
	for p.treeAlive() > 0 {
		select {
		case <-tick.C:
		case <-limit.C:
			p.signalTree(syscall.SIGKILL)
			return
		}
	}
}

// exitStatus classifies the tree's end, with the counters of its cgroup
// leaves (which must still exist: OOM kills make a crash ExitOOM).
func (p *Process) exitStatus(err error) ExitStatus {
	p.mu.Lock()
	stage := p.exitStage
	p.mu.Unlock()
	ev := p.limitEvents()
	if code, sig, ok := p.shimStatus(); ok {
		return classifyLimited(code, sig, stage, ev)
	}
	ps := p.cmd.ProcessState
	if ps == nil {
		s := ExitStatus{Kind: ExitCrashed, Code: -1, Stage: stage, OOMKills: ev.oomKills, PIDsLimitHits: ev.pidsMax}
		if ev.oomKills > 0 {
			s.Kind = ExitOOM
		}
		return s
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return classifyLimited(-1, ws.Signal(), stage, ev)
	}
	_ = err // ErrWaitDelay or an exit error: the status above says it all
	return classifyLimited(ps.ExitCode(), 0, stage, ev)
}
