package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// reloader is the one path every reload takes — SIGHUP, a change of the
// config file, POST /api/reload — one at a time: the file is read,
// parsed and validated whole; rejected, nothing changes; accepted, the
// fleet applies the difference (fleet.Reload) and applied, if set, takes
// the settings outside the fleet and the servers added or removed.
type reloader struct {
	a       *app
	file    string
	learn   bool
	applied func(*config.Config, fleet.Applied)

	// turn (one slot) is held from reading the file until the fleet has
	// applied it — not while servers drain — and taken within the
	// caller's context; it guards last.
	turn chan struct{}
	last [sha256.Size]byte // the content last read, accepted or not
}

func newReloader(a *app, file string, learn bool, applied func(*config.Config, fleet.Applied)) *reloader {
	return &reloader{a: a, file: file, learn: learn, applied: applied, last: a.cfgSum, turn: make(chan struct{}, 1)}
}

// reload reads the file and applies it; ctx bounds the wait for the
// drains, never the drains themselves (see fleet.Reload). Only a caller
// that asked (POST /api/reload) waits for them: a reload serve triggers
// itself (a signal, a change of the file) returns once applied, and
// their outcome is reported by reload-drained events — a second signal
// or save is read at once, not after the first one's drains. onlyIfChanged
// skips, reporting nothing, a file whose content is what was last read (a
// watched directory changes for many reasons) or that cannot be read (a
// swap under way: the next event reads it whole).
func (r *reloader) reload(ctx context.Context, trigger string, onlyIfChanged bool) admin.ReloadReport {
	rep := admin.ReloadReport{Trigger: trigger}
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		rep.Error = "nothing reloaded: another reload was being applied until the deadline: " + context.Cause(ctx).Error()
		r.a.log.Warn("config reload not applied", "trigger", trigger, "error", rep.Error)
		return rep
	}
	var once sync.Once
	release := func() { once.Do(func() { <-r.turn }) }
	defer release()
	data, err := config.ReadFile(r.file)
	if err != nil {
		if !onlyIfChanged {
			rep.Error = err.Error()
			r.report(rep)
		}
		return rep
	}
	sum := sha256.Sum256(data)
	if onlyIfChanged && sum == r.last {
		return rep
	}
	r.last = sum
	cfg, err := config.Parse(data, r.file, config.LoadOptions{})
	if err != nil {
		rep.Error = "the new configuration was rejected; the one in force keeps serving"
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				rep.Problems = append(rep.Problems, admin.ReloadProblem{Path: p.Path, Line: p.Line, Column: p.Column, Message: p.Message})
			}
		} else {
			rep.Problems = []admin.ReloadProblem{{Message: err.Error()}}
		}
		r.report(rep)
		return rep
	}
	rep.Warnings = cfg.Warnings
	if r.a.place != nil {
		r.a.place(cfg)
	}
	// Once applied, the next reload may begin: it need not wait for this
	// one's drains.
	hook := func(ap fleet.Applied) {
		if r.applied != nil {
			r.applied(cfg, ap)
		}
		release()
	}
	wait := ctx
	if trigger != "api" {
		c, applied := context.WithCancel(ctx)
		defer applied()
		report := hook
		wait, hook = c, func(ap fleet.Applied) {
			report(ap)
			applied()
		}
	}
	res, err := r.a.fleet.Reload(wait, cfg, r.learn, hook)
	if errors.Is(err, fleet.ErrNotReloaded) {
		// Not applied (the turn is still held here): mcpvisor is
		// closing, or the caller gave up before the fleet's turn. The
		// next reload reads the file again.
		r.last = [sha256.Size]byte{}
		rep.Error = err.Error()
		return rep
	}
	rep.Applied, rep.Result = true, &res
	if err != nil && ctx.Err() != nil {
		rep.Error = "applied; the caller stopped waiting while servers drained (they go on draining, each within its request timeout): " + err.Error()
	}
	r.report(rep)
	return rep
}

// report logs a reload's outcome and records it as an event.
func (r *reloader) report(rep admin.ReloadReport) {
	if !rep.Applied {
		r.a.log.Error("config reload rejected", "trigger", rep.Trigger, "error", rep.Error, "problems", rep.Problems)
		var problems []event.ReloadProblem
		for _, p := range rep.Problems {
			problems = append(problems, event.ReloadProblem(p))
		}
		r.a.events.Add(fleet.NewEvent("", "", event.ReloadRejectedDetails{Trigger: rep.Trigger, Error: rep.Error, Problems: problems}))
		return
	}
	counts := map[string]int{}
	for _, s := range rep.Result.Servers {
		counts[s.Action]++
		if s.Action != config.ActionUnchanged {
			r.a.log.Info("config reload: server "+s.Action, "server", s.Name, "fields", s.Fields)
		}
	}
	if len(rep.Result.NeedsRestart) > 0 {
		r.a.log.Warn("config reload: settings that take effect only when mcpvisor restarts", "settings", rep.Result.NeedsRestart)
	}
	r.a.log.Info("config reloaded", "trigger", rep.Trigger, "servers", counts, "tookMs", rep.Result.TookMs)
	r.a.events.Add(fleet.NewEvent("", "", event.ReloadedDetails{Trigger: rep.Trigger, Applied: true, Servers: counts, TookMs: rep.Result.TookMs, NeedsRestart: rep.Result.NeedsRestart}))
}

// watchDebounce is how long the config file's directory must be quiet
// before a change is read: editors write in several steps.
const watchDebounce = 250 * time.Millisecond

// watch reloads when the config file changes, until ctx ends. It watches
// the file's directory — an editor's save by rename, or a symlink swapped
// to point elsewhere, changes the directory, not the file — and, when the
// file is a symlink, the directory of its target (followed again after
// each change). Any change there is read once the directory has been
// quiet for watchDebounce; a file whose content did not change is no
// reload.
func (r *reloader) watch(ctx context.Context, bg *sync.WaitGroup) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	watched := map[string]bool{}
	// follow watches the directories not watched yet; it returns why one
	// could not be (the next change tries it again).
	follow := func() error {
		dirs := []string{filepath.Dir(r.file)}
		if target, err := filepath.EvalSymlinks(r.file); err == nil {
			dirs = append(dirs, filepath.Dir(target))
		}
		var errs []error
		for _, d := range dirs {
			if watched[d] {
				continue
			}
			if err := w.Add(d); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", d, err))
				continue
			}
			watched[d] = true
		}
		return errors.Join(errs...)
	}
	if err := follow(); !watched[filepath.Dir(r.file)] {
		_ = w.Close()
		return err // the file's own directory: no change would ever be seen
	} else if err != nil {
		r.a.log.Warn("not watching the config file's symlink target", "err", err)
	}
	bg.Go(func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				if timer == nil {
					timer = time.NewTimer(watchDebounce)
				} else {
					timer.Reset(watchDebounce)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				r.a.log.Warn("watching the config file", "err", err)
			case <-fire:
				fire = nil
				if err := follow(); err != nil {
					r.a.log.Warn("not watching the config file's symlink target", "err", err)
				}
				r.reload(ctx, "watch", true)
			}
		}
	})
	return nil
}
