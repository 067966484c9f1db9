package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Dual-era stdio servers (2026-07-28, basic/versioning: "Dual-era"). A
// server that speaks both eras should serve each request in the era of
// the client that sent it: a legacy client's call with the server's own
// server→client requests, a modern client's with input_required results.
// The reference SDKs bind the era to the stdio connection, not to the
// request: the go-sdk's server (v1.8) serves every request of an
// initialized connection as a legacy one — a request carrying modern
// _meta included: its sampling is sent as a request, its input_required
// results are fulfilled by requests of its own (mcp/mrtr.go) — and once
// server/discover or a modern request came first, it refuses initialize
// ("duplicate initialize") and a legacy call's sampling; the TypeScript
// SDK's binds an instance to the era of its first exchange. So mcpvisor
// gives a dual-era stdio server a process per era:
//
//   - the one the supervisor starts (the primary) is initialized: legacy
//     clients' requests and mcpvisor's own (lists, subscriptions, log
//     levels, roots) go to it, and all it sends on its own comes from it;
//   - a second one (the twin), started when a modern client's request
//     first needs it and probed with server/discover, serves modern
//     clients' requests: it is sent nothing else, and what it would send
//     of lists and subscriptions (which only a listen asks for) is
//     dropped, so that a client never gets a change twice.
//
// The twin's probe is the era probe of an "auto" server: a server that
// does not answer it as modern speaks the legacy revisions only, its
// modern clients' calls are held on the primary (MRTR), and no twin starts
// again; one that does is dual-era. Either is recorded in the primary's
// initialize result (SupportedVersions), which the fleet keeps with the
// server's lists: the next start knows. A server that refuses initialize
// is probed on the same process and, if modern, served as modern-only:
// legacy clients are translated (fulfil), no twin.

// Era is what mcpvisor knows of the protocol eras a server speaks.
type Era uint8

const (
	EraUnknown Era = iota // not probed yet
	EraLegacy             // the legacy revisions only (initialize)
	EraModern             // ModernVersion only (server/discover; initialize refused)
	EraDual               // both: initialized, and modern clients served by a second process
)

func (e Era) String() string {
	switch e {
	case EraLegacy:
		return "legacy"
	case EraModern:
		return "modern"
	case EraDual:
		return "dual"
	}
	return "unknown"
}

// Era is what the result records of the server's eras: a modern server's
// (server/discover's, ProtocolVersion ModernVersion) is modern-only once
// it lists its versions; an initialized server's is dual when its versions
// include ModernVersion, legacy when they do not. A result that lists no
// versions (never probed, or recorded before mcpvisor kept them) is
// unknown.
func (r *InitResult) Era() Era {
	switch {
	case r.SupportedVersions == nil:
		return EraUnknown
	case r.ProtocolVersion == ModernVersion:
		return EraModern
	case slices.Contains(r.SupportedVersions, ModernVersion):
		return EraDual
	}
	return EraLegacy
}

// EraOf is the Era that raw, an initialize result as the fleet keeps it,
// records; EraUnknown if raw cannot be read.
func EraOf(raw json.RawMessage) Era {
	r, err := ParseInit(raw)
	if err != nil {
		return EraUnknown
	}
	return r.Era()
}

// withVersions is r recording versions as those the server was found to
// speak (a copy: results are shared read-only).
func (r *InitResult) withVersions(versions []string) *InitResult {
	raw := rpc.SetMember(r.Raw, "supportedVersions", mustMarshal(versions))
	out, err := ParseInit(raw)
	if err != nil {
		return r
	}
	return out
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// DefaultTwinTimeout bounds the start of a dual-era server's process for
// modern clients, as the default init timeout bounds a start.
const DefaultTwinTimeout = 30 * time.Second

// twin is the process a dual-era server's primary connection starts for
// its modern clients.
type twin struct {
	sc   *StdioConnector
	spec proc.Spec // the primary's, as it was spawned

	// streak is the twin's crash loop: starts that failed and twins that
	// ended before they answered a client, in a row, spaced by the
	// server's restart policy (StdioConnector.RetryDelay).
	streak lifecycle.Streak

	mu       sync.Mutex
	enabled  bool       // the handshake initialized an "auto" server: a twin may start
	conn     *Conn      // the twin, once started (it may have ended since)
	starting *twinStart // the start under way; nil: none
	closed   bool       // the primary is ending: none starts any more
}

// twinStart is one start of a twin: its waiters get its outcome.
type twinStart struct {
	done   chan struct{} // closed when it ended
	err    error         // why it failed; set before done closes
	cancel context.CancelFunc
}

// ModernConn is the connection a modern client's request to the server
// goes to: c itself for a modern-only server; nil for one that speaks
// only the legacy revisions (the call is held on c); for a dual-era
// one, its process for modern clients, started (and, the first time,
// probed) when the first such request needs it. Concurrent callers share
// one start and its outcome; ctx bounds the wait, not the start
// (TwinTimeout does). Starts that failed and twins that ended before they
// answered a client are a crash loop, as the primary's are: from the
// second in a row, ModernConn returns a *lifecycle.CrashLoopError at once
// until the policy's next attempt is due.
func (c *Conn) ModernConn(ctx context.Context) (*Conn, error) {
	if c.modern {
		return c, nil
	}
	t := c.tw
	if t == nil {
		return nil, nil
	}
	for {
		if era, _ := t.sc.era.get(); era == EraLegacy || era == EraModern {
			return nil, nil
		}
		t.mu.Lock()
		if tc := t.conn; tc != nil {
			if tc.Alive() {
				t.mu.Unlock()
				return tc, nil
			}
			// It ended: a run that answered no client is a failure.
			t.conn = nil
			if tc.Answered() {
				t.streak.Reset()
			} else {
				t.streak.Fail(fmt.Errorf("its process for MCP %s clients ended before it answered", ModernVersion), t.sc.retryDelay)
			}
		}
		switch {
		case !t.enabled:
			t.mu.Unlock()
			return nil, nil
		case t.closed:
			t.mu.Unlock()
			return nil, fmt.Errorf("server %s: %w", c.name, rpc.ErrClosed)
		case t.starting == nil:
			if err := t.streak.CrashLoop(c.name); err != nil {
				t.mu.Unlock()
				return nil, err
			}
			st := &twinStart{done: make(chan struct{})}
			var sctx context.Context
			sctx, st.cancel = context.WithTimeout(context.Background(), orDefault(t.sc.TwinTimeout, DefaultTwinTimeout))
			t.starting = st
			go c.startTwin(sctx, st)
		}
		st := t.starting
		t.mu.Unlock()
		select {
		case <-st.done:
			if st.err != nil {
				return nil, st.err // the outcome of the start it waited for
			}
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// orDefault is d, or def when d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// startTwin starts the twin of c within ctx and records how that went,
// then closes done. The first start of a server whose era is unknown is
// its probe: what it finds goes in c's result and the connector's memo
// (before a waiter sees it), and OnEra is told (before done closes: no
// work of a start outlives endTwin).
func (c *Conn) startTwin(ctx context.Context, st *twinStart) {
	t := c.tw
	defer close(st.done)
	tc, err := t.sc.startModern(ctx, t.spec)
	learned := EraUnknown
	t.mu.Lock()
	st.cancel()
	t.starting = nil
	switch {
	case err != nil:
		st.err = fmt.Errorf("server %s: its process for MCP %s clients did not start: %w", c.name, ModernVersion, err)
		t.streak.Fail(err, t.sc.retryDelay)
		c.log.Warn("a dual-era server's process for modern clients did not start", "err", err)
	case tc == nil:
		// Not modern: the legacy revisions only.
		learned = EraLegacy
		t.sc.recordEra(c, EraLegacy, []string{c.Init().ProtocolVersion})
		c.log.Info("server does not speak MCP " + ModernVersion + ": its modern clients' calls are held")
	default:
		t.conn = tc // if the primary is ending, endTwin closes it
		if era, _ := t.sc.era.get(); era != EraDual {
			learned = EraDual
			t.sc.recordEra(c, EraDual, tc.Init().SupportedVersions)
		}
		c.log.Info("dual-era server: a second process serves its MCP "+ModernVersion+" clients", "pid", tc.Process().Pid())
	}
	t.mu.Unlock()
	if learned != EraUnknown && t.sc.OnEra != nil {
		t.sc.OnEra(c)
	}
}

// recordEra records era, with versions, in c's result and the
// connector's memo.
func (sc *StdioConnector) recordEra(c *Conn, era Era, versions []string) {
	sc.era.set(era, versions)
	c.init.Store(c.Init().withVersions(versions))
}

// learnedLegacy records, during c's handshake, that its server was found
// to speak the legacy revisions only (a probe it did not answer as
// modern): in c's result, with the version it was initialized at, in the
// memo, and to OnEra, for the server's other instances too.
func (sc *StdioConnector) learnedLegacy(c *Conn) {
	sc.recordEra(c, EraLegacy, []string{c.Init().ProtocolVersion})
	if sc.OnEra != nil {
		sc.OnEra(c)
	}
}

// startModern starts spec as a modern server's process: probed with
// server/discover, and nothing else. It returns nil and no error when the
// server is not a modern one (it refused the probe, did not answer it
// within ProbeTimeout, or ended on it).
func (sc *StdioConnector) startModern(ctx context.Context, spec proc.Spec) (*Conn, error) {
	var hooks Hooks
	if sc.Hooks != nil {
		hooks = twinHooks{sc.Hooks}
	}
	tc, err := sc.spawn(ctx, spec, hooks, nil)
	if err != nil {
		return nil, err
	}
	modern, err := tc.discover(ctx, ProtocolAuto)
	if err == nil && modern {
		return tc, nil
	}
	_ = tc.CloseContext(ctx)
	switch {
	case err == nil, errors.Is(err, lifecycle.ErrCapabilityMissing):
		return nil, nil // refused or unanswered, or a modern revision other than mcpvisor's
	case errors.Is(err, rpc.ErrClosed) && ctx.Err() == nil:
		return nil, nil // ended on the probe: a strict legacy server
	}
	return nil, err
}

// twinHooks are the hooks of a dual-era server's process for modern
// clients. The list changes and resource updates it would send belong to
// a listen, which only the primary has: they come from there.
type twinHooks struct{ h Hooks }

func (t twinHooks) Notification(c *Conn, m *rpc.Message) {
	switch m.Method {
	case "notifications/tools/list_changed", "notifications/prompts/list_changed",
		"notifications/resources/list_changed", "notifications/resources/updated":
		return
	}
	t.h.Notification(c, m)
}

func (t twinHooks) Request(c *Conn, m *rpc.Message) { t.h.Request(c, m) }

// enable lets t start: its connection's handshake initialized an "auto"
// server, which may speak the modern revision too.
func (t *twin) enable() {
	t.mu.Lock()
	t.enabled = true
	t.mu.Unlock()
}

// ModernProcess is the process of a dual-era server that serves its
// modern clients, nil when none runs.
func (c *Conn) ModernProcess() *proc.Process {
	if t := c.RunningTwin(); t != nil {
		return t.proc
	}
	return nil
}

// RunningTwin is the process for modern clients of c, a dual-era
// server's connection, while it runs; nil otherwise (none is started).
func (c *Conn) RunningTwin() *Conn {
	t := c.tw
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil || !t.conn.Alive() {
		return nil
	}
	return t.conn
}

// endTwin ends c's twin with c, within ctx (once ctx ends, its tree is
// killed at once): a start under way is cancelled and waited for, and no
// twin starts any more.
func (c *Conn) endTwin(ctx context.Context) {
	t := c.tw
	if t == nil {
		return
	}
	t.mu.Lock()
	t.closed = true
	starting := t.starting
	if starting != nil {
		starting.cancel()
	}
	t.mu.Unlock()
	if starting != nil {
		<-starting.done
	}
	t.mu.Lock()
	tc := t.conn
	t.mu.Unlock()
	if tc != nil {
		_ = tc.CloseContext(ctx)
	}
}
