package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// ClientInfo is how mcpvisor introduces itself to servers.
var ClientInfo = json.RawMessage(`{"name":"mcpvisor","version":"0.1.0"}`)

// ClientCapabilities are declared to a server unless its connector says
// otherwise (Capabilities): mcpvisor relays sampling, elicitation and
// roots to the client session whose request is in flight on that server.
var ClientCapabilities = json.RawMessage(`{"roots":{"listChanged":true},"sampling":{},"elicitation":{}}`)

// ErrSpawn is wrapped by the error of a Connect whose process could not
// be started at all (no such command, no permission, no such directory),
// as opposed to one that started and failed its handshake.
var ErrSpawn = errors.New("could not start the process")

// StdioConnector starts a stdio server and performs the initialize
// handshake. It implements lifecycle.Connector.
type StdioConnector struct {
	Name    string
	Runtime *proc.Runtime
	Spec    proc.Spec
	// ExtraEnv ("KEY=value") is added to mcpvisor's environment (less its
	// own MCPVISOR_ variables: proc.Environ) at each
	// spawn when Spec.Env is nil. Building the environment only then keeps
	// a dormant server's footprint small.
	ExtraEnv []string
	// Capabilities, if set, is what initialize declares to the server
	// instead of ClientCapabilities (everything mcpvisor carries): a
	// per-session instance declares what its client declared, so that
	// it asks only what that client answers, as it would directly; a
	// server's config may narrow either.
	Capabilities json.RawMessage
	Hooks        Hooks
	Logger       *slog.Logger
	// MaxLine bounds one message from the server (default 16 MiB).
	MaxLine int
	// Protocol is ProtocolAuto (""), ProtocolLegacy or ProtocolModern: how
	// the server's era is found (modern.go, dual.go).
	Protocol string
	// LastInit, if set, is the server's initialize result as the fleet
	// last saw it (nil if none): what it records of the server's era
	// (InitResult.Era) decides an "auto" server's handshake until this
	// connector has learned the era itself.
	LastInit func() json.RawMessage
	// ModernFirst makes an "auto" server's handshake probe with
	// server/discover first, and start no second process for modern
	// clients: for an instance that only modern clients use.
	ModernFirst bool
	// OnEra, if set, is told when a probe found the era of a connection's
	// server — during its handshake, or after Connect returned (the first
	// modern client's request probes a server initialized first: dual.go)
	// — and its Init records it (InitResult.Era). It must not block long.
	OnEra func(c *Conn)
	// TwinTimeout bounds the start of a dual-era server's process for
	// modern clients (default DefaultTwinTimeout).
	TwinTimeout time.Duration
	// RetryDelay spaces the starts of that process in a crash loop (the
	// server's restart policy's lifecycle.Policy.RetryDelay; nil: the
	// default policy's).
	RetryDelay func(failures int) time.Duration
	era        eraMemo
	// OnConnect, if set, sees every new connection before Connect returns,
	// with Connect's context (work it does there is bounded by it).
	OnConnect func(ctx context.Context, c *Conn)
	// Launch, if set, is given each spawn's Spec before the spawn, its
	// environment built: it may change its Command and Args (the fleet
	// runs a package launcher's program directly: package launch). It
	// returns nil, or a function told how that start ended: nil once the
	// process answered (its handshake done, or it ended on the era
	// probe, a server of the 2025 revisions), else the start's error. It
	// must not block.
	Launch func(spec *proc.Spec) (started func(error))
}

// Connect spawns the server, sends initialize and notifications/initialized,
// and returns the live connection. ctx bounds the whole handshake
// (lifecycle gives it the init timeout); the process is stopped if the
// handshake fails, under ctx too: once ctx has ended, the tree is killed
// at once and Connect returns without waiting for it to vanish (the
// connection's goroutine reaps it).
func (sc *StdioConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	spec := sc.Spec
	spec.Name = sc.Name
	if spec.Env == nil && len(sc.ExtraEnv) > 0 {
		spec.Env = append(proc.Environ(), sc.ExtraEnv...)
	}
	var started func(error)
	if sc.Launch != nil {
		started = sc.Launch(&spec)
	}
	s, err := sc.connect(ctx, spec)
	if started != nil {
		if errors.Is(err, errEndedOnProbe) {
			started(nil) // it ran and spoke: a 2025 server
		} else {
			started(err)
		}
	}
	if errors.Is(err, errEndedOnProbe) {
		// A strict 2025 server: started again, and initialized at
		// once (sc.era says so now), within the same connect.
		return sc.Connect(ctx)
	}
	return s, err
}

// connect is Connect's spawn of spec and handshake.
func (sc *StdioConnector) connect(ctx context.Context, spec proc.Spec) (lifecycle.Session, error) {
	tw := &twin{sc: sc, spec: spec}
	c, err := sc.spawn(ctx, spec, sc.Hooks, tw)
	if err != nil {
		return nil, err
	}
	protocol := sc.Protocol
	if protocol == "" {
		protocol = ProtocolAuto
	}
	if err := sc.handshake(ctx, c, protocol); err != nil {
		_ = c.CloseContext(ctx)
		if errors.Is(err, errEndedOnProbe) {
			return nil, err // Connect starts it again
		}
		if errors.Is(err, rpc.ErrClosed) || errors.Is(err, lifecycle.ErrServerCrashed) {
			return nil, c.endCause(err)
		}
		return nil, lifecycle.Classify(fmt.Errorf("server %s: %w", sc.Name, err))
	}
	if protocol == ProtocolAuto && !c.modern && !sc.ModernFirst {
		// Initialized: if it speaks the modern revision too, its modern
		// clients get a process of their own (dual.go).
		tw.enable()
	}
	if sc.OnConnect != nil {
		sc.OnConnect(ctx, c)
	}
	if c.modern {
		// After OnConnect, whose replay names the resources subscribed
		// to: the listen opens once, with them.
		c.startListen()
	}
	return c, nil
}

// spawn starts spec and returns its connection, before any handshake,
// with what the server sends on its own going to hooks, and tw (nil:
// none) as the process it may start for modern clients, ended with it.
func (sc *StdioConnector) spawn(ctx context.Context, spec proc.Spec, hooks Hooks, tw *twin) (*Conn, error) {
	log := sc.Logger
	if log == nil {
		log = slog.Default()
	}
	spec.Logger = log // proc tags its records with the server's name itself
	log = log.With("server", sc.Name)
	p, err := sc.Runtime.Spawn(ctx, spec)
	if err != nil {
		return nil, lifecycle.Classify(fmt.Errorf("server %s: %w: %w", sc.Name, ErrSpawn, err))
	}
	c := &Conn{name: sc.Name, proc: p, log: log, tw: tw, caps: sc.Capabilities, runDone: make(chan struct{}), closeReq: make(chan struct{}), serial: serials.Add(1)}
	c.rpc = rpc.NewConn(p.Stdout(), p.Stdin(), rpc.Options{
		MaxLine:  sc.MaxLine,
		PeerName: "server " + sc.Name,
		Logger:   log,
		Handler:  hookHandler(c, hooks),
	})
	go func() {
		_ = c.rpc.Run(context.Background())
		c.endListen()
		// The protocol stream ended. Unless mcpvisor ended it, the server
		// is exiting on its own: give it exitGrace to do so, so that its
		// exit status is its own and not that of a stop mcpvisor began.
		if !c.closing.Load() {
			t := time.NewTimer(exitGrace)
			select {
			case <-p.Exited():
			case <-c.closeReq:
			case <-t.C:
			}
			t.Stop()
		}
		// Make sure the tree is gone before the session counts as ended:
		// its own, and its process for modern clients (dual.go).
		c.endTwin(context.Background())
		_ = p.Stop(context.Background())
		close(c.runDone)
	}()
	return c, nil
}

// errEndedOnProbe: the server ended when probed with server/discover (a
// 2025 server that takes nothing before initialize).
var errEndedOnProbe = errors.New("server ended when probed")

// handshake finds the era of c's server and makes the connection ready
// for it. "legacy" initializes; "modern" probes with server/discover and
// fails unless the server answers as modern. "auto" initializes first —
// a legacy server gets what its clients send first, and a dual-era one
// then serves the process in the legacy era, as its legacy clients need
// (dual.go) — and probes with server/discover only when initialize is
// refused (a modern-only server). An "auto" server known modern-only, or
// one for modern clients alone (ModernFirst), is probed first, and
// initialized only if the probe finds it legacy (probeFirst).
func (sc *StdioConnector) handshake(ctx context.Context, c *Conn, protocol string) error {
	era, versions := sc.era.learn(sc.LastInit)
	switch {
	case protocol == ProtocolLegacy:
		return c.initialize(ctx, nil)
	case protocol == ProtocolModern:
		modern, err := c.discover(ctx, protocol)
		if err == nil && !modern {
			err = fmt.Errorf("%w: server/discover did not answer as MCP %s (configured \"protocol\": \"modern\")", lifecycle.ErrCapabilityMissing, ModernVersion)
		}
		return err
	case era == EraModern || (sc.ModernFirst && era != EraLegacy):
		return sc.probeFirst(ctx, c)
	}
	// Initialized first, recording what is known of its versions (while
	// unknown, none: a modern client's first request probes, dual.go).
	err := c.initialize(ctx, versions)
	var refused *initRefused
	switch {
	case err == nil && era == EraLegacy && versions == nil:
		sc.learnedLegacy(c) // it ended on the probe (Connect)
		return nil
	case !errors.As(err, &refused):
		return err
	}
	modern, perr := c.discover(ctx, ProtocolAuto)
	switch {
	case perr != nil:
		return perr
	case !modern:
		return err // a legacy server that refused initialize
	}
	sc.era.set(EraModern, c.Init().SupportedVersions)
	c.log.Info("server refused initialize and speaks MCP " + ModernVersion + ": no initialize, requests carry _meta")
	return nil
}

// probeFirst is the handshake that probes with server/discover before
// anything: a modern server answers it; any other answer (or none within
// ProbeTimeout) is a legacy server's, which is then initialized, and
// initialized at once from then on. A server that ends on the probe is
// started again (errEndedOnProbe).
func (sc *StdioConnector) probeFirst(ctx context.Context, c *Conn) error {
	modern, err := c.discover(ctx, ProtocolAuto)
	switch {
	case err != nil && errors.Is(err, rpc.ErrClosed) && ctx.Err() == nil:
		// The server ended when asked server/discover: a 2025 server
		// that takes nothing before initialize. Its next start
		// initializes at once.
		sc.era.set(EraLegacy, nil)
		c.log.Info("server ended when probed with server/discover: it is initialized from now on")
		return fmt.Errorf("%w: %w", errEndedOnProbe, err)
	case err != nil:
		return err
	case modern:
		if !sc.ModernFirst {
			// One instance's probe says nothing of whether the others
			// are initialized.
			sc.era.set(EraModern, c.Init().SupportedVersions)
		}
		c.log.Info("server speaks MCP " + ModernVersion + ": no initialize, requests carry _meta")
		return nil
	}
	if err := c.initialize(ctx, nil); err != nil {
		return err
	}
	sc.learnedLegacy(c)
	return nil
}

// initRefused is initialize's error when the server answered it with a
// JSON-RPC error.
type initRefused struct{ msg string }

func (e *initRefused) Error() string { return "initialize refused: " + e.msg }
func (e *initRefused) Unwrap() error { return lifecycle.ErrServerUnavailable }

// initialize performs the legacy handshake: initialize, then
// notifications/initialized. versions, if set, is recorded in the result
// as the versions the server was found to speak (InitResult.Era).
func (c *Conn) initialize(ctx context.Context, versions []string) error {
	caps := c.caps
	if len(caps) == 0 {
		caps = ClientCapabilities
	}
	params, _ := json.Marshal(map[string]any{
		"protocolVersion": ProtocolVersion,
		"capabilities":    caps,
		"clientInfo":      ClientInfo,
	})
	resp, err := c.rpc.Call(ctx, "initialize", params)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return &initRefused{msg: resp.Error.Message}
	}
	init, err := ParseInit(resp.Result)
	if err != nil {
		return err
	}
	if !Supported(init.ProtocolVersion) {
		return fmt.Errorf("%w: server speaks MCP %q, mcpvisor speaks %v", lifecycle.ErrCapabilityMissing, init.ProtocolVersion, SupportedVersions)
	}
	if versions != nil {
		init = init.withVersions(versions)
	}
	c.init.Store(init)
	return c.rpc.Notify("notifications/initialized", nil)
}

// ParseInit decodes an initialize result (as a server sent it, or as it
// was cached).
func ParseInit(raw json.RawMessage) (*InitResult, error) {
	var r InitResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%w: malformed initialize result: %v", lifecycle.ErrTransport, err)
	}
	r.Raw = raw
	if len(r.Capabilities) > 0 {
		if err := json.Unmarshal(r.Capabilities, &r.caps); err != nil {
			return nil, fmt.Errorf("%w: malformed capabilities: %v", lifecycle.ErrTransport, err)
		}
	}
	return &r, nil
}

// retryDelay is RetryDelay, or the default policy's.
func (sc *StdioConnector) retryDelay(failures int) time.Duration {
	if sc.RetryDelay != nil {
		return sc.RetryDelay(failures)
	}
	return lifecycle.Policy{}.RetryDelay(failures)
}
