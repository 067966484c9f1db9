package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
)

// A Flattener owns the launcher state of a set of servers: a stdio server
// whose command is a package launcher (npx, npm exec, …) is started as the
// program the launcher would run — node and the package's bin — once that
// is known: the launcher, which would otherwise stay resident as the
// server's parent, is not run at all.
//
// What the launcher runs is resolved with the user's own package manager
// (Options.Resolver), never on a start's path: a start uses what is known
// then, and starts the command as written when nothing is. A start as
// written that succeeds — the first start of a package never installed,
// which the launcher installs — is followed by a resolution in the
// background, so the next start is flattened. The outcome is kept, per
// server, in memory and in Options.Store under the launch's key (KeyOf:
// the command line, env and cwd, and what of mcpvisor's environment
// decides what npm finds), and redone when the key changes, on Refresh
// (mcpvisor refresh), and when a start finds the files it names gone (one
// stat each: then it starts as written and resolves again). A failed
// resolution that may succeed later is tried again after the next start
// as written, and, when it failed after one already, at most every
// ResolveRetry.
//
// A flattened start that fails is followed by a start as written: if that
// one succeeds, flattening is what failed, and the server runs as written
// until a resolution after ResolveRetry (or a refresh); if it fails too,
// the server's own failure is not flattening's, which stays.
//
// Each resolution is bounded by ResolveTimeout, and at most
// ResolveConcurrency run at once; a start never waits for one.
//
// A Flattener is made by NewFlattener. All its methods are safe to call
// concurrently: each server's record has a lock of its own, and no lock
// is held while the store is written or a resolution runs.
type Flattener struct {
	resolver     PackageResolver
	store        Store
	log          *slog.Logger
	goFn         func(fn func(ctx context.Context)) bool
	now          func() time.Time
	environ      func() []string
	compileCache string

	mu      sync.Mutex         // guards servers (not the records, each under its own mu)
	servers map[string]*record // by server name, made on first use
	sem     chan struct{}      // bounds the resolutions running at once
}

// PackageResolver resolves a package launcher's command line: where the
// package's bin is and what runs it. *Resolver is the real one.
type PackageResolver interface {
	Resolve(ctx context.Context, f *Form, command string, env []string, dir string) (*Resolution, error)
}

// Store is where a Flattener persists what it found of each server's
// launch: the launch records of the state store (store.Store's Launch and
// PutLaunch, which a nil *store.Store answers as an empty store). Launch
// returns the record of server written under key, nil when there is none
// (or it was written under another key); PutLaunch replaces server's
// record with rec under key, a nil rec deleting it.
type Store interface {
	Launch(server, key string) json.RawMessage
	PutLaunch(server, key string, rec json.RawMessage) error
}

// Options configure a Flattener. The zero value is valid: it resolves
// with the user's own package manager, persists nothing, logs to
// slog.Default, runs its background work on goroutines of their own that
// nothing cancels, takes os.Environ for mcpvisor's environment, and gives
// flattened starts no compile cache.
type Options struct {
	// Resolver resolves the launchers; nil means the user's own package
	// manager (&Resolver{}).
	Resolver PackageResolver
	// Store persists the records; nil means nothing is persisted.
	Store Store
	// Logger receives how each server starts when that changes, and the
	// failures of the store and of the compile cache's pruning; nil
	// means slog.Default().
	Logger *slog.Logger
	// Go runs fn in the background with a context that ends with the
	// Flattener's owner, and reports whether it runs (false once the
	// owner is closing: then fn is not run). The resolutions after a
	// start and KeepCompileCache's pruner run on it. nil runs fn on a
	// goroutine of its own with a context never cancelled.
	Go func(fn func(ctx context.Context)) bool
	// Now is the clock of the records' times and of ResolveRetry; nil
	// means time.Now.
	Now func() time.Time
	// Environ is mcpvisor's environment as a server inherits it
	// ("KEY=value"): what a spawn whose Env is nil runs with, and what a
	// server's config env is added to for Refresh's resolution. nil
	// means os.Environ; the fleet gives proc.Environ.
	Environ func() []string
	// CompileCache is the directory of node's module compile cache that a
	// flattened start gives the server (NODE_COMPILE_CACHE, node 22.1 and
	// later), unless the server's environment sets the cache or turns it
	// off (CompileCacheSetBy); "" gives none. A relative one is taken
	// from mcpvisor's working directory (node would take it from each
	// server's).
	CompileCache string
}

// Bounds of the resolutions.
const (
	// ResolveTimeout bounds each resolution.
	ResolveTimeout = 2 * time.Minute
	// ResolveRetry is how long after a resolution that failed after a
	// start the next is tried.
	ResolveRetry = 10 * time.Minute
	// ResolveConcurrency is how many resolutions run at once, at most.
	ResolveConcurrency = 2
)

// How a process was started (Status.Last).
const (
	StartedFlattened = "flattened"
	StartedAsWritten = "as written"
)

// compileCachePruneEvery is how often KeepCompileCache bounds the
// compile cache.
const compileCachePruneEvery = 24 * time.Hour

// NewFlattener makes the Flattener of opts. Its error is that of making a
// relative Options.CompileCache absolute.
func NewFlattener(opts Options) (*Flattener, error) {
	fl := &Flattener{resolver: opts.Resolver, store: opts.Store, log: opts.Logger, goFn: opts.Go, now: opts.Now,
		environ: opts.Environ, compileCache: opts.CompileCache, sem: make(chan struct{}, ResolveConcurrency)}
	if fl.resolver == nil {
		fl.resolver = &Resolver{}
	}
	if fl.log == nil {
		fl.log = slog.Default()
	}
	if fl.goFn == nil {
		fl.goFn = func(fn func(ctx context.Context)) bool {
			go fn(context.Background())
			return true
		}
	}
	if fl.now == nil {
		fl.now = time.Now
	}
	if fl.environ == nil {
		fl.environ = os.Environ
	}
	if dir := fl.compileCache; dir != "" && !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("node's compile cache directory %q: %w", dir, err)
		}
		fl.compileCache = abs
	}
	return fl, nil
}

// persisted is what is known of a launch, as persisted (Store): its
// resolution, or why it has none.
type persisted struct {
	Resolution *Resolution `json:"resolution,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	Retry      bool        `json:"retry,omitempty"`
	At         time.Time   `json:"at,omitzero"`
	// AfterStart: the failure was found after a start as written (which
	// installs what the launcher runs): the next is tried ResolveRetry
	// later. One found otherwise (a refresh, the check before a start)
	// is tried again after the next start as written.
	AfterStart bool `json:"afterStart,omitempty"`
}

// record is what the Flattener knows of one server's launcher, made on
// its first use (a server that is no launcher has none).
type record struct {
	mu  sync.Mutex     // guards the record's fields; never held while the store is written or a resolution runs
	cfg *config.Server // the config key was computed for
	key string
	rec *persisted // nil: nothing known under key
	// resolving: a resolution under key runs in the background; gen
	// counts refreshes, which drop what one begun before them finds.
	resolving bool
	gen       uint64
	// suspect is the error of a flattened start that failed: the next
	// start runs as written to tell whose failure it was.
	suspect error
	last    string // how the last process started: StartedFlattened or StartedAsWritten
	note    string // why it started as written
	logged  string // the last outcome logged, not to repeat it
}

// of is the record of the server named name.
func (fl *Flattener) of(name string) *record {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	st := fl.servers[name]
	if st == nil {
		if fl.servers == nil {
			fl.servers = map[string]*record{}
		}
		st = &record{}
		fl.servers[name] = st
	}
	return st
}

// flattens reports whether sc's command is a package launcher a stdio
// server runs.
func flattens(sc *config.Server) bool {
	return sc.Kind == config.KindStdio && IsLauncher(sc.Command)
}

// KeyOf is the key of sc's launch (Key) in mcpvisor's environment, under
// which its record is persisted.
func KeyOf(sc *config.Server) string {
	dir := sc.Cwd
	if dir == "" {
		dir, _ = os.Getwd()
	}
	return Key(sc.Command, sc.Args, sc.Env, dir, os.Environ())
}

// use makes key's record current, loading it from the store when the key
// changes; st.mu is held.
func (fl *Flattener) use(st *record, name string, sc *config.Server) string {
	if st.cfg == sc && st.key != "" {
		return st.key
	}
	key := KeyOf(sc)
	st.cfg = sc
	if key == st.key {
		return key
	}
	st.key, st.rec, st.suspect, st.resolving, st.note = key, nil, nil, false, ""
	if fl.store == nil {
		return key
	}
	if raw := fl.store.Launch(name, key); raw != nil {
		var rec persisted
		if err := json.Unmarshal(raw, &rec); err != nil || (rec.Resolution == nil && rec.Reason == "") {
			fl.log.Warn("ignoring an unreadable launch record", "server", name, "err", err)
		} else {
			st.rec = &rec
		}
	}
	return key
}

// Spawn is what a Flattener reads and rewrites of a server's spawn
// (proc.Spec's fields of the same names): the command, its arguments and
// environment ("KEY=value", complete; nil: mcpvisor's own,
// Options.Environ), and the working directory ("": mcpvisor's), which it
// only reads.
type Spawn struct {
	Command string
	Args    []string
	Env     []string
	Dir     string
}

// Hook is what decides how each spawn of sc starts, for sc's connector:
// nil unless sc's command is a package launcher (a server that is none
// costs nothing more). The hook makes the spawn flattened — its Command,
// Args and Env rewritten — when a resolution is known and its files are
// there, else leaves it as written, and returns what to tell once the
// start ended (nil: nothing). current is the config in force for sc's
// server when a spawn begins (sc itself when none is): a spawn of an
// earlier launch, still draining, starts as written.
func (fl *Flattener) Hook(sc *config.Server, current func() *config.Server) func(*Spawn) func(error) {
	if !flattens(sc) {
		return nil
	}
	return func(spec *Spawn) func(error) { return fl.prepare(sc, current(), spec) }
}

// prepare decides how a spawn of sc starts, cur being the config in
// force, and returns what to do once the start ended.
func (fl *Flattener) prepare(sc, cur *config.Server, spec *Spawn) func(error) {
	form, perr := Parse(sc.Command, sc.Args)
	if form == nil && perr == nil {
		return nil // npm start, or the like
	}
	st := fl.of(sc.Name)
	st.mu.Lock()
	defer st.mu.Unlock()
	if cur != sc && (cur.Kind != sc.Kind || KeyOf(cur) != KeyOf(sc)) {
		return nil // an instance of an earlier launch, still draining: as written
	}
	key := fl.use(st, sc.Name, cur)
	asWritten := func(note string) {
		st.last, st.note = StartedAsWritten, note
		fl.logLaunch(st, sc.Name, "", note)
	}
	switch {
	case cur.AsWritten:
		asWritten(`"launch": "as-written"`)
		return nil
	case perr != nil:
		asWritten(perr.Error())
		return nil
	case st.suspect != nil:
		asWritten(fmt.Sprintf("the flattened start failed (%v): trying as written", st.suspect))
		return func(err error) { fl.afterSuspect(st, key, err) }
	}
	if rec := st.rec; rec != nil && rec.Resolution != nil {
		err := rec.Resolution.Check()
		if err == nil {
			spec.Command, spec.Args = rec.Resolution.Argv(form)
			spec.Env = fl.compileCacheEnv(sc, spec.Env)
			if rec.Resolution.NodePath != "" {
				if spec.Env == nil {
					spec.Env = fl.environ()
				}
				spec.Env = rec.Resolution.Environ(spec.Env) // a copy
			}
			st.last, st.note = StartedFlattened, ""
			return func(err error) { fl.flattenedStarted(st, key, err) }
		}
		st.rec = &persisted{Reason: fmt.Sprintf("its resolution is gone (%v): resolving again after a start as written", err), Retry: true}
	}
	note := "not resolved yet: started as written, resolved after"
	if st.rec != nil {
		note = st.rec.Reason
	}
	asWritten(note)
	env, dir := spec.Env, spec.Dir
	if env == nil {
		env = fl.environ()
	}
	return func(err error) {
		if err == nil {
			fl.resolveAfterStart(st, sc.Name, key, sc.Command, form, env, dir)
		}
	}
}

// compileCacheEnv is env (sc's, as its spawn has it; nil: mcpvisor's own,
// Options.Environ) as a flattened start gives it to the server: with
// NODE_COMPILE_CACHE set to the directory compileCacheOf decides, in a
// copy, never in env's array.
func (fl *Flattener) compileCacheEnv(sc *config.Server, env []string) []string {
	dir, _ := fl.compileCacheOf(sc)
	if dir == "" {
		return env
	}
	if env == nil {
		env = fl.environ()
	}
	return append(slices.Clip(env), CompileCacheEnv+"="+dir)
}

// compileCacheOf is what a flattened start of cfg does with node's
// compile cache: the directory it gives, or the variable of the server's
// environment (its config's env, else mcpvisor's own, which is what the
// spawn's environment is made of) that decides instead. Read from
// lookups, it is the one decision of the spawn and of the status: a
// status read builds no environment.
func (fl *Flattener) compileCacheOf(cfg *config.Server) (dir, setBy string) {
	if fl.compileCache == "" {
		return "", ""
	}
	setBy = CompileCacheSetBy(func(k string) bool {
		if _, ok := cfg.Env[k]; ok {
			return true
		}
		_, ok := os.LookupEnv(k)
		return ok
	})
	if setBy != "" {
		return "", setBy
	}
	return fl.compileCache, ""
}

// flattenedStarted is told how a flattened start ended: a failure makes
// the next start run as written (afterSuspect).
func (fl *Flattener) flattenedStarted(st *record, key string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.key != key {
		return
	}
	switch {
	case err == nil:
		st.suspect = nil
	case !errors.Is(err, context.Canceled):
		st.suspect = err
	}
}

// afterSuspect is told how the start as written after a failed flattened
// one ended.
func (fl *Flattener) afterSuspect(st *record, key string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.key != key || st.suspect == nil || errors.Is(err, context.Canceled) {
		return
	}
	suspect := st.suspect
	st.suspect = nil
	if err != nil {
		return // it fails as written too: not flattening's doing
	}
	name := st.cfg.Name
	rec := &persisted{Reason: fmt.Sprintf("the flattened start failed (%v) where the command as written started: started as written until resolved again", suspect),
		Retry: true, At: fl.now(), AfterStart: true}
	st.rec = rec
	fl.logLaunch(st, name, "", rec.Reason)
	fl.goFn(func(context.Context) { fl.put(name, key, rec) })
}

// resolveAfterStart resolves the launch in the background after a start
// as written succeeded, unless that is known, under way, or failed lately.
func (fl *Flattener) resolveAfterStart(st *record, name, key, command string, form *Form, env []string, dir string) {
	st.mu.Lock()
	rec := st.rec
	if st.key != key || st.resolving || rec != nil && (rec.Resolution != nil || !rec.Retry || rec.AfterStart && fl.now().Sub(rec.At) < ResolveRetry) {
		st.mu.Unlock()
		return
	}
	st.resolving = true
	gen := st.gen
	st.mu.Unlock()
	ran := fl.goFn(func(ctx context.Context) {
		rec, ok := fl.resolve(ctx, form, command, env, dir)
		if ok {
			rec.AfterStart = true
		}
		st.mu.Lock()
		if st.key != key || st.gen != gen {
			st.mu.Unlock()
			return // the launch changed, or a refresh came since
		}
		st.resolving = false
		if ok {
			st.rec = rec
			fl.logLaunch(st, name, runsOf(rec), rec.Reason)
		}
		st.mu.Unlock()
		if ok {
			fl.put(name, key, rec) // outside the lock: a start never waits for the disk
		}
	})
	if !ran {
		st.mu.Lock()
		st.resolving = false
		st.mu.Unlock()
	}
}

// resolve resolves one launch, bounded by ctx and ResolveTimeout, at most
// ResolveConcurrency at a time; false when ctx ended first.
func (fl *Flattener) resolve(ctx context.Context, form *Form, command string, env []string, dir string) (*persisted, bool) {
	select {
	case fl.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, false
	}
	defer func() { <-fl.sem }()
	rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	res, err := fl.resolver.Resolve(rctx, form, command, env, dir)
	if ctx.Err() != nil {
		return nil, false
	}
	rec := &persisted{Resolution: res, At: fl.now()}
	if err != nil {
		var le *Error
		rec.Resolution, rec.Reason, rec.Retry = nil, err.Error(), !errors.As(err, &le) || le.Retry
	}
	return rec, true
}

func runsOf(rec *persisted) string {
	if rec != nil && rec.Resolution != nil {
		return rec.Resolution.String()
	}
	return ""
}

// put persists rec as the record of name's launch key.
func (fl *Flattener) put(name, key string, rec *persisted) {
	if fl.store == nil {
		return
	}
	var raw json.RawMessage
	if rec != nil {
		raw, _ = json.Marshal(rec)
	}
	if err := fl.store.PutLaunch(name, key, raw); err != nil {
		fl.log.Warn("could not persist a launch resolution", "server", name, "err", err)
	}
}

// logLaunch logs how the server runs when that changed: flattened to runs,
// or as written and why. st.mu is held.
func (fl *Flattener) logLaunch(st *record, name, runs, reason string) {
	what := runs + "\x00" + reason
	if what == st.logged {
		return
	}
	st.logged = what
	if runs != "" {
		fl.log.Info("launch flattened: the launcher's program runs directly", "server", name, "runs", runs)
		return
	}
	if st.cfg != nil {
		reason = st.cfg.RedactText(reason)
	}
	fl.log.Info("launch as written", "server", name, "reason", reason)
}

// Status is how a server run through a package launcher starts.
type Status struct {
	// Name is the launcher's: npx, npm exec, pnpm dlx, bunx, yarn dlx.
	Name string `json:"name"`
	// Flattened: its next start runs Command directly, without the
	// launcher.
	Flattened bool `json:"flattened"`
	// Runs is the short form of a flattened start:
	// "npx → node …/server-everything@2026.8.31".
	Runs string `json:"runs,omitempty"`
	// Command is what a flattened start runs before the server's own
	// arguments: the interpreter, its options and the bin's script.
	Command []string `json:"command,omitempty"`
	// NodePath is what a flattened start sets NODE_PATH to, as the
	// launcher's bin shim would (pnpm's does): the shim's directories,
	// then what the launcher gave it (the server's own among it).
	NodePath string `json:"nodePath,omitempty"`
	// Spec is the package as configured; Package and Version what it
	// resolved to.
	Spec       string    `json:"spec,omitempty"`
	Package    string    `json:"package,omitempty"`
	Version    string    `json:"version,omitempty"`
	ResolvedAt time.Time `json:"resolvedAt,omitzero"`
	// Reason says why the next start runs the command as written.
	Reason string `json:"reason,omitempty"`
	// Resolving: a resolution runs in the background.
	Resolving bool `json:"resolving,omitempty"`
	// CompileCache is the directory of node's compile cache a flattened
	// start gives the server; CompileCacheSetBy, when it gives none, the
	// variable of the server's environment that decides instead
	// (NODE_COMPILE_CACHE or NODE_DISABLE_COMPILE_CACHE). Both are empty
	// when mcpvisor keeps no compile cache.
	CompileCache      string `json:"compileCache,omitempty"`
	CompileCacheSetBy string `json:"compileCacheSetBy,omitempty"`
	// Last is how the server's last process was started since mcpvisor
	// started, StartedFlattened or StartedAsWritten ("" if none): a
	// resolution or a refresh applies from the next start.
	Last string `json:"last,omitempty"`
}

// Status is how the server of cfg (its config in force) starts when its
// command is a package launcher (npx, npm exec, …), else nil.
func (fl *Flattener) Status(cfg *config.Server) *Status {
	if !flattens(cfg) {
		return nil
	}
	form, perr := Parse(cfg.Command, cfg.Args)
	if form == nil && perr == nil {
		return nil
	}
	ls := &Status{}
	if form != nil {
		ls.Name, ls.Spec = form.Launcher, form.Spec()
	} else {
		var nu *NotUnderstood
		if errors.As(perr, &nu) {
			ls.Name = nu.Launcher
		}
	}
	st := fl.of(cfg.Name)
	st.mu.Lock()
	defer st.mu.Unlock()
	fl.use(st, cfg.Name, cfg)
	ls.Last, ls.Resolving = st.last, st.resolving
	switch {
	case cfg.AsWritten:
		ls.Reason = `"launch": "as-written"`
	case perr != nil:
		ls.Reason = perr.Error()
	case st.suspect != nil:
		ls.Reason = fmt.Sprintf("the flattened start failed (%v): the next start runs as written", st.suspect)
	case st.rec == nil && st.resolving:
		ls.Reason = "resolving"
	case st.rec == nil:
		ls.Reason = "not resolved yet: the next start runs as written, then it is resolved"
	case st.rec.Resolution == nil:
		ls.Reason = st.rec.Reason
	default:
		r := st.rec.Resolution
		ls.Flattened, ls.Runs, ls.Package, ls.Version, ls.ResolvedAt = true, r.String(), r.Package, r.Version, st.rec.At
		ls.Command, ls.NodePath = append([]string{r.Command}, r.Args...), r.NodePath
		ls.CompileCache, ls.CompileCacheSetBy = fl.compileCacheOf(cfg)
	}
	if st.rec != nil && st.rec.Resolution == nil {
		ls.ResolvedAt = st.rec.At
	}
	ls.Reason = cfg.RedactText(ls.Reason) // npm's errors may quote the config's secrets (a registry URL's token)
	return ls
}

// Refresh forgets how a server's package launcher resolved and resolves
// it again now, bounded by ctx: a newer version of a package named by a
// range, a tag or its name alone is taken if it is installed; if it is
// not, the next start runs as written (which installs it) and the
// resolution follows. pnpm dlx, which is resolved offline, is not
// resolved now: its next start runs as written, and the resolution
// follows (Form.RefreshAsWritten). The result applies from the server's
// next start: a running process is left as it is (Status.Last says how it
// started). current is the server's config in force, read as the refresh
// begins and again for the Status it returns. An error wrapping
// ErrNoLauncher means the server has nothing to resolve.
func (fl *Flattener) Refresh(ctx context.Context, current func() *config.Server) (*Status, error) {
	cfg := current()
	switch {
	case cfg.Kind != config.KindStdio:
		return nil, fmt.Errorf("server %s is remote (url): %w", cfg.Name, ErrNoLauncher)
	case !IsLauncher(cfg.Command):
		return nil, fmt.Errorf("server %s runs %s, not a package launcher (npx, npm exec, pnpm dlx, bunx, yarn dlx): %w", cfg.Name, cfg.Command, ErrNoLauncher)
	case cfg.AsWritten:
		return nil, fmt.Errorf(`server %s is configured "launch": "as-written": %w`, cfg.Name, ErrNoLauncher)
	}
	form, perr := Parse(cfg.Command, cfg.Args)
	if form == nil && perr == nil {
		return nil, fmt.Errorf("server %s runs %s with no package: %w", cfg.Name, cfg.Command, ErrNoLauncher)
	}
	st := fl.of(cfg.Name)
	st.mu.Lock()
	key := fl.use(st, cfg.Name, cfg)
	st.gen++
	gen := st.gen
	var later *persisted
	if perr == nil {
		if why := form.RefreshAsWritten(); why != "" {
			later = &persisted{Reason: why, Retry: true, At: fl.now()}
		}
	}
	st.rec, st.suspect, st.resolving = later, nil, perr == nil && later == nil
	if later != nil {
		fl.logLaunch(st, cfg.Name, "", later.Reason)
	}
	st.mu.Unlock()
	fl.put(cfg.Name, key, later)
	if perr != nil || later != nil {
		return fl.Status(current()), nil
	}
	env := fl.environ()
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	rec, ok := fl.resolve(ctx, form, cfg.Command, env, cfg.Cwd)
	st.mu.Lock()
	if st.key == key && st.gen == gen {
		st.resolving = false
		if ok {
			st.rec = rec
			fl.logLaunch(st, cfg.Name, runsOf(rec), rec.Reason)
		}
	}
	st.mu.Unlock()
	if !ok {
		return fl.Status(current()), fmt.Errorf("refresh of %s: %w", cfg.Name, context.Cause(ctx))
	}
	fl.put(cfg.Name, key, rec)
	return fl.Status(current()), nil
}

// Forget drops the records of the servers configured says are no longer
// configured (a server added again under the name finds its record in the
// store).
func (fl *Flattener) Forget(configured func(name string) bool) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for name := range fl.servers {
		if !configured(name) {
			delete(fl.servers, name)
		}
	}
}

// Keys maps each of servers run through a package launcher (and not
// configured "launch": "as-written") to its launch key (KeyOf), under
// which its record is persisted: what of the store to keep
// (store.Store.PruneLaunches).
func (fl *Flattener) Keys(servers []*config.Server) map[string]string {
	keep := map[string]string{}
	for _, cfg := range servers {
		if flattens(cfg) && !cfg.AsWritten {
			keep[cfg.Name] = KeyOf(cfg)
		}
	}
	return keep
}

// KeepCompileCache bounds the compile cache the Flattener gives flattened
// starts (Options.CompileCache; none: nothing to do) by
// DefaultPrunePolicy, now and every day (compileCachePruneEvery), in the
// background (Options.Go) until its context ends. Call it once.
func (fl *Flattener) KeepCompileCache() {
	dir := fl.compileCache
	if dir == "" {
		return
	}
	fl.goFn(func(ctx context.Context) {
		for {
			res, err := PruneCompileCache(ctx, dir, fl.now(), DefaultPrunePolicy)
			if res.Files > 0 {
				fl.log.Info("node's compile cache: removed the entries of idle node versions and the oldest past the bound", "dir", dir, "files", res.Files, "bytes", res.Bytes)
			}
			if err != nil && ctx.Err() == nil {
				fl.log.Warn("node's compile cache could not be pruned", "dir", dir, "err", err)
			}
			t := time.NewTimer(compileCachePruneEvery)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	})
}
