package proc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configure a Runtime.
type Options struct {
	// StateDir holds the ledger the start-up sweep reads: one small file
	// per running mcpvisor instance. "" disables the ledger and the sweep.
	StateDir string
	// NoPIDNamespace and NoCgroup turn those layers off even where the
	// machine permits them.
	NoPIDNamespace bool
	NoCgroup       bool
	// UserNamespace puts each pid namespace inside an identity user
	// namespace even when plain pid namespaces are permitted: the path
	// unprivileged users take, forced (for tests, or by choice).
	UserNamespace bool
	// ShimPath is the init of each pid namespace (Linux). "" looks for
	// mcpvisor-shim next to the running binary. Either way, when that file
	// is missing or fails its probe, the running binary re-executes itself
	// for the job, which takes about 3 ms more per start.
	ShimPath string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Runtime spawns and contains server processes. Create one per mcpvisor
// process with Open and Close it at exit; it is safe for concurrent use.
type Runtime struct {
	id     string
	opts   Options
	log    *slog.Logger
	report Report
	seq    atomic.Int64
	plat   platformRuntime

	mu     sync.Mutex
	live   map[*Process]struct{}
	closed bool
	killBy time.Time           // BoundStops' kill time; zero: none
	warned map[string]struct{} // server name and limit kind warned about as not enforced
}

// ErrClosed is returned by Spawn after Close.
var ErrClosed = errors.New("proc: runtime closed")

// Open detects the containment layers, sweeps what a previous, killed
// mcpvisor left behind (when StateDir is set) and records this instance in
// the ledger.
func Open(opts Options) (*Runtime, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("proc: instance id: %w", err)
	}
	rt := &Runtime{
		id:   hex.EncodeToString(b[:]),
		opts: opts,
		log:  opts.Logger,
		live: map[*Process]struct{}{},
	}
	if rt.log == nil {
		rt.log = slog.Default()
	}
	if err := rt.openPlatform(); err != nil {
		return nil, err
	}
	return rt, nil
}

// ID is the instance id carried (with a sequence number) in TreeEnv.
func (rt *Runtime) ID() string { return rt.id }

// Report tells which containment layers this runtime uses, and why the
// others are off.
func (rt *Runtime) Report() Report { return rt.report }

// Close stops every live process in parallel under ctx (see Process.Stop),
// releases the runtime's process-wide resources and removes its ledger
// entry. It is idempotent.
//
// A stop that was already under way when Close began goes on, but Close's
// deadline, if ctx has one, bounds its SIGKILL as it does that of every
// stop (see Process.Stop). When ctx ends before every tree is gone, Close
// returns, with an error wrapping ctx.Err() for each tree left; those
// whose stop Close began have been sent SIGKILL, those whose stop began
// earlier only if their kill time has come, and Kill ends them all at
// once.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	procs := make([]*Process, 0, len(rt.live))
	for p := range rt.live {
		procs = append(procs, p)
	}
	rt.mu.Unlock()

	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.Stop(ctx) })
	}
	wg.Wait()
	errs = append(errs, rt.closePlatform())
	return errors.Join(errs...)
}

// BoundStops bounds every stop of this Runtime's processes by deadline:
// the stops under way, and those that begin later, of the processes live
// now and of those spawned later. Each sends SIGKILL no later than
// deadline minus a margin for the kill and the reap (a quarter of the time
// left when BoundStops is called, at most 500 ms), whoever began it and
// under whatever context, so that its tree is reaped by deadline (see
// Process.Stop). BoundStops stops nothing itself: a process that is not
// stopping goes on running past deadline.
//
// The graceful shutdown calls it first with its own deadline, so that
// stops begun earlier under longer bounds of their own (an idle stop, the
// end of a client's session) end in time too. A later call with a later
// deadline changes nothing: a bound only ever moves a kill earlier.
func (rt *Runtime) BoundStops(deadline time.Time) {
	at := killTimeBy(deadline)
	rt.mu.Lock()
	if !rt.killBy.IsZero() && !at.Before(rt.killBy) {
		rt.mu.Unlock()
		return
	}
	rt.killBy = at
	procs := make([]*Process, 0, len(rt.live))
	for p := range rt.live {
		procs = append(procs, p)
	}
	rt.mu.Unlock()
	// A process tracked after the unlock got killBy in track.
	for _, p := range procs {
		p.boundKill(at)
	}
}

func (rt *Runtime) track(p *Process) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return ErrClosed
	}
	rt.live[p] = struct{}{}
	if !rt.killBy.IsZero() {
		p.boundKill(rt.killBy)
	}
	return nil
}

// WarnNotEnforced logs a warning for each kind of limit in l that this
// runtime cannot enforce (Report.NotEnforced), once per server name and
// kind for the life of the runtime, Spawn's own warnings included: a
// server that has limits can be warned about at start-up, before it ever
// runs, and not again when it does.
func (rt *Runtime) WarnNotEnforced(name string, l *Limits) {
	rt.warnNotEnforced(Spec{Name: name, Limits: l}, rt.log.With("server", name))
}

// warnNotEnforced logs, once per server name and kind, each limit of
// spec this runtime cannot enforce: the tree runs without it.
func (rt *Runtime) warnNotEnforced(spec Spec, log *slog.Logger) {
	for _, l := range rt.report.NotEnforced(spec.Limits) {
		key := spec.Name + "\x00" + l.Name
		rt.mu.Lock()
		_, seen := rt.warned[key]
		if !seen {
			if rt.warned == nil {
				rt.warned = map[string]struct{}{}
			}
			rt.warned[key] = struct{}{}
		}
		rt.mu.Unlock()
		if !seen {
			log.Warn("resource limit not enforced on this machine: the server runs without it", "limit", l.Name, "reason", l.Detail)
		}
	}
}

func (rt *Runtime) untrack(p *Process) {
	rt.mu.Lock()
	delete(rt.live, p)
	rt.mu.Unlock()
}

// Kill sends SIGKILL to every live tree at once (its process group, its
// pid namespace or cgroup, and the escaped descendants that carry its
// TreeEnv) and returns without waiting for anything to be reaped: the exit
// path of a forced shutdown. Processes of trees mcpvisor cannot reach by
// any layer are not found either; on Linux that leaves none.
func (rt *Runtime) Kill() {
	rt.mu.Lock()
	procs := make([]*Process, 0, len(rt.live))
	for p := range rt.live {
		procs = append(procs, p)
	}
	rt.mu.Unlock()
	for _, p := range procs {
		p.setStage("kill")
		p.signalTree(syscall.SIGKILL)
	}
	rt.killEscaped()
}

// Running is how many process trees of server name (Spec.Name) this
// runtime holds: from the spawn until the tree is reaped, stopping ones
// included.
func (rt *Runtime) Running(name string) int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := 0
	for p := range rt.live {
		if p.spec.Name == name {
			n++
		}
	}
	return n
}
