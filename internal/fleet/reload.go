package fleet

import (
	"context"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"slices"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// ReloadResult is what a reload did, server by server.
type ReloadResult struct {
	// Servers says what was done to each server (config.Diff's entries,
	// and how their drains went).
	Servers []ServerResult `json:"servers"`
	// Settings and NeedsRestart are config.Diff's.
	Settings     []string `json:"settings,omitempty"`
	NeedsRestart []string `json:"needsRestart,omitempty"`
	// TookMs is how long applying the change took, drains included.
	TookMs float64 `json:"tookMs"`
}

// ServerResult is what a reload did to one server.
type ServerResult struct {
	config.ServerChange
	// Drained says how the instances a removed or relaunched server had
	// were taken out of service.
	Drained *Drained `json:"drained,omitempty"`
}

// Applied is what a reload hands its applied hook: the configuration is
// in force, nothing drained yet.
type Applied struct {
	// Removed maps each server the reload removed to a channel closed
	// once its instances are stopped (drained, or cut at the drain bound,
	// or at Close) — those an earlier Stop, Restart or relaunch took out
	// of service and still drain included: what still serves its calls
	// in flight — its own endpoint — may go then.
	Removed map[string]<-chan struct{}
}

// Reload replaces the fleet's configuration by cfg, already parsed and
// validated whole, and applies the difference server by server:
//
//   - an unchanged server keeps its instances, sessions and cache
//     untouched;
//   - a server whose settings alone changed (timeouts, tool filter,
//     prefix, restart policy, instance limit, eager) takes them in place,
//     its processes kept;
//   - a server whose launch changed (command, args, env, cwd, url,
//     headers, type, protocol, sharing, stop waits) is drained and
//     stopped, its requests from then on served by a fresh instance of the
//     new launch, and its lists learned again from it;
//   - a removed (or disabled) server refuses every request from then on
//     (an error wrapping ErrRemoved), is drained and stopped;
//   - an added server is learned like at start-up (when learn is set),
//     or started when eager.
//
// Every server's new configuration is in force, and the new set of
// servers served, before Reload drains anything: requests that began
// after it see only the new configuration. applied, if set, runs then —
// before any drain and before clients are told what changed — for what
// serves the fleet outside it (endpoints, aggregated lists, settings);
// it must not wait for a drain (Applied.Removed says when each ends).
// Clients are told when lists they see changed (Options.OnListsChanged).
//
// ctx bounds Reload's waits, not the reload: one whose ctx has ended
// before it is applied applies nothing and returns ctx's error; once
// applied, the drains go on whatever becomes of ctx, each bounded by its
// server's drain bound (its request timeout) and by Close. Reload returns
// once they are done, or when ctx ends (their results then say Pending).
// Reloads are applied one at a time.
func (f *Fleet) Reload(ctx context.Context, cfg *config.Config, learn bool, applied func(Applied)) (ReloadResult, error) {
	t0 := time.Now()
	if err := f.lockReload(ctx); err != nil {
		return ReloadResult{}, fmt.Errorf("%w: %w", ErrNotReloaded, err)
	}
	res, drains := f.apply(cfg, learn, applied, t0)
	f.unlockReload()
	if res == nil {
		return ReloadResult{}, ErrReloadClosed
	}
	var err error
	for i, ch := range drains {
		if ch == nil {
			continue
		}
		d, derr := awaitDrain(ctx, ch)
		res.Servers[i].Drained = &d
		if derr != nil {
			err = derr
		}
	}
	res.TookMs = float64(time.Since(t0).Microseconds()) / 1000
	return *res, err
}

// lockReload takes the right to apply a reload, within ctx.
func (f *Fleet) lockReload(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case f.reloadSem <- struct{}{}:
		if err := ctx.Err(); err != nil {
			<-f.reloadSem
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Fleet) unlockReload() { <-f.reloadSem }

// apply applies cfg (Reload holds the reload lock) without waiting for
// anything: it returns the result and, by server, the channel its drain
// reports on (nil: nothing to drain); a nil result when the fleet is
// closing.
func (f *Fleet) apply(cfg *config.Config, learn bool, applied func(Applied), t0 time.Time) (*ReloadResult, []<-chan Drained) {
	if f.closed.Load() {
		return nil, nil
	}
	diff := config.Compare(f.cfg, cfg)
	res := &ReloadResult{Settings: diff.Settings, NeedsRestart: diff.NeedsRestart}
	list, todo := f.change(diff, cfg, res, t0)
	f.set.Store(newServerSet(list))
	f.cfg = cfg
	gone := map[string]chan struct{}{} // closed by each removed server's drain
	a := Applied{Removed: map[string]<-chan struct{}{}}
	for _, w := range todo {
		if w.action == config.ActionRemoved {
			gone[w.s.Name()] = make(chan struct{})
			a.Removed[w.s.Name()] = gone[w.s.Name()]
		}
	}
	if applied != nil {
		applied(a)
	}
	drains := make([]<-chan Drained, len(todo))
	for i, w := range todo {
		drains[i] = f.follow(w, learn, gone[w.s.Name()])
	}
	for _, w := range todo {
		if w.action == config.ActionRemoved || w.action == config.ActionRestarted || w.action == config.ActionAdded {
			// What no configured launch will read again; and an added
			// server's definitions record is no longer counted as gone.
			f.pruneStore()
			break
		}
	}
	return res, drains
}

// reloadWork is what a reload does to one server it changes.
type reloadWork struct {
	s      *Server
	action string
	was    *config.Server
	old    []retired // instances taken out of service, to stop
}

// change makes the changes of diff that come before the new set of
// servers is served, and returns that set and the work that follows.
//
// Every old instance of a removed or relaunched server is out of service
// before the new set is served: from then on no request reaches one, nor
// starts one (a removed server refuses, a relaunched one has fresh
// instances of its new launch), and a removed server is no longer found
// by name, an added one is. A kept server is the same *Server (sessions
// on its endpoint hold it), its configuration replaced.
func (f *Fleet) change(diff config.Diff, cfg *config.Config, res *ReloadResult, t0 time.Time) (list []*Server, todo []reloadWork) {
	old := f.set.Load()
	for _, c := range diff.Servers {
		res.Servers = append(res.Servers, ServerResult{ServerChange: c})
		w := reloadWork{s: old.byName[c.Name], action: c.Action}
		sc := cfg.Server(c.Name)
		switch c.Action {
		case config.ActionAdded:
			w.s = f.newServer(sc)
			w.s.cat.LoadDefinitions()
			f.continueTelemetry(w.s)
		case config.ActionRemoved:
			w.s.opMu.Lock()
			w.s.setRefusal(fmt.Errorf("server %s was %w (reloaded at %s)", w.s.Name(), ErrRemoved, t0.Format(time.TimeOnly)))
			w.s.cat.Retire()
			f.removedTelemetry(w.s)
			w.old = w.s.takeOut("removed from the configuration")
			w.s.opMu.Unlock()
		case config.ActionRestarted:
			// The new launch and the retirement of the old one's
			// instances go together, under the server's operator lock:
			// what an old instance fetches from now on is not kept
			// (relaunched) and takeOut's fresh instances have the new
			// launch.
			w.s.opMu.Lock()
			// The new launch in force, and everything held marked as of
			// the earlier one, in one step; then what is on disk only is
			// read back, as the prune below drops the entry it is under
			// (catalog.Catalog.Relaunch).
			sc.CarryResolved(w.s.Config()) // the old launch drains
			w.s.cat.Relaunch(func() { w.was = w.s.cfg.Swap(sc) })
			w.old = w.s.takeOut("reloaded with a new launch")
			w.s.opMu.Unlock()
		default:
			// The running instances keep their launch: what their
			// references resolved to stays hidden.
			sc.CarryResolved(w.s.Config())
			w.was = w.s.cfg.Swap(sc)
		}
		todo = append(todo, w)
		if c.Action != config.ActionRemoved {
			list = append(list, w.s)
		}
	}
	return list, todo
}

// follow does what follows a reload's change of one server once the new
// set is served, and returns the channel its drain reports on (nil:
// nothing to drain). gone is closed by a removed server's drain.
func (f *Fleet) follow(w reloadWork, learn bool, gone chan struct{}) <-chan Drained {
	s := w.s
	if w.action == config.ActionUpdated || w.action == config.ActionRestarted {
		// What clients see of the server's lists may change with its
		// settings, a new launch's included: its prefix, its filters,
		// and tools pinning held back or unpinning shows.
		k := listEffect(s, w.was, s.Config())
		if s.pinChanged(w.was.Pin, s.Config().Pin) && !slices.Contains(k, catalog.Tools) {
			k = append(k, catalog.Tools)
		}
		if len(k) > 0 {
			f.listsChanged(s, k)
		}
	}
	switch w.action {
	case config.ActionUpdated:
		s.updateInPlace()
		if !w.was.Eager && s.Config().Eager {
			f.spawn(func(ctx context.Context) { f.startEager(ctx, s) })
		}
	case config.ActionRestarted:
		return s.drainAsync(w.old, func(ctx context.Context, d Drained) {
			f.emitDrained(s, "reloaded with a new launch", d)
			if s.refused() != nil || ctx.Err() != nil {
				return // stopped by the operator meanwhile (it stays stopped), or the fleet is closing
			}
			var wg sync.WaitGroup
			wg.Go(func() { f.relearn(ctx, s, learn) })
			wg.Go(func() { s.resumeSubscribed(ctx, w.old) })
			wg.Wait()
		})
	case config.ActionRemoved:
		// Its lists leave the aggregate now; its log buffer once its
		// processes are gone, unless a later reload configured the name
		// again meanwhile.
		if k := nonEmptyKinds(s); len(k) > 0 {
			f.listsChanged(s, k)
		}
		return s.drainAsync(w.old, func(ctx context.Context, d Drained) {
			// Its endpoint closes on gone: not before the drains of an
			// earlier Stop, Restart or relaunch end too (each is bounded;
			// Close ends them all).
			select {
			case <-f.drainsOver(s):
			case <-ctx.Done():
			}
			close(gone)
			f.drainedTelemetry(s)
			f.emitDrained(s, "removed from the configuration", d)
			if f.opts.Logs == nil || f.lockReload(ctx) != nil {
				return
			}
			defer f.unlockReload()
			if f.Get(s.Name()) == nil {
				f.opts.Logs.Remove(s.Name())
			}
		})
	case config.ActionAdded:
		if s.Config().Eager {
			f.spawn(func(ctx context.Context) { f.startEager(ctx, s) })
		} else if learn {
			f.spawn(func(ctx context.Context) { s.learn(ctx) })
		}
	}
	return nil
}

// emitDrained reports how a reload's drain of s went, when it ended —
// after the reload's caller may have stopped waiting (Drained.Pending).
func (f *Fleet) emitDrained(s *Server, reason string, d Drained) {
	f.emit(NewEvent(s.Name(), "", event.ReloadDrainedDetails{Drain: d.drain(), Reason: reason}))
}

// updateInPlace makes the server's instances follow its new settings (the
// configuration is already swapped): the restart policy and connect
// timeout of each supervisor, and the idle timers.
func (s *Server) updateInPlace() {
	s.opMu.Lock() // one operator or reload change at a time
	defer s.opMu.Unlock()
	cfg := s.Config()
	for _, in := range s.instances() {
		in.applySettings(cfg)
		in.rearm()
	}
}

// StartEager starts every eager server in the background, on the fleet's
// own goroutines (Close ends them), and learns each one's lists from the
// process it started — nothing more is started for that, so also when
// servers are not learned at start-up.
func (f *Fleet) StartEager() {
	for _, s := range f.Servers() {
		if s.Config().Eager {
			f.spawn(func(ctx context.Context) { f.startEager(ctx, s) })
		}
	}
}

// startEager starts an eager server and learns its lists from it.
func (f *Fleet) startEager(ctx context.Context, s *Server) {
	if err := s.startNow(ctx); err != nil {
		f.log.Warn("eager start failed", "server", s.Name(), "err", err)
		return
	}
	s.requestRefresh(allKinds...)
}

// relearn learns a relaunched server's lists from its new launch (or,
// eager, starts it); lists that could not be learned from it are dropped
// — they describe the launch before — and clients told.
func (f *Fleet) relearn(ctx context.Context, s *Server, learn bool) {
	switch {
	case s.Config().Eager:
		f.startEager(ctx, s)
		return
	case learn:
		if s.learn(ctx) {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	if k := s.cat.DropRelaunched(); len(k) > 0 {
		f.listsChanged(s, k)
	}
}

// listEffect is the lists clients see that a change of settings alone
// changes: the tools when the filter hides or shows a cached tool, or the
// prefix renames one; the prompts when the prefix renames one.
func listEffect(s *Server, was, now *config.Server) []catalog.ListKind {
	var out []catalog.ListKind
	tools, _ := s.cat.CachedList(catalog.Tools)
	if was.Prefix != now.Prefix && len(tools) > 0 {
		out = append(out, catalog.Tools)
	} else {
		for _, t := range tools {
			name, _ := rpc.StringMember(t, "name")
			if was.Tools.Allowed(name) != now.Tools.Allowed(name) {
				out = append(out, catalog.Tools)
				break
			}
		}
	}
	if prompts, _ := s.cat.CachedList(catalog.Prompts); was.Prefix != now.Prefix && len(prompts) > 0 {
		out = append(out, catalog.Prompts)
	}
	return out
}

// nonEmptyKinds lists the kinds of which the server has cached items.
func nonEmptyKinds(s *Server) []catalog.ListKind {
	var out []catalog.ListKind
	for _, k := range allKinds {
		if items, _ := s.cat.CachedList(k); len(items) > 0 {
			out = append(out, k)
		}
	}
	return out
}

// pruneStore drops the persisted lists of servers no longer configured as
// they are now, and what is known of launchers no longer configured.
func (f *Fleet) pruneStore() {
	f.forgetLaunches()
	if f.store == nil {
		return
	}
	if n, err := f.store.Prune(f.launchHashes()); err != nil {
		f.log.Warn("could not prune the persisted lists", "err", err)
	} else if n > 0 {
		f.log.Info("dropped cached lists of servers no longer configured as they were", "count", n)
	}
	f.pruneDefinitions()
	if n, err := f.store.PruneLaunches(f.launchKeys()); err != nil {
		f.log.Warn("could not prune the persisted launch resolutions", "err", err)
	} else if n > 0 {
		f.log.Info("dropped launch resolutions of servers no longer configured as they were", "count", n)
	}
}

// launchHashes maps each configured server to its launch hash, under
// which its lists are persisted.
func (f *Fleet) launchHashes() map[string]string {
	want := map[string]string{}
	for _, s := range f.Servers() {
		want[s.Name()] = s.Config().LaunchHash()
	}
	return want
}
