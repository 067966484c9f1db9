package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// Launcher flattening. A stdio server whose command is a package launcher
// (npx, npm exec, …; package launch) is started as the program the
// launcher would run — node and the package's bin — once that is known:
// the launcher, which would otherwise stay resident as the server's
// parent, is not run at all.
//
// What the launcher runs is resolved with the user's own package manager
// (launch.Resolver), never on a start's path: a start uses what is known
// then, and starts the command as written when nothing is. A start as
// written that succeeds — the first start of a package never installed,
// which the launcher installs — is followed by a resolution in the
// background, so the next start is flattened. The outcome is kept, per
// server, in memory and in the state store under the launch's key
// (launch.Key: the command line, env and cwd, and what of mcpvisor's
// environment decides what npm finds), and redone when the key changes,
// on Refresh (mcpvisor refresh), and when a start finds the files it
// names gone (one stat each: then it starts as written and resolves
// again). A failed resolution that may succeed later is tried again after
// the next start as written, and, when it failed after one already, at
// most every resolveRetry.
//
// A flattened start that fails is followed by a start as written: if that
// one succeeds, flattening is what failed, and the server runs as written
// until a resolution after resolveRetry (or a refresh); if it fails too,
// the server's own failure is not flattening's, which stays.
//
// Each resolution is bounded by resolveTimeout, and at most
// resolveConcurrency run at once; a start never waits for one.

// LaunchResolver resolves a package launcher's command line: where the
// package's bin is and what runs it. *launch.Resolver is the real one.
type LaunchResolver interface {
	Resolve(ctx context.Context, f *launch.Form, command string, env []string, dir string) (*launch.Resolution, error)
}

// Bounds of the resolutions.
const (
	resolveTimeout     = 2 * time.Minute
	resolveRetry       = 10 * time.Minute
	resolveConcurrency = 2
)

// How a process was started (LaunchStatus.Last).
const (
	startedFlattened = "flattened"
	startedAsWritten = "as written"
)

// launchRecord is what is known of a launch, as persisted
// (store.Launch): its resolution, or why it has none.
type launchRecord struct {
	Resolution *launch.Resolution `json:"resolution,omitempty"`
	Reason     string             `json:"reason,omitempty"`
	Retry      bool               `json:"retry,omitempty"`
	At         time.Time          `json:"at,omitzero"`
	// AfterStart: the failure was found after a start as written (which
	// installs what the launcher runs): the next is tried resolveRetry
	// later. One found otherwise (a refresh, the check before a start)
	// is tried again after the next start as written.
	AfterStart bool `json:"afterStart,omitempty"`
}

// launchState is what the fleet knows of one server's launcher, made on
// its first use (a server that is no launcher has none).
type launchState struct {
	mu  sync.Mutex
	cfg *config.Server // the config key was computed for
	key string
	rec *launchRecord // nil: nothing known under key
	// resolving: a resolution under key runs in the background; gen
	// counts refreshes, which drop what one begun before them finds.
	resolving bool
	gen       uint64
	// suspect is the error of a flattened start that failed: the next
	// start runs as written to tell whose failure it was.
	suspect error
	last    string // how the last process started: startedFlattened or startedAsWritten
	note    string // why it started as written
	logged  string // the last outcome logged, not to repeat it
}

// launchStateOf is the launch state of the server named name.
func (f *Fleet) launchStateOf(name string) *launchState {
	f.launchMu.Lock()
	defer f.launchMu.Unlock()
	st := f.launches[name]
	if st == nil {
		if f.launches == nil {
			f.launches = map[string]*launchState{}
		}
		st = &launchState{}
		f.launches[name] = st
	}
	return st
}

func (f *Fleet) resolver() LaunchResolver {
	if f.opts.Resolver != nil {
		return f.opts.Resolver
	}
	return &launch.Resolver{}
}

// launchKey is the key of sc's launch (launch.Key) in mcpvisor's
// environment.
func launchKey(sc *config.Server) string {
	dir := sc.Cwd
	if dir == "" {
		dir, _ = os.Getwd()
	}
	return launch.Key(sc.Command, sc.Args, sc.Env, dir, os.Environ())
}

// use makes key's record current, loading it from the store when the key
// changes; st.mu is held.
func (st *launchState) use(f *Fleet, name string, sc *config.Server) string {
	if st.cfg == sc && st.key != "" {
		return st.key
	}
	key := launchKey(sc)
	st.cfg = sc
	if key == st.key {
		return key
	}
	st.key, st.rec, st.suspect, st.resolving, st.note = key, nil, nil, false, ""
	if raw := f.store.Launch(name, key); raw != nil {
		var rec launchRecord
		if err := json.Unmarshal(raw, &rec); err != nil || (rec.Resolution == nil && rec.Reason == "") {
			f.log.Warn("ignoring an unreadable launch record", "server", name, "err", err)
		} else {
			st.rec = &rec
		}
	}
	return key
}

// launcher is the Launch hook of sc's connector: nil unless sc's command
// is a package launcher (a server that is none costs nothing more).
func (f *Fleet) launcher(sc *config.Server) func(*proc.Spec) func(error) {
	if sc.Kind != config.KindStdio || !launch.IsLauncher(sc.Command) {
		return nil
	}
	return func(spec *proc.Spec) func(error) { return f.prepareLaunch(sc, spec) }
}

// prepareLaunch decides how a spawn of sc starts: flattened when a
// resolution is known and its files are there, else as written. It
// returns what to do once the start ended.
func (f *Fleet) prepareLaunch(sc *config.Server, spec *proc.Spec) func(error) {
	cur := sc
	if s := f.Get(sc.Name); s != nil {
		cur = s.Config()
	}
	form, perr := launch.Parse(sc.Command, sc.Args)
	if form == nil && perr == nil {
		return nil // npm start, or the like
	}
	st := f.launchStateOf(sc.Name)
	st.mu.Lock()
	defer st.mu.Unlock()
	if cur != sc && (cur.Kind != sc.Kind || launchKey(cur) != launchKey(sc)) {
		return nil // an instance of an earlier launch, still draining: as written
	}
	key := st.use(f, sc.Name, cur)
	asWritten := func(note string) {
		st.last, st.note = startedAsWritten, note
		f.logLaunch(st, sc.Name, "", note)
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
		return func(err error) { f.afterSuspect(st, key, err) }
	}
	if rec := st.rec; rec != nil && rec.Resolution != nil {
		err := rec.Resolution.Check()
		if err == nil {
			spec.Command, spec.Args = rec.Resolution.Argv(form)
			spec.Env = f.compileCache(sc, spec.Env)
			if rec.Resolution.NodePath != "" {
				if spec.Env == nil {
					spec.Env = proc.Environ()
				}
				spec.Env = rec.Resolution.Environ(spec.Env) // a copy
			}
			st.last, st.note = startedFlattened, ""
			return func(err error) { f.flattenedStarted(st, key, err) }
		}
		st.rec = &launchRecord{Reason: fmt.Sprintf("its resolution is gone (%v): resolving again after a start as written", err), Retry: true}
	}
	note := "not resolved yet: started as written, resolved after"
	if st.rec != nil {
		note = st.rec.Reason
	}
	asWritten(note)
	env, dir := spec.Env, spec.Dir
	if env == nil {
		env = proc.Environ()
	}
	return func(err error) {
		if err == nil {
			f.resolveAfterStart(st, sc.Name, key, sc.Command, form, env, dir)
		}
	}
}

// compileCache is env (sc's, as its spawn has it; nil: mcpvisor's own,
// proc.Environ) as a flattened start gives it to the server: with
// NODE_COMPILE_CACHE set to the directory compileCacheOf decides, in a
// copy, never in env's array.
func (f *Fleet) compileCache(sc *config.Server, env []string) []string {
	dir, _ := f.compileCacheOf(sc)
	if dir == "" {
		return env
	}
	if env == nil {
		env = proc.Environ()
	}
	return append(slices.Clip(env), launch.CompileCacheEnv+"="+dir)
}

// compileCacheOf is what a flattened start of cfg does with node's
// compile cache: the directory it gives, or the variable of the server's
// environment (its config's env, else mcpvisor's own, which is what the
// spawn's environment is made of) that decides instead. Read from
// lookups, it is the one decision of the spawn and of the status: a
// status read builds no environment.
func (f *Fleet) compileCacheOf(cfg *config.Server) (dir, setBy string) {
	if f.opts.CompileCache == "" {
		return "", ""
	}
	setBy = launch.CompileCacheSetBy(func(k string) bool {
		if _, ok := cfg.Env[k]; ok {
			return true
		}
		_, ok := os.LookupEnv(k)
		return ok
	})
	if setBy != "" {
		return "", setBy
	}
	return f.opts.CompileCache, ""
}

// flattenedStarted is told how a flattened start ended: a failure makes
// the next start run as written (afterSuspect).
func (f *Fleet) flattenedStarted(st *launchState, key string, err error) {
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
func (f *Fleet) afterSuspect(st *launchState, key string, err error) {
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
	rec := &launchRecord{Reason: fmt.Sprintf("the flattened start failed (%v) where the command as written started: started as written until resolved again", suspect),
		Retry: true, At: time.Now(), AfterStart: true}
	st.rec = rec
	f.logLaunch(st, name, "", rec.Reason)
	f.spawn(func(context.Context) { f.putLaunch(name, key, rec) })
}

// resolveAfterStart resolves the launch in the background after a start
// as written succeeded, unless that is known, under way, or failed lately.
func (f *Fleet) resolveAfterStart(st *launchState, name, key, command string, form *launch.Form, env []string, dir string) {
	st.mu.Lock()
	rec := st.rec
	if st.key != key || st.resolving || rec != nil && (rec.Resolution != nil || !rec.Retry || rec.AfterStart && time.Since(rec.At) < resolveRetry) {
		st.mu.Unlock()
		return
	}
	st.resolving = true
	gen := st.gen
	st.mu.Unlock()
	ran := f.spawn(func(ctx context.Context) {
		rec, ok := f.resolveLaunch(ctx, form, command, env, dir)
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
			f.logLaunch(st, name, runsOf(rec), rec.Reason)
		}
		st.mu.Unlock()
		if ok {
			f.putLaunch(name, key, rec) // outside the lock: a start never waits for the disk
		}
	})
	if !ran {
		st.mu.Lock()
		st.resolving = false
		st.mu.Unlock()
	}
}

// resolveLaunch resolves one launch, bounded by ctx and resolveTimeout, at
// most resolveConcurrency at a time; false when ctx ended first.
func (f *Fleet) resolveLaunch(ctx context.Context, form *launch.Form, command string, env []string, dir string) (*launchRecord, bool) {
	select {
	case f.resolveSem <- struct{}{}:
	case <-ctx.Done():
		return nil, false
	}
	defer func() { <-f.resolveSem }()
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	res, err := f.resolver().Resolve(rctx, form, command, env, dir)
	if ctx.Err() != nil {
		return nil, false
	}
	rec := &launchRecord{Resolution: res, At: time.Now()}
	if err != nil {
		var le *launch.Error
		rec.Resolution, rec.Reason, rec.Retry = nil, err.Error(), !errors.As(err, &le) || le.Retry
	}
	return rec, true
}

func runsOf(rec *launchRecord) string {
	if rec != nil && rec.Resolution != nil {
		return rec.Resolution.String()
	}
	return ""
}

// putLaunch persists rec as the record of name's launch key.
func (f *Fleet) putLaunch(name, key string, rec *launchRecord) {
	if f.store == nil {
		return
	}
	var raw json.RawMessage
	if rec != nil {
		raw, _ = json.Marshal(rec)
	}
	if err := f.store.PutLaunch(name, key, raw); err != nil {
		f.log.Warn("could not persist a launch resolution", "server", name, "err", err)
	}
}

// logLaunch logs how the server runs when that changed: flattened to runs,
// or as written and why. st.mu is held.
func (f *Fleet) logLaunch(st *launchState, name, runs, reason string) {
	what := runs + "\x00" + reason
	if what == st.logged {
		return
	}
	st.logged = what
	if runs != "" {
		f.log.Info("launch flattened: the launcher's program runs directly", "server", name, "runs", runs)
		return
	}
	if st.cfg != nil {
		reason = st.cfg.RedactText(reason)
	}
	f.log.Info("launch as written", "server", name, "reason", reason)
}

// LaunchStatus is how a server run through a package launcher starts.
type LaunchStatus struct {
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
	// started, "flattened" or "as written" ("" if none): a resolution or
	// a refresh applies from the next start.
	Last string `json:"last,omitempty"`
}

// Launcher is how the server starts when its command is a package launcher
// (npx, npm exec, …), else nil.
func (s *Server) Launcher() *LaunchStatus {
	cfg := s.Config()
	if cfg.Kind != config.KindStdio || !launch.IsLauncher(cfg.Command) {
		return nil
	}
	form, perr := launch.Parse(cfg.Command, cfg.Args)
	if form == nil && perr == nil {
		return nil
	}
	ls := &LaunchStatus{}
	if form != nil {
		ls.Name, ls.Spec = form.Launcher, form.Spec()
	} else {
		var nu *launch.NotUnderstood
		if errors.As(perr, &nu) {
			ls.Name = nu.Launcher
		}
	}
	st := s.f.launchStateOf(cfg.Name)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.use(s.f, cfg.Name, cfg)
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
		ls.CompileCache, ls.CompileCacheSetBy = s.f.compileCacheOf(cfg)
	}
	if st.rec != nil && st.rec.Resolution == nil {
		ls.ResolvedAt = st.rec.At
	}
	ls.Reason = cfg.RedactText(ls.Reason) // npm's errors may quote the config's secrets (a registry URL's token)
	return ls
}

// Refresh forgets how the server's package launcher resolved and resolves
// it again now, bounded by ctx: a newer version of a package named by a
// range, a tag or its name alone is taken if it is installed; if it is
// not, the next start runs as written (which installs it) and the
// resolution follows. pnpm dlx, which is resolved offline, is not
// resolved now: its next start runs as written, and the resolution
// follows (launch.Form.RefreshAsWritten). The result applies from the
// server's next start: a running process is left as it is
// (LaunchStatus.Last says how it started). An error wrapping ErrNoLauncher means the server has nothing
// to resolve.
func (s *Server) Refresh(ctx context.Context) (*LaunchStatus, error) {
	cfg := s.Config()
	switch {
	case cfg.Kind != config.KindStdio:
		return nil, fmt.Errorf("server %s is remote (url): %w", cfg.Name, ErrNoLauncher)
	case !launch.IsLauncher(cfg.Command):
		return nil, fmt.Errorf("server %s runs %s, not a package launcher (npx, npm exec, pnpm dlx, bunx, yarn dlx): %w", cfg.Name, cfg.Command, ErrNoLauncher)
	case cfg.AsWritten:
		return nil, fmt.Errorf(`server %s is configured "launch": "as-written": %w`, cfg.Name, ErrNoLauncher)
	}
	form, perr := launch.Parse(cfg.Command, cfg.Args)
	if form == nil && perr == nil {
		return nil, fmt.Errorf("server %s runs %s with no package: %w", cfg.Name, cfg.Command, ErrNoLauncher)
	}
	st := s.f.launchStateOf(cfg.Name)
	st.mu.Lock()
	key := st.use(s.f, cfg.Name, cfg)
	st.gen++
	gen := st.gen
	var later *launchRecord
	if perr == nil {
		if why := form.RefreshAsWritten(); why != "" {
			later = &launchRecord{Reason: why, Retry: true, At: time.Now()}
		}
	}
	st.rec, st.suspect, st.resolving = later, nil, perr == nil && later == nil
	if later != nil {
		s.f.logLaunch(st, cfg.Name, "", later.Reason)
	}
	st.mu.Unlock()
	s.f.putLaunch(cfg.Name, key, later)
	if perr != nil || later != nil {
		return s.Launcher(), nil
	}
	env := proc.Environ()
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	rec, ok := s.f.resolveLaunch(ctx, form, cfg.Command, env, cfg.Cwd)
	st.mu.Lock()
	if st.key == key && st.gen == gen {
		st.resolving = false
		if ok {
			st.rec = rec
			s.f.logLaunch(st, cfg.Name, runsOf(rec), rec.Reason)
		}
	}
	st.mu.Unlock()
	if !ok {
		return s.Launcher(), fmt.Errorf("refresh of %s: %w", cfg.Name, context.Cause(ctx))
	}
	s.f.putLaunch(cfg.Name, key, rec)
	return s.Launcher(), nil
}

// forgetLaunches drops the launch states of servers no longer configured
// (a server added again under the name finds its record in the store).
func (f *Fleet) forgetLaunches() {
	f.launchMu.Lock()
	defer f.launchMu.Unlock()
	for name := range f.launches {
		if f.Get(name) == nil {
			delete(f.launches, name)
		}
	}
}

// launchKeys maps each configured server run through a package launcher
// to its launch key, under which its record is persisted.
func (f *Fleet) launchKeys() map[string]string {
	keep := map[string]string{}
	for _, s := range f.Servers() {
		cfg := s.Config()
		if cfg.Kind == config.KindStdio && launch.IsLauncher(cfg.Command) && !cfg.AsWritten {
			keep[s.Name()] = launchKey(cfg)
		}
	}
	return keep
}

// compileCachePruneEvery is how often KeepCompileCache bounds the
// compile cache.
const compileCachePruneEvery = 24 * time.Hour

// KeepCompileCache bounds the compile cache the fleet gives flattened
// starts (Options.CompileCache; none: nothing to do) by
// launch.DefaultPrunePolicy, now and every compileCachePruneEvery, in the
// background until Close. Called once, by serve and stdio as they start.
func (f *Fleet) KeepCompileCache() {
	dir := f.opts.CompileCache
	if dir == "" {
		return
	}
	f.spawn(func(ctx context.Context) {
		for {
			res, err := launch.PruneCompileCache(ctx, dir, time.Now(), launch.DefaultPrunePolicy)
			if res.Files > 0 {
				f.log.Info("node's compile cache: removed the entries of idle node versions and the oldest past the bound", "dir", dir, "files", res.Files, "bytes", res.Bytes)
			}
			if err != nil && ctx.Err() == nil {
				f.log.Warn("node's compile cache could not be pruned", "dir", dir, "err", err)
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
