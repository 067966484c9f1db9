// Package fleet is the set of configured servers and their on-demand
// lifecycle: the only place that decides when a server process starts and
// stops. A server starts on first use (or at mcpvisor's start when eager),
// goes dormant after its idle timeout — never while a request is in flight
// and never inside its spawn grace period — and respawns transparently,
// once for any number of concurrent callers, on the next request. Each
// running process is driven by a lifecycle.Supervisor, which restarts it
// after a crash.
//
// A server shared by all client sessions has one instance; a server with
// sharing "per-session" has one instance per client session, closed when
// the session ends. Every instance follows the same rules.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Live is what a connected instance is: a lifecycle.Session that also says
// whether its stream is still open. *backend.Conn is one.
type Live interface {
	lifecycle.Session
	Alive() bool
	Done() <-chan struct{}
}

// ConnectorFunc builds the connector of one run of an instance (made by
// the start that begins the run, dropped when the instance goes
// dormant): s is the configuration the instance was made under; onConnect
// must be called with every connection it makes, before Connect returns,
// with Connect's context, and Connect must return that same Live as its
// Session: the instance leases what its supervisor hands out
// (lifecycle.Supervisor.Session) and tells connections apart by it. hooks
// receive what the server sends on its own.
// It is called with the instance's lock held: it must not call back into
// the fleet.
type ConnectorFunc func(s *config.Server, hooks backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector

// Options configure a Fleet.
type Options struct {
	Runtime *proc.Runtime
	// Hooks receive what servers send on their own.
	Hooks  Hooks
	Logger *slog.Logger
	// OnListsChanged is called when the cached lists of a server changed:
	// learned, refreshed after a restart, a wake or the server's own
	// list_changed, or dropped because that refresh failed. It runs on a
	// goroutine of its own — for a refresh, the server's refresher, whose
	// next refresh waits for it — and may block briefly; Close waits for a
	// refresh's call to return.
	OnListsChanged func(s *Server, kinds []catalog.ListKind)
	// OnEvent receives every lifecycle event; it must not block.
	OnEvent func(Event)
	// Connector replaces the stdio backend (tests).
	Connector ConnectorFunc
	// OAuthClient, if set, carries the requests to authorization servers
	// (nil: a default client; each request is bounded anyway).
	OAuthClient *http.Client
	// Logs, if set, keeps each server's stderr lines (stdio servers),
	// across its processes, by server name.
	Logs *logbuf.Registry
	// Trim, if set, is called once servers went dormant, or requests
	// were served (TrimSoon), and nothing more happened for a moment
	// (trimQuiet), at most once per trimEvery, on a goroutine of the
	// fleet's: the dormant servers' lists and definitions are out of
	// memory by then (in the store), and Trim gives what they held back
	// to the OS. dormancy tells that servers went dormant since the last
	// call (else only requests were served: Trim may find nothing worth
	// giving back). Close waits for a Trim under way to return, and none
	// is called after it.
	Trim func(dormancy bool)
	// TreeUsage measures process trees, for maxIdleMemory; nil means
	// proc.TreeUsage (tests replace it).
	TreeUsage func([]proc.Root) ([]proc.Usage, []bool)
	// Resolver resolves the package launchers of servers to flatten
	// (launch.Flattener); nil means the user's own package manager
	// (launch.Resolver).
	Resolver launch.PackageResolver
	// Interest is what client sessions asked of the servers (resource
	// subscriptions, a log level), replayed to every new process of an
	// instance before it serves, and keeping an instance a session
	// subscribed on awake; nil: nothing is replayed, nothing pinned.
	Interest Interest
	// Secrets resolves the ${keyring:NAME} references of the servers'
	// env, args, headers and oauth secrets (secret.Open; nil: such a
	// reference fails its server's start; secrets.go), and keeps the
	// remote servers' OAuth records under oauth/NAME (nil: in memory,
	// lost at exit; oauth.go).
	Secrets secret.Store
	// LookupEnv resolves their ${env:NAME} references; nil means
	// os.LookupEnv (tests replace it).
	LookupEnv func(string) (string, bool)
	// CompileCache is the directory of node's module compile cache that a
	// flattened start gives the server (launch.Options.CompileCache); ""
	// gives none. A relative one is taken from mcpvisor's working
	// directory.
	CompileCache string
	// Replicas: Gate, if set, is waited on before each start of a local
	// server placed on one replica ("placement": "one"), within the
	// start's bound: it returns once no process of the server runs,
	// here or on another replica, or the error that start fails with;
	// release is called once the start is over (its process is then
	// counted). PeerClient carries the requests to a server this replica
	// reaches through its owner (config.Server.Via).
	Gate       func(ctx context.Context, sc *config.Server) (release func(), err error)
	PeerClient *http.Client
	// PeerGrant, if set, is the authorizer of a remote server's
	// connections whose OAuth grant another replica holds (nil from it:
	// this replica's own grant).
	PeerGrant func(sc *config.Server) backend.Authorizer
}

// Fleet holds one Server per enabled configured server.
type Fleet struct {
	opts  Options
	log   *slog.Logger
	set   atomic.Pointer[serverSet] // replaced whole by a reload
	store *store.Store              // nil: nothing persisted
	// catEnv is what the servers' catalogs share (catalog.go).
	catEnv catalog.Env
	// cfg is the configuration in force. reloadSem (one slot) is the
	// right to apply a reload, taken within the reloader's context.
	reloadSem chan struct{}
	cfg       *config.Config

	closed atomic.Bool // set by Close: nothing starts any more

	bgMu sync.Mutex // guards setting closed against spawning, and bg's count
	bg   background
	trim trimState

	endMu sync.Mutex           // guards ended and endedGC
	ended map[string]time.Time // client sessions ended lately, and when
	// endedGC is when ended was last swept: at most every endedMemory/4,
	// not at each end (a flood of sessions ending at once would sweep
	// thousands each time).
	endedGC time.Time

	// draining holds the instances taken out of service (takeOut) and
	// not yet stopped (stopOut): in no server's set any more, they are
	// stopped by Close too.
	drainMu  sync.Mutex
	draining map[*instance]struct{}
	// drained holds, per server, channels closed once none of its
	// instances is draining any more (drainsOver).
	drained map[*Server][]chan struct{}

	instances atomic.Uint64 // numbers the instances made, from 1 (instance.id)

	seams seams // tests' (instance.go); set before the fleet serves

	// removedTel are the call metrics of removed servers still draining,
	// by name (CallTelemetry).
	telMu      sync.Mutex
	removedTel map[string]*telemetry.Server

	// launches is the launcher state: what is known of each package
	// launcher and its resolutions (launch.go).
	launches *launch.Flattener

	// grants are the remote servers' OAuth grants (oauth.go).
	grants grants
}

// drainingDone forgets an instance takeOut put in draining, once stopOut
// has stopped it.
func (f *Fleet) drainingDone(in *instance) {
	f.drainMu.Lock()
	defer f.drainMu.Unlock()
	delete(f.draining, in)
	if len(f.drained[in.srv]) > 0 && !f.drainingLocked(in.srv) {
		for _, ch := range f.drained[in.srv] {
			close(ch)
		}
		delete(f.drained, in.srv)
	}
}

// drainingLocked reports whether an instance of s is draining; drainMu is
// held.
func (f *Fleet) drainingLocked(s *Server) bool {
	for in := range f.draining {
		if in.srv == s {
			return true
		}
	}
	return false
}

// drainingOf lists the instances of s taken out of service and still
// draining (in no order).
func (f *Fleet) drainingOf(s *Server) []*instance {
	f.drainMu.Lock()
	defer f.drainMu.Unlock()
	var out []*instance
	for in := range f.draining {
		if in.srv == s {
			out = append(out, in)
		}
	}
	return out
}

// drainsOver is closed once no instance of s is draining — taken out of
// service by a Stop, a Restart or a reload and not yet stopped — at once
// if none is now. Each drain is bounded (stopOut), so it closes in time.
func (f *Fleet) drainsOver(s *Server) <-chan struct{} {
	ch := make(chan struct{})
	f.drainMu.Lock()
	defer f.drainMu.Unlock()
	if !f.drainingLocked(s) {
		close(ch)
		return ch
	}
	if f.drained == nil {
		f.drained = map[*Server][]chan struct{}{}
	}
	f.drained[s] = append(f.drained[s], ch)
	return ch
}

// serverSet is the fleet's servers at one moment: a reload builds a new
// one, so a reader holds a consistent set without a lock.
type serverSet struct {
	list   []*Server // sorted by name
	byName map[string]*Server
}

func newServerSet(list []*Server) *serverSet {
	sort.Slice(list, func(i, j int) bool { return list[i].Name() < list[j].Name() })
	set := &serverSet{list: list, byName: make(map[string]*Server, len(list))}
	for _, s := range list {
		set.byName[s.Name()] = s
	}
	return set
}

// endedMemory is how long an ended client session is remembered, so that a
// request of it that raced its end cannot create a per-session instance.
const endedMemory = time.Minute

// EndSession ends what client session held in every server: per-session
// instances are closed under ctx, and no instance is created for it
// afterwards. What it asked of the servers (subscriptions, log levels) is
// not the fleet's: its owner (Options.Interest) is told to forget it, and
// the listen of each modern server it had asked something of drops its
// subscriptions here.
func (f *Fleet) EndSession(ctx context.Context, session string) {
	f.DetachSession(session)(ctx)
}

// DetachSession is EndSession in two steps: at once, before it returns,
// session is forgotten — no request reaches its per-session instances,
// and no instance is created for it afterwards —; the function it returns
// stops those instances, bounded by its ctx, and must be called (a second
// call does nothing). Until they are stopped they count towards
// their servers' maxInstances: a new session's instance beyond it waits
// (within its Acquire's ctx) for one of them to be gone.
func (f *Fleet) DetachSession(session string) (stop func(context.Context)) {
	if session == "" {
		return func(context.Context) {}
	}
	now := time.Now()
	f.endMu.Lock()
	if f.ended == nil {
		f.ended = map[string]time.Time{}
	}
	if now.Sub(f.endedGC) > endedMemory/4 {
		f.endedGC = now
		for k, t := range f.ended {
			if now.Sub(t) > endedMemory {
				delete(f.ended, k)
			}
		}
	}
	f.ended[session] = now
	f.endMu.Unlock()
	var asked []interest.Server
	if it := f.opts.Interest; it != nil {
		asked = it.End(session)
	}
	type detached struct {
		s  *Server
		in *instance
	}
	var all []detached
	for _, s := range f.Servers() {
		if in := s.detachSession(session, slices.Contains(asked, interest.Server(s))); in != nil {
			all = append(all, detached{s, in})
		}
	}
	var once sync.Once
	return func(ctx context.Context) {
		once.Do(func() {
			var wg sync.WaitGroup
			for _, d := range all {
				wg.Go(func() { d.s.stopDetached(ctx, d.in) })
			}
			wg.Wait()
		})
	}
}

func (f *Fleet) sessionEnded(session string) bool {
	f.endMu.Lock()
	defer f.endMu.Unlock()
	_, ok := f.ended[session]
	return ok
}

// New builds the fleet for cfg. Nothing is started.
func New(cfg *config.Config, opts Options) (*Fleet, error) {
	f := &Fleet{opts: opts, log: opts.Logger, cfg: cfg, reloadSem: make(chan struct{}, 1)}
	f.bg.ctx, f.bg.cancel = context.WithCancel(context.Background())
	f.trim.epoch = time.Now()
	if f.log == nil {
		f.log = slog.Default()
	}
	f.initCatalogEnv()
	if f.opts.Connector == nil {
		f.opts.Connector = f.connector
	}
	if f.opts.TreeUsage == nil {
		f.opts.TreeUsage = proc.TreeUsage
	}
	launches, err := launch.NewFlattener(launch.Options{Resolver: opts.Resolver, Store: launchStore{f}, Logger: f.log, Go: f.spawn,
		Environ: proc.Environ, CompileCache: opts.CompileCache})
	if err != nil {
		return nil, err
	}
	f.launches = launches
	var list []*Server
	for _, sc := range cfg.Servers {
		if !sc.Disabled {
			list = append(list, f.newServer(sc))
		}
	}
	f.set.Store(newServerSet(list))
	return f, nil
}

// newServer builds the server of sc; nothing is started.
func (f *Fleet) newServer(sc *config.Server) *Server {
	s := &Server{f: f}
	s.cat.Bind((*serverHost)(s))
	s.cfg.Store(sc)
	s.shared.Store(s.newInstance(""))
	return s
}

// connector is the backend of a configured server: a local process, or a
// remote server over Streamable HTTP (or the legacy SSE transport).
func (f *Fleet) connector(sc *config.Server, hooks backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
	if sc.Kind == config.KindHTTP {
		transport := "streamable-http"
		if sc.Transport == config.TransportSSE {
			transport = "sse"
		}
		var auth backend.Authorizer
		if oauthEligible(sc) {
			if f.opts.PeerGrant != nil {
				auth = f.opts.PeerGrant(sc)
			}
			if auth == nil {
				auth = &serverAuth{f: f, sc: sc}
			}
		}
		hc := &backend.HTTPConnector{
			Auth:         auth,
			Name:         sc.Name,
			URL:          sc.URL,
			Headers:      sc.Headers,
			Transport:    transport,
			Capabilities: declaredCapabilities(sc, f.sessionCapabilities(sc, hooks)),
			Hooks:        hooks,
			Logger:       f.log,
			Protocol:     sc.Protocol,
			OnConnect:    func(ctx context.Context, c *backend.Conn) { onConnect(ctx, c) },
		}
		if sc.Via != nil {
			hc.HTTPClient = f.opts.PeerClient
		}
		// References in the headers resolve at each connection.
		hc.ResolveHeaders = f.headerResolver(sc, whoOf(hooks))
		return hc
	}
	c := f.stdioConnector(sc, hooks, onConnect)
	if sc.Placement == config.PlacementOne && f.opts.Gate != nil {
		return gated{c, func(ctx context.Context) (func(), error) { return f.opts.Gate(ctx, sc) }}
	}
	return c
}

// gated is a Connector that waits on gate before each connect, and
// releases it once the connect is over.
type gated struct {
	lifecycle.Connector
	gate func(context.Context) (func(), error)
}

func (g gated) Connect(ctx context.Context) (lifecycle.Session, error) {
	release, err := g.gate(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return g.Connector.Connect(ctx)
}

// sessionCapabilities is what the client of the session an instance's
// hooks are for declared, of the capabilities mcpvisor carries
// (SessionCapabilities): nil for a shared instance, or one whose client
// takes mcpvisor's own. A per-session server's shared instance serves no
// client — it only learns the lists /mcp shows — and is declared none:
// a server that shapes its tools on its client's capabilities then lists
// only tools every session's own process has (one whose client declared
// more may have more; none listed is missing from any).
func (f *Fleet) sessionCapabilities(sc *config.Server, hooks backend.Hooks) json.RawMessage {
	h, ok := hooks.(instHooks)
	if !ok {
		return nil
	}
	if h.in.key == "" {
		if Private(sc) {
			return json.RawMessage(`{}`)
		}
		return nil
	}
	if _, ok := identityOfKey(h.in.key); ok {
		// An identity's instance serves any of its sessions: mcpvisor's
		// own, as the shared instance.
		return nil
	}
	if scp, ok := f.opts.Hooks.(SessionCapabilities); ok {
		return scp.SessionCapabilities(h.in.key) // a session's own instance
	}
	return nil
}

// declaredCapabilities is what an instance of sc declares to its server
// at initialize: of client's capabilities (a session's own instance's
// client's; nil: mcpvisor's own, all it carries), those sc's config lets
// mcpvisor declare ("clientCapabilities"). nil stands for all mcpvisor
// carries (the backend's default).
func declaredCapabilities(sc *config.Server, client json.RawMessage) json.RawMessage {
	if sc.ClientCapabilities == nil {
		return client
	}
	if client == nil {
		client = backend.ClientCapabilities
	}
	var caps map[string]json.RawMessage
	if json.Unmarshal(client, &caps) != nil {
		return json.RawMessage(`{}`)
	}
	for name := range caps {
		if !sc.Declares(name) {
			delete(caps, name)
		}
	}
	b, err := json.Marshal(caps)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// DeclaredCapabilities is what mcpvisor declares to the server configured
// as cfg as its client, of the capabilities it carries: to the shared
// instance, all of them cfg lets it declare. A session's own instance is declared
// those of them its client declared; a modern server's request, those of
// them its client's request declares.
func DeclaredCapabilities(cfg *config.Server) json.RawMessage {
	if caps := declaredCapabilities(cfg, nil); caps != nil {
		return caps
	}
	return backend.ClientCapabilities
}

// logsOf is the buffer that keeps the stderr lines of sc's server, if
// mcpvisor keeps them (Options.Logs) and it has one.
func (f *Fleet) logsOf(sc *config.Server) *logbuf.Buffer {
	if f.opts.Logs == nil {
		return nil
	}
	return f.opts.Logs.Lookup(sc.Name)
}

func (f *Fleet) stdioConnector(sc *config.Server, hooks backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
	var extra []string
	for k, v := range sc.Env {
		extra = append(extra, k+"="+v)
	}
	var onStderr func(int, string)
	// Lookup: newInstance made the buffer; a reload that removed the
	// server since closed it, and the lines of a start that raced it
	// have nowhere to go.
	h, isInst := hooks.(instHooks)
	if buf := f.logsOf(sc); buf != nil {
		var session string
		var origin uint64
		if isInst {
			session, origin = h.in.key, h.in.id
		}
		// The lines come redacted (Spec.Redact below) and are kept so:
		// whoever reads the buffer (the logs, inspect, a failed start's
		// stderr, the history) serves them as they are.
		onStderr = func(pid int, line string) {
			buf.Add(logbuf.Entry{Line: line, PID: pid, Session: session, Origin: origin})
		}
	}
	var lastInit func() json.RawMessage
	var onEra func(*backend.Conn)
	modernFirst := false
	if isInst {
		if ms, ok := f.opts.Hooks.(ModernSessions); ok && h.in.key != "" && !isIdentityKey(h.in.key) {
			modernFirst = ms.ModernSession(h.in.key)
		}
		// The era is the server's (its launch's): what any instance
		// learned is kept with its lists, and read by the next start of
		// each (dual.go in package backend).
		srv := h.in.srv
		lastInit = srv.cat.CachedInit
		onEra = func(c *backend.Conn) { srv.cat.EraLearned(sc, c) }
	}
	// References in env and args resolve at each start (withSecrets).
	return f.withSecrets(sc, whoOf(hooks), &backend.StdioConnector{
		Capabilities: declaredCapabilities(sc, f.sessionCapabilities(sc, hooks)),
		LastInit:     lastInit,
		OnEra:        onEra,
		ModernFirst:  modernFirst,
		TwinTimeout:  sc.InitTimeout,
		RetryDelay:   sc.Policy().RetryDelay,
		ExtraEnv:     extra,
		Name:         sc.Name,
		Runtime:      f.opts.Runtime,
		Spec: proc.Spec{
			Command:   sc.Command,
			Args:      sc.Args,
			Dir:       sc.Cwd,
			StdinWait: stopWait(sc.StdinWait),
			TermWait:  stopWait(sc.TermWait),
			Limits:    procLimits(sc.Limits),
			OnStderr:  onStderr,
			// Redacted once, as the process writes them, with sc — the
			// config of this launch: the config in force when a line is
			// read may be a later launch's, which no longer names this
			// one's secrets. The proc layer's ring, which the launch's
			// errors quote (an exit, a failed handshake), keeps them so
			// too.
			Redact: sc.RedactText,
		},
		Hooks:     hooks,
		Logger:    f.log,
		Protocol:  sc.Protocol,
		OnConnect: func(ctx context.Context, c *backend.Conn) { onConnect(ctx, c) },
		// A package launcher's program runs directly once resolved
		// (launch.go): each spawn's Command and Args are decided then.
		Launch: f.launcher(sc),
	})
}

// procLimits are the kernel limits of l for the process layer; nil when
// it sets none (a server without limits costs no more).
func procLimits(l *config.Limits) *proc.Limits {
	if !l.Kernel() {
		return nil
	}
	return &proc.Limits{MemoryBytes: l.Memory, PIDs: l.PIDs, CPU: l.CPU}
}

// stopWait maps config's "0 means no wait" onto proc's negative value.
func stopWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Servers lists the enabled servers, sorted by name, as the last reload
// left them. The slice is the caller's to read, never to change.
func (f *Fleet) Servers() []*Server { return f.set.Load().list }

// Interest is Options.Interest, what the fleet reads sessions' interest
// from (nil without one).
func (f *Fleet) Interest() Interest { return f.opts.Interest }

// Get returns the named server, or nil.
func (f *Fleet) Get(name string) *Server { return f.set.Load().byName[name] }

// Close stops every instance of every server in parallel under ctx —
// those still draining after a reload, Restart or Stop included. From
// its start on, no server starts any more: a request that would start one
// gets an error wrapping ErrFleetClosed. The fleet's own work (list
// refreshes, replays to new processes) is cancelled, and Close returns
// once it has ended or ctx has, with ctx's error then.
func (f *Fleet) Close(ctx context.Context) error {
	bgDone := f.stopBackground()
	var all []*instance
	for _, s := range f.Servers() {
		all = append(all, s.instances()...)
	}
	f.drainMu.Lock()
	for in := range f.draining {
		// A reload's, a restart's or a stop's drain: cut short. One
		// taken out of service since the servers' were taken is here
		// too (takeOut), and once only.
		if !slices.Contains(all, in) {
			all = append(all, in)
		}
	}
	f.drainMu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, in := range all {
		wg.Go(func() { errs[i] = in.close(ctx) })
	}
	wg.Wait()
	select {
	case <-bgDone:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("the fleet's own work did not end: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

func (f *Fleet) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	attrs := []any{"server", e.Server, "event", e.Type}
	if e.Session != "" {
		attrs = append(attrs, "session", e.Session)
	}
	for _, k := range sortedKeys(e.Details) {
		attrs = append(attrs, k, e.Details[k])
	}
	f.log.Info("server "+string(e.Type), attrs...)
	if f.opts.OnEvent != nil {
		f.opts.OnEvent(e)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NewEvent is an event of d's kind about server (and session, if set),
// with d as its details; its time is set when it is emitted.
func NewEvent(server, session string, d event.Details) Event {
	return Event{Server: server, Session: session, Type: d.Kind(), Details: event.Fields(d)}
}

// Event is one lifecycle event of a server (or, for a reload, of
// mcpvisor as a whole): its type is one of event.Kinds, its details the
// fields of that kind's details type (NewEvent); docs/events.md describes
// each.
type Event struct {
	Time    time.Time      `json:"time"`
	Server  string         `json:"server"`
	Session string         `json:"session,omitempty"`
	Type    event.Kind     `json:"type"`
	Details map[string]any `json:"details,omitempty"`
}
