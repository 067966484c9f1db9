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

// clientCapabilities are declared to every server: mcpvisor bridges
// sampling, elicitation and roots to the client session whose request is in
// flight on that server.
var clientCapabilities = json.RawMessage(`{"roots":{"listChanged":true},"sampling":{},"elicitation":{}}`)

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
	Hooks    Hooks
	Logger   *slog.Logger
	// MaxLine bounds one message from the server (default 16 MiB).
	MaxLine int
	// Protocol is ProtocolAuto (""), ProtocolLegacy or ProtocolModern: how
	// the server's era is found (modern.go).
	Protocol string
	// EraHint, if set, tells the protocol version the server spoke when
	// it last ran (the persisted initialize result, "" if none): an "auto"
	// server known legacy is initialized without the probe.
	EraHint func() string
	era     eraMemo
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
	c := &Conn{name: sc.Name, proc: p, log: log, runDone: make(chan struct{}), closeReq: make(chan struct{})}
	c.rpc = rpc.NewConn(p.Stdout(), p.Stdin(), rpc.Options{
		MaxLine:  sc.MaxLine,
		PeerName: "server " + sc.Name,
		Logger:   log,
		Handler:  hookHandler(c, sc.Hooks),
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
		// Make sure the tree is gone before the session counts as ended.
		_ = p.Stop(context.Background())
		close(c.runDone)
	}()
	protocol := sc.Protocol
	if protocol == "" {
		protocol = ProtocolAuto
	}
	if protocol == ProtocolAuto {
		sc.era.knownLegacy(sc.EraHint)
	}
	if err := c.handshake(ctx, protocol, &sc.era); err != nil {
		_ = c.CloseContext(ctx)
		if errors.Is(err, errEndedOnProbe) {
			return nil, err // Connect starts it again
		}
		if errors.Is(err, rpc.ErrClosed) || errors.Is(err, lifecycle.ErrServerCrashed) {
			return nil, c.endCause(err)
		}
		return nil, lifecycle.Classify(fmt.Errorf("server %s: %w", sc.Name, err))
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

// SetEraHint sets EraHint if it is not set (for the fleet, which keeps the
// era of every server's last run).
func (sc *StdioConnector) SetEraHint(hint func() string) {
	if sc.EraHint == nil {
		sc.EraHint = hint
	}
}

// errEndedOnProbe: the server ended when probed with server/discover (a
// 2025 server that takes nothing before initialize).
var errEndedOnProbe = errors.New("server ended when probed")

func (c *Conn) handshake(ctx context.Context, protocol string, era *eraMemo) error {
	if protocol != ProtocolLegacy && !era.legacy.Load() {
		modern, err := c.discover(ctx, protocol)
		switch {
		case err != nil && protocol == ProtocolAuto && errors.Is(err, rpc.ErrClosed) && ctx.Err() == nil:
			// The server ended when asked server/discover: a 2025 server
			// that takes nothing before initialize. Its next start
			// initializes at once.
			era.legacy.Store(true)
			c.log.Info("server ended when probed with server/discover: it is initialized from now on")
			return fmt.Errorf("%w: %w", errEndedOnProbe, err)
		case err != nil:
			return err
		case modern:
			c.log.Info("server speaks MCP " + ModernVersion + ": no initialize, requests carry _meta")
			return nil
		case protocol == ProtocolModern:
			return fmt.Errorf("%w: server/discover did not answer as MCP %s (configured \"protocol\": \"modern\")", lifecycle.ErrCapabilityMissing, ModernVersion)
		}
		era.legacy.Store(true)
	}
	params, _ := json.Marshal(map[string]any{
		"protocolVersion": ProtocolVersion,
		"capabilities":    clientCapabilities,
		"clientInfo":      ClientInfo,
	})
	resp, err := c.rpc.Call(ctx, "initialize", params)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return fmt.Errorf("%w: initialize refused: %s", lifecycle.ErrServerUnavailable, resp.Error.Message)
	}
	init, err := ParseInit(resp.Result)
	if err != nil {
		return err
	}
	if !Supported(init.ProtocolVersion) {
		return fmt.Errorf("%w: server speaks MCP %q, mcpvisor speaks %v", lifecycle.ErrCapabilityMissing, init.ProtocolVersion, SupportedVersions)
	}
	c.init = init
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
