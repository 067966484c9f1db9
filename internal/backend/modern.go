package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// A server's protocol era (2026-07-28, basic/versioning). A modern server
// is not initialized: every request carries the protocol version and the
// client's capabilities in params._meta. mcpvisor finds a stdio server's
// era with the probe the stdio transport page describes: server/discover
// first; a DiscoverResult listing ModernVersion makes it modern, any other
// error or no answer within ProbeTimeout legacy.

// ModernVersion is the modern revision mcpvisor speaks to servers.
const ModernVersion = revision.ModernVersion

// Protocol settings of a server (config "protocol").
const (
	ProtocolAuto   = "auto"   // probe with server/discover, else initialize
	ProtocolLegacy = "legacy" // initialize, never probe
	ProtocolModern = "modern" // server/discover, and fail if it is not modern
)

// ProbeTimeout bounds the server/discover probe of an "auto" server: a
// legacy server may not answer a request before initialize at all.
const ProbeTimeout = 3 * time.Second

// The _meta keys of the modern revision.
const (
	metaProtocolVersion = revision.MetaProtocolVersion
	metaClientCaps      = revision.MetaClientCaps
	metaClientInfo      = revision.MetaClientInfo
	metaServerInfo      = revision.MetaServerInfo
)

// ownMeta is the _meta of mcpvisor's own requests to a modern server (list
// fetches, pings of its own): it asks for nothing from a client.
var ownMeta = json.RawMessage(`{"` + metaProtocolVersion + `":"` + ModernVersion + `","` + metaClientCaps + `":{},"` + metaClientInfo + `":` + string(ClientInfo) + `}`)

// eraMemo is what one connector learned of its server's era, so that
// later starts need not find it again: a legacy server is initialized at
// once instead of probed (a legacy server that exits on an unknown
// request would otherwise be probed into a restart loop), and a dual-era
// server's versions are known at its next start (dual.go).
type eraMemo struct {
	mu       sync.Mutex
	era      Era
	versions []string // the versions the server was found to speak (InitResult.SupportedVersions)
}

// get is what the memo knows: the era, and the versions of a server that
// answered a probe.
func (e *eraMemo) get() (Era, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.era, e.versions
}

// set records era, with the versions a probe found (nil: none found).
func (e *eraMemo) set(era Era, versions []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.era, e.versions = era, versions
}

// learn takes what the last run's initialize result (as the fleet cached
// it: Era) says, if the memo knows nothing yet, and returns what it knows.
func (e *eraMemo) learn(last func() json.RawMessage) (Era, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.era == EraUnknown && last != nil {
		if raw := last(); raw != nil {
			if init, err := ParseInit(raw); err == nil {
				e.era, e.versions = init.Era(), init.SupportedVersions
			}
		}
	}
	return e.era, e.versions
}

// knownLegacy reports whether the server turned out legacy before: in this
// connector's life, or (hint, if set: the protocol version it last spoke)
// when it last ran. A remote server's connector reads it.
func (e *eraMemo) knownLegacy(hint func() string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.era != EraLegacy && hint != nil {
		if v := hint(); v != ModernVersion && Supported(v) {
			e.era = EraLegacy
		}
	}
	return e.era == EraLegacy
}

// discover probes the server with server/discover. modern reports whether
// it answered as a modern server, in which case c.init describes it; a
// legacy answer (any error that is not a modern one, or no answer within
// the probe bound) gives modern false and err nil.
func (c *Conn) discover(ctx context.Context, protocol string) (modern bool, err error) {
	params := json.RawMessage(`{"_meta":` + string(ownMeta) + `}`)
	pctx := ctx
	if protocol != ProtocolModern {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, ProbeTimeout)
		defer cancel()
	}
	resp, err := c.rpc.Call(pctx, "server/discover", params)
	switch {
	case err != nil && ctx.Err() == nil && pctx.Err() != nil:
		return false, nil // no answer within the probe bound: legacy
	case err != nil:
		return false, err
	}
	init, err := discoverResult(resp)
	if init == nil || err != nil {
		return false, err
	}
	c.init.Store(init)
	c.modern = true
	return true, nil
}

// discoverResult reads the answer to server/discover: a modern server's
// description, as the initialize result of ModernVersion it stands for;
// nil for a legacy answer (an error that is not a modern one, a result
// that does not list ModernVersion); or an error for a modern server of
// another revision.
func discoverResult(resp *rpc.Message) (*InitResult, error) {
	switch {
	case resp.Error != nil && resp.Error.Code == rpc.UnsupportedProtocolVersion:
		return nil, fmt.Errorf("%w: server speaks a modern MCP other than %s: %s", lifecycle.ErrCapabilityMissing, ModernVersion, resp.Error.Message)
	case resp.Error != nil:
		return nil, nil // a legacy server's refusal
	}
	var res struct {
		SupportedVersions []string                   `json:"supportedVersions"`
		Capabilities      json.RawMessage            `json:"capabilities"`
		Instructions      string                     `json:"instructions"`
		Meta              map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(resp.Result, &res); err != nil || !slices.Contains(res.SupportedVersions, ModernVersion) {
		return nil, nil
	}
	raw, _ := json.Marshal(map[string]any{
		"protocolVersion":   ModernVersion,
		"capabilities":      nonNull(res.Capabilities),
		"serverInfo":        nonNull(res.Meta[metaServerInfo]),
		"instructions":      res.Instructions,
		"supportedVersions": res.SupportedVersions,
	})
	return ParseInit(raw)
}

func nonNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage(`{}`)
	}
	return v
}

// Modern reports whether the server speaks the modern revision: its
// requests carry _meta (mcpvisor adds its own where a request has none).
func (c *Conn) Modern() bool { return c.modern }

// withOwnMeta gives a request to a modern server the _meta it must carry
// when it has none: mcpvisor's own.
func withOwnMeta(params json.RawMessage) json.RawMessage {
	if meta := rpc.Member(params, "_meta"); meta != nil {
		if _, ok := rpc.StringMember(meta, metaProtocolVersion); ok {
			return params
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(meta, &m) != nil {
			return params
		}
		var own map[string]json.RawMessage
		_ = json.Unmarshal(ownMeta, &own)
		for k, v := range own {
			if _, ok := m[k]; !ok {
				m[k] = v
			}
		}
		b, _ := json.Marshal(m)
		out, _ := rpc.ReplaceMember(params, "_meta", b)
		return out
	}
	return rpc.SetMember(params, "_meta", ownMeta)
}

// listenParams are the params of mcpvisor's subscriptions/listen: the
// list changes the server's capabilities promise and the resources subs;
// nil if there is nothing to listen for.
func (c *Conn) listenParams(subs []string) json.RawMessage {
	var caps map[string]struct {
		ListChanged bool `json:"listChanged"`
	}
	_ = json.Unmarshal(c.Init().Capabilities, &caps)
	filter := map[string]any{}
	for k, name := range map[string]string{"tools": "toolsListChanged", "prompts": "promptsListChanged", "resources": "resourcesListChanged"} {
		if caps[k].ListChanged {
			filter[name] = true
		}
	}
	if len(subs) > 0 {
		filter["resourceSubscriptions"] = subs
	}
	if len(filter) == 0 {
		return nil
	}
	params, _ := json.Marshal(map[string]any{"notifications": filter, "_meta": ownMeta})
	return params
}

// listening is mcpvisor's subscriptions/listen on a modern server.
type listening struct {
	mu      sync.Mutex
	subs    []string           // the resources it names, sorted
	cancel  context.CancelFunc // ends the loop of the one open
	done    chan struct{}      // closed when that loop, and every one before it, has returned
	started bool               // the connection has begun listening
	ended   bool               // the connection has ended: no listen opens any more
	// stale: a listen ended while the connection lived on, so what it
	// carries may have been missed until the next one is acknowledged.
	stale bool
}

// startListen opens mcpvisor's subscriptions/listen on a modern server —
// for the list changes its capabilities promise and the resources
// subscribed to (SetResourceSubscriptions) — so that they reach the hooks
// as they do from a legacy server, ending the one open before: the new
// one is opened once the loop of that one has returned, so that there are
// never two. A listen the server ends is opened again (keepListening). A
// listen lasts as long as the connection, and no longer: it ends when
// mcpvisor begins to close the connection or the stream ends, and the
// connection does not count as ended (Done) before it has (endListen).
func (c *Conn) startListen() {
	c.lst.mu.Lock()
	defer c.lst.mu.Unlock()
	c.lst.started = true
	if c.lst.cancel != nil {
		c.lst.cancel()
		c.lst.cancel = nil
	}
	if c.lst.ended || c.listenParams(c.lst.subs) == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	prev, done := c.lst.done, make(chan struct{})
	c.lst.cancel, c.lst.done = cancel, done
	go func() {
		defer close(done)
		defer cancel()
		if prev != nil {
			<-prev // cancelled above: it returns at once
		}
		ended := make(chan struct{})
		defer close(ended)
		go func() { // ends the listen with the connection, and no later than it
			select {
			case <-c.closeReq:
			case <-c.rpc.Done():
			case <-ended:
			}
			cancel()
		}()
		c.keepListening(ctx)
	}()
}

// keepListening keeps mcpvisor's subscriptions/listen open on a modern
// server until ctx ends or the connection does. The server may end it
// while the connection lives on — with its result (a server whose stream
// to mcpvisor filled up ends it so, for mcpvisor to fetch what it missed)
// or an error (one of its own, or, for a remote server, a stream that
// dropped: a proxy's idle timeout, a restart of a stateless server) — and
// it is opened again, with the subscriptions of the moment: at once when
// it lasted listenHealthy, else after a wait growing from listenDelay,
// doubling, to listenMaxDelay. What it would have carried in between is
// told to the hooks when the next one is acknowledged (listenAcknowledged).
// A remote server that cannot be reached any more ends the connection (the
// connStream fails it on the POST's network error).
func (c *Conn) keepListening(ctx context.Context) {
	quick := 0 // listens in a row that ended before listenHealthy
	for {
		c.lst.mu.Lock()
		params := c.listenParams(c.lst.subs)
		c.lst.mu.Unlock()
		if params == nil {
			return
		}
		start := time.Now()
		resp, err := c.rpc.Call(ctx, "subscriptions/listen", params)
		// Whatever ended it — the server, or mcpvisor opening the next
		// with new subscriptions — the server's notifications until the
		// next is acknowledged may be missed: that one is followed by a
		// catch-up (listenAcknowledged). After the connection's end none
		// opens.
		c.lst.mu.Lock()
		c.lst.stale = true
		c.lst.mu.Unlock()
		if ctx.Err() != nil || errors.Is(err, rpc.ErrClosed) {
			return
		}
		level, msg := slog.LevelInfo, "a modern server ended subscriptions/listen; listening again"
		switch {
		case err != nil:
			level, msg = slog.LevelWarn, "subscriptions/listen on a modern server failed; listening again"
		case resp.Error != nil && resp.Error.Code == rpc.BackendUnavailable:
			level, msg, err = slog.LevelDebug, "the stream of subscriptions/listen on a modern server ended; listening again", errors.New(resp.Error.Message)
		case resp.Error != nil:
			level, msg, err = slog.LevelWarn, "a modern server refused subscriptions/listen; listening again", errors.New(resp.Error.Message)
		}
		if quick > 0 {
			level = slog.LevelDebug // a run of quick ends is told once
		}
		var attrs []any
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		c.log.Log(ctx, level, msg, attrs...)
		if time.Since(start) >= listenHealthy {
			quick = 0
			continue
		}
		t := time.NewTimer(min(listenDelay<<min(quick, 16), listenMaxDelay))
		quick++
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// endListen ends mcpvisor's listen with the connection: none opens any
// more, and it returns once the loop of the one open has returned. The
// connection's goroutine calls it when the stream has ended, before the
// connection counts as ended.
func (c *Conn) endListen() {
	c.lst.mu.Lock()
	c.lst.ended = true
	if c.lst.cancel != nil {
		c.lst.cancel()
		c.lst.cancel = nil
	}
	done := c.lst.done
	c.lst.mu.Unlock()
	if done != nil {
		<-done
	}
}

// listenFilter is the notifications of a subscriptions/listen: those it
// asks for, or those the server's acknowledgement agrees to.
type listenFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged"`
	PromptsListChanged    bool     `json:"promptsListChanged"`
	ResourcesListChanged  bool     `json:"resourcesListChanged"`
	ResourceSubscriptions []string `json:"resourceSubscriptions"`
}

// listenAcknowledged takes the server's acknowledgement of a listen
// (notifications/subscriptions/acknowledged, params ack). When a listen
// ended before it (keepListening), it returns what the hooks are told for
// what may have been missed meanwhile, on the read goroutine after the
// acknowledgement itself: a list change of each list the listen watches,
// an update of each resource it names (as the acknowledgement agrees, or,
// if it says nothing, as the listen asked). From then on the listen
// carries the changes, so those the hooks fetch again are not missed.
func (c *Conn) listenAcknowledged(ack json.RawMessage) []*rpc.Message {
	c.lst.mu.Lock()
	stale := c.lst.stale
	c.lst.stale = false
	var asked json.RawMessage
	if stale {
		asked = c.listenParams(c.lst.subs)
	}
	c.lst.mu.Unlock()
	if !stale {
		return nil
	}
	var f listenFilter
	if n := rpc.Member(ack, "notifications"); n == nil || json.Unmarshal(n, &f) != nil {
		f = listenFilter{}
		_ = json.Unmarshal(rpc.Member(asked, "notifications"), &f)
	}
	var out []*rpc.Message
	for _, k := range []struct {
		on     bool
		method string
	}{
		{f.ToolsListChanged, "notifications/tools/list_changed"},
		{f.PromptsListChanged, "notifications/prompts/list_changed"},
		{f.ResourcesListChanged, "notifications/resources/list_changed"},
	} {
		if k.on {
			out = append(out, &rpc.Message{Method: k.method})
		}
	}
	for _, uri := range f.ResourceSubscriptions {
		params, _ := json.Marshal(map[string]string{"uri": uri})
		out = append(out, &rpc.Message{Method: "notifications/resources/updated", Params: params})
	}
	return out
}

// SetResourceSubscriptions makes uris the resources mcpvisor's listen on a
// modern server names: the listen is opened again with them when they
// changed. A legacy server's subscriptions are its requests', and this
// does nothing.
func (c *Conn) SetResourceSubscriptions(uris []string) {
	if !c.modern {
		return
	}
	uris = slices.Clone(uris)
	slices.Sort(uris)
	c.lst.mu.Lock()
	same := slices.Equal(c.lst.subs, uris)
	c.lst.subs = uris
	started := c.lst.started
	c.lst.mu.Unlock()
	if !same && started {
		c.startListen()
	}
}
