package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/mempolicy"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
)

// app is what serve and stdio share: config, process runtime, fleet and
// gateway.
type app struct {
	cfg    *config.Config
	cfgSum [sha256.Size]byte // of the file cfg was parsed from, for the reloader
	log    *slog.Logger
	rt     *proc.Runtime
	fleet  *fleet.Fleet
	gw     *gateway.Gateway
	events *admin.EventLog
	hist   *store.EventWriter // persists events; nil without a store
	store  *store.Store       // nil when the state file could not be opened
	logs   *logbuf.Registry   // each server's stderr lines
	// learning is startEager's learning of the lists not cached, which
	// close waits for.
	learning sync.WaitGroup
	// tracing exports a span of each client request (nil: off); its
	// exporter is shut down, bounded, by close.
	tracing *telemetry.Tracing
	// stateDir is the state directory in use (serve's socket is there).
	stateDir string
	// place, if set, rewrites each config read for this replica
	// (placement.go).
	place func(*config.Config)
}

// replicaHooks are what a replica gives the app (serve with a replicas
// block): place rewrites each config read for the replica (placement.go),
// gate and peerClient go to the fleet.
type replicaHooks struct {
	place      func(*config.Config)
	gate       func(context.Context, *config.Server) (func(), error)
	peerClient *http.Client
	peerGrant  func(*config.Server) backend.Authorizer
}

// openApp loads the config and builds everything; nothing is started.
// replicas, if set, makes the replica's hooks from the config (nil: no
// replicas block).
func openApp(configFile, stateDir string, log *slog.Logger, replicas func(*config.Config) (*replicaHooks, error)) (*app, error) {
	data, err := config.ReadFile(configFile)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse(data, configFile, config.LoadOptions{})
	if err != nil {
		return nil, err
	}
	var rh *replicaHooks
	if replicas != nil {
		if rh, err = replicas(cfg); err != nil {
			return nil, err
		}
	}
	if rh == nil {
		rh = &replicaHooks{}
	}
	if rh.place != nil {
		rh.place(cfg)
	}
	for _, w := range cfg.Warnings {
		log.Warn("config: " + w)
	}
	if stateDir == "" {
		stateDir = cfg.StateDir
	}
	if stateDir == "" {
		if stateDir, err = userdirs.StateDir(); err != nil {
			return nil, err
		}
	}
	rt, err := proc.Open(proc.Options{StateDir: stateDir, Logger: log})
	if err != nil {
		return nil, err
	}
	var active []string
	for _, l := range rt.Report().Layers {
		if l.Active {
			active = append(active, l.Name)
		}
	}
	log.Info("process containment", "layers", strings.Join(active, ","))
	// The persisted cache is a convenience: without it (another mcpvisor
	// holds the file, the disk is read-only) every server is simply
	// learned again.
	st, err := store.Open(filepath.Join(stateDir, "state.db"), store.Options{Logger: log})
	if err != nil {
		log.Warn("running without the persisted tools cache", "err", err)
		st = nil
	}
	gw := gateway.New(log)
	// Lifecycle events are kept in memory for /api/events and /metrics,
	// starting with those an earlier run persisted, and persisted in
	// batches by a writer of their own: a fleet event never waits for the
	// disk.
	const keptEvents = store.DefaultMaxEvents
	hist := st.EventWriter(store.EventWriterOptions{Logger: log})
	events := admin.RestoreEventLog(keptEvents, st.Events(time.Time{}, keptEvents))
	events.PersistTo(hist.Record)
	logs := logbuf.NewRegistry(logbuf.Options{})
	f, err := fleet.New(cfg, fleet.Options{Runtime: rt, Hooks: gw, Logger: log, OnListsChanged: gw.ListsChanged, Interest: gw.Interest(), OnEvent: events.Add, Logs: logs,
		Trim: newTrimmer(st, log).Trim,
		Secrets: secret.LazyReport(stateDir, secret.Options{}, func(backend, why string) {
			if why != "" {
				log.Info("secrets and OAuth tokens are kept in a file: the OS keyring is not used", "store", backend, "why", why)
			} else {
				log.Info("secrets and OAuth tokens are kept in the OS keyring", "store", backend)
			}
		}),
		CompileCache: filepath.Join(stateDir, "node-compile-cache"),
		Gate:         rh.gate, PeerClient: rh.peerClient, PeerGrant: rh.peerGrant})
	if err != nil {
		_ = hist.Close(context.Background())
		_ = st.Close()
		_ = rt.Close(context.Background())
		return nil, err
	}
	warnLimits(rt, cfg)
	gw.SetFleet(f)
	f.SetStore(st)
	gw.SetPageSize(cfg.PageSize)
	gw.SetHoldTimeout(cfg.HoldTimeout)
	gw.SetPolicy(cfg.Compiled)
	return &app{cfg: cfg, cfgSum: sha256.Sum256(data), log: log, rt: rt, fleet: f, gw: gw, events: events, hist: hist, store: st, logs: logs, stateDir: stateDir, place: rh.place}, nil
}

// startEager starts the servers marked eager, in the background, learning
// their lists from the processes it starts, and, when learn is set, starts
// each other server whose lists are not cached, two at a time, to learn
// them, then lets it sleep again; and keeps node's compile cache bounded.
func (a *app) startEager(ctx context.Context, learn bool) {
	if learn {
		a.learning.Go(func() { mempolicy.WithGCPercent(mempolicy.LearnGCPercent, func() { a.fleet.Learn(ctx, 2) }) })
	}
	a.fleet.StartEager()
	a.fleet.KeepCompileCache()
}

// close stops every server in parallel under ctx and then the runtime
// (which kills whatever ctx left running). A deadline on ctx bounds every
// process stop first, those already under way included (see boundStops).
func (a *app) close(ctx context.Context) error {
	// The learning ends with the context startEager was given (serve's,
	// ended before this); the servers it started stop with the fleet.
	a.learning.Wait()
	a.boundStops(ctx)
	ferr := a.fleet.Close(ctx)
	rerr := a.rt.Close(ctx)
	herr := a.hist.Close(ctx) // the events of the stop included
	serr := a.store.Close()
	// The spans of the requests the stop ended included; an endpoint that
	// does not answer costs at most tracingShutdownBound.
	tctx, cancel := context.WithTimeout(ctx, tracingShutdownBound)
	defer cancel()
	if err := a.tracing.Shutdown(tctx); err != nil {
		a.log.Warn("tracing: spans not exported", "endpoint", a.tracing.Endpoint(), "err", err)
	}
	return errors.Join(ferr, rerr, herr, serr)
}

// tracingShutdownBound bounds the export of the last spans at exit.
const tracingShutdownBound = 5 * time.Second

// newTracing is the tracing of --otlp-endpoint and the OTEL_* environment
// (nil: off), its spans naming mcpvisor at version. A bad --otlp-endpoint
// or OTEL_* value is a usage error.
func newTracing(endpoint, version string) (*telemetry.Tracing, error) {
	t, err := telemetry.NewTracing(context.Background(), telemetry.TracingOptions{Endpoint: endpoint, Version: version})
	if err != nil {
		return nil, shutdown.UsageError{Err: err}
	}
	return t, nil
}

// setTracing makes t the app's tracing: the gateway's spans, exported
// until close.
func (a *app) setTracing(t *telemetry.Tracing) {
	a.tracing = t
	a.gw.SetTracing(t)
	if t != nil {
		a.log.Info("tracing: exporting a span of each client request over OTLP/HTTP", "endpoint", t.Endpoint())
	}
}

// boundStops makes ctx's deadline, if it has one, bound every stop of a
// server process, whoever began it and whenever: a stop begun earlier
// under a longer bound of its own (a server going dormant, a client
// session's end, a start cut short) SIGKILLs its tree in time for the
// tree to be reaped by the deadline, as does every stop begun later.
func (a *app) boundStops(ctx context.Context) {
	if deadline, ok := ctx.Deadline(); ok {
		a.rt.BoundStops(deadline)
	}
}

// shutdown waits for sd to begin, runs graceful under the shutdown
// deadline and kills every process tree at once if that is cut short. It
// returns nil for a clean exit, else the exit code as an error.
//
// Before graceful runs, the shutdown deadline bounds every process stop
// (boundStops): with the default waits (2 s + 10 s before SIGKILL) and the
// default 10 s timeout, a server that ignores SIGTERM is SIGKILLed inside
// the deadline, even when its stop began before the shutdown, and the
// exit is clean.
func (a *app) shutdown(sd *shutdown.Shutdown, timeout time.Duration, graceful func(context.Context) error) error {
	code := sd.Run(timeout, func(ctx context.Context) error {
		a.boundStops(ctx)
		a.log.Info("shutting down", "reason", sd.Reason(), "deadline", timeout)
		return graceful(ctx)
	}, func() {
		a.log.Warn("shutdown forced: killing every server now", "reason", sd.Reason())
		a.rt.Kill()
	})
	if code != shutdown.ExitOK {
		return shutdown.ExitCode(code)
	}
	return nil
}

// warnLimits warns, at start-up, of every limit of an enabled stdio server
// this machine cannot enforce: the server runs without it (mcpvisor doctor
// says why). The runtime warns of each once only, this start-up warning
// included.
func warnLimits(rt *proc.Runtime, cfg *config.Config) {
	for _, s := range cfg.Servers {
		if !s.Disabled && s.Kind == config.KindStdio && s.Limits.Kernel() {
			rt.WarnNotEnforced(s.Name, &proc.Limits{MemoryBytes: s.Limits.Memory, PIDs: s.Limits.PIDs, CPU: s.Limits.CPU})
		}
	}
}

// newTrimmer is the fleet's trim: the state file's pages go back at each
// (a closed store has none left to give).
func newTrimmer(st *store.Store, log *slog.Logger) *mempolicy.Trimmer {
	return mempolicy.NewTrimmer(func() error {
		if err := st.ReleaseMemory(); !errors.Is(err, store.ErrClosed) {
			return err
		}
		return nil
	}, log)
}
