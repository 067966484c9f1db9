package fleet

import (
	"context"
	"encoding/json"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// Launcher flattening is the launcher state's own (launch.Flattener): the
// fleet holds one, made by New, and wires it to its servers' spawns, its
// store, its background work and its reloads.

// launchStore is the fleet's store as its Flattener persists in it: the
// one SetStore attached, when a record is read or written.
type launchStore struct{ f *Fleet }

func (s launchStore) Launch(server, key string) json.RawMessage {
	return s.f.store.Launch(server, key)
}

func (s launchStore) PutLaunch(server, key string, rec json.RawMessage) error {
	return s.f.store.PutLaunch(server, key, rec)
}

// launcher is the Launch hook of sc's connector: nil unless sc's command
// is a package launcher (a server that is none costs nothing more). Each
// spawn runs as the fleet's Flattener decides, with the config in force
// then.
func (f *Fleet) launcher(sc *config.Server) func(*proc.Spec) func(error) {
	prepare := f.launches.Hook(sc, func() *config.Server {
		if s := f.Get(sc.Name); s != nil {
			return s.Config()
		}
		return sc
	})
	if prepare == nil {
		return nil
	}
	return func(spec *proc.Spec) func(error) {
		sp := launch.Spawn{Command: spec.Command, Args: spec.Args, Env: spec.Env, Dir: spec.Dir}
		done := prepare(&sp)
		spec.Command, spec.Args, spec.Env = sp.Command, sp.Args, sp.Env
		return done
	}
}

// launcher is how the server starts when its command is a package launcher
// (npx, npm exec, …), else nil (Status.Launcher).
func (s *Server) launcher() *launch.Status { return s.f.launches.Status(s.Config()) }

// Refresh forgets how the server's package launcher resolved and resolves
// it again now, bounded by ctx (launch.Flattener.Refresh). The result
// applies from the server's next start: a running process is left as it
// is. An error wrapping launch.ErrNoLauncher means the server has nothing
// to resolve.
func (s *Server) Refresh(ctx context.Context) (*launch.Status, error) {
	return s.f.launches.Refresh(ctx, s.Config)
}

// forgetLaunches drops the launch records of servers no longer configured
// (a server added again under the name finds its record in the store).
func (f *Fleet) forgetLaunches() {
	f.launches.Forget(func(name string) bool { return f.Get(name) != nil })
}

// launchKeys maps each configured server run through a package launcher
// to its launch key, under which its record is persisted.
func (f *Fleet) launchKeys() map[string]string {
	var cfgs []*config.Server
	for _, s := range f.Servers() {
		cfgs = append(cfgs, s.Config())
	}
	return f.launches.Keys(cfgs)
}

// KeepCompileCache bounds the compile cache the fleet gives flattened
// starts (Options.CompileCache; none: nothing to do) in the background
// until Close (launch.Flattener.KeepCompileCache). Called once, by serve
// and stdio as they start.
func (f *Fleet) KeepCompileCache() { f.launches.KeepCompileCache() }
