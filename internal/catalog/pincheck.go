package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/drift"
)

// HeldError is CheckTool's error for a tool a pinned server holds back:
// its message is the one the client gets.
type HeldError struct {
	Server, Tool string
	// Unlisted: the server's process does not list the tool at all.
	Unlisted bool
}

func (e *HeldError) Error() string {
	if e.Unlisted {
		return fmt.Sprintf("tool %s of server %s is not served: the server is pinned and does not list it, so no definition of it was approved", e.Tool, e.Server)
	}
	return HeldToolError(e.Server, e.Tool)
}

// Is makes a HeldError match ErrToolHeld.
func (e *HeldError) Is(target error) bool { return target == ErrToolHeld }

// LiveTools is what CheckTool learned of what one instance's process
// lists as its tools: its own piece of state, with its own lock (no
// lifecycle state is read under it, nor it under the instance's). The
// instance keeps it (Process.Tools); the zero value is ready to use and
// costs a pointer until a pinned server's tools are watched.
type LiveTools struct {
	p atomic.Pointer[liveBox] // nil until a pinned server's tools are watched
}

// liveBox holds what LiveTools learned, made once a pinned server's
// tools are first watched: the instance that never is pays one word.
type liveBox struct {
	mu sync.Mutex // guards v and the learns it holds
	v  *liveTools // nil when nothing is watched (again, after Forget)
}

// box is t's box, made now if it was not yet.
func (t *LiveTools) box() *liveBox {
	if b := t.p.Load(); b != nil {
		return b
	}
	return t.claim(&liveBox{})
}

// claim makes b t's box unless another was made first, and returns the
// one made: callers racing to make it all get the same box.
func (t *LiveTools) claim(b *liveBox) *liveBox {
	t.p.CompareAndSwap(nil, b)
	return t.p.Load()
}

// liveTools is what one process of an instance lists as its tools, for
// CheckTool: learned from conn, valid while no list_changed came from the
// instance since the learn began (gen). Made only for a pinned server.
type liveTools struct {
	conn     Conn
	set      drift.Set // nil until a learn succeeds
	setGen   uint64    // gen when the learn of set began
	gen      uint64    // list_changed notifications of the instance, ever
	learning *toolsLearn
}

// toolsLearn is one learn of a process's tools (conn's, begun at the
// instance's list_changed count gen), shared by every toolsOf caller for
// that connection that asks while it runs. It runs on a context of its
// own, not any one caller's: a caller whose context ends leaves without
// ending it for the others; the last caller to leave ends it, and so does
// the fleet's Close.
type toolsLearn struct {
	conn    Conn
	gen     uint64
	done    chan struct{} // closed once set and err are final
	set     drift.Set
	err     error
	waiters int // callers waiting on done; under liveBox.mu
	cancel  context.CancelFunc
}

// Changed records that the instance's process said its tools list
// changed: what was learned of it before is not trusted for a call.
// Counted whatever the pin setting once anything was learned for a pin
// (pinned: the server's setting now; a server unpinned and pinned again
// does not trust a list from before).
func (t *LiveTools) Changed(pinned bool) {
	b := t.p.Load()
	if b == nil && !pinned {
		return // nothing learned, nor to learn
	}
	b = t.box()
	b.mu.Lock()
	if b.v == nil && pinned {
		b.v = &liveTools{}
	}
	if b.v != nil {
		b.v.gen++
	}
	b.mu.Unlock()
}

// sawTools records a list of tools learned from conn, a connection of the
// instance, when the learn began at list_changed count gen (liveGen).
func (t *LiveTools) sawTools(conn Conn, gen uint64, items []json.RawMessage) {
	b := t.p.Load()
	if b == nil {
		return // not pinned
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.v == nil || b.v.learning != nil {
		// Not pinned (or pinned since the learn began: CheckTool learns
		// for itself), or a learn of CheckTool's own is under way.
		return
	}
	if b.v.gen != gen {
		return // a list_changed came meanwhile: older than the process's list
	}
	b.v.conn, b.v.set, b.v.setGen = conn, drift.Index(drift.Tool, items), gen
}

// liveGen is the instance's list_changed count, to give sawTools; ok is
// false when nothing is to be recorded (pinned, the server's setting, is
// false).
func (t *LiveTools) liveGen(pinned bool) (gen uint64, ok bool) {
	if !pinned {
		return 0, false
	}
	b := t.box()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.v == nil {
		b.v = &liveTools{}
	}
	return b.v.gen, true
}

// Forget drops what CheckTool learned of the process: after an unpin and
// a pin again, nothing learned before counts (the lists the process sent
// meanwhile were not watched for it). A learn under way finishes, but
// its list is not kept.
func (t *LiveTools) Forget() {
	b := t.p.Load()
	if b == nil {
		return // nothing learned
	}
	b.mu.Lock()
	if b.v != nil && b.v.learning == nil {
		b.v = nil
	} else if b.v != nil {
		b.v.gen++ // a learn under way: its list is not kept
	}
	b.mu.Unlock()
}

// toolsOf returns the tools p's process lists: those learned from it
// before, unless it said since that they changed, else learned now, once
// for all the callers that ask meanwhile. The learn runs on its own
// context (the caller's values, bounded by the server's request timeout
// and by the fleet's Close): a caller whose ctx ends leaves, bounded by
// that ctx, and the learn goes on for the others; once every caller has
// left it is ended, and the next caller starts a new one. A learn that
// fails is reported to the callers that waited for it; the next caller
// tries again. A learn of another connection of the instance (its process
// before a restart) is waited for, never used; a list_changed during a
// learn makes its callers learn again.
// What is learned goes in the server's cache and definitions like any
// learn: a change is reported as definitions_changed.
func (c *Catalog) toolsOf(ctx context.Context, p Process) (drift.Set, error) {
	b, conn := p.Tools.box(), p.Conn
	for {
		b.mu.Lock()
		if b.v == nil {
			b.v = &liveTools{}
		}
		v := b.v
		if v.learning == nil && v.set != nil && v.conn == conn && v.setGen == v.gen {
			set := v.set
			b.mu.Unlock()
			return set, nil
		}
		l := v.learning
		if l != nil && l.conn != conn {
			// Another process's: one learn at a time; then look again.
			b.mu.Unlock()
			select {
			case <-l.done:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		if l == nil {
			l = c.startToolsLearn(ctx, v, p)
		}
		l.waiters++
		b.mu.Unlock()

		select {
		case <-l.done:
			b.mu.Lock()
			l.waiters--
			stale := v.gen != l.gen
			b.mu.Unlock()
			if l.err != nil {
				return nil, l.err
			}
			if !stale {
				return l.set, nil
			}
			continue // a list_changed came meanwhile: learn again
		case <-ctx.Done():
			b.mu.Lock()
			l.waiters--
			if l.waiters == 0 && v.learning == l {
				// Nobody waits for it any more: end it, and let the next
				// caller start afresh rather than inherit its cancellation.
				v.learning = nil
				l.cancel()
			}
			b.mu.Unlock()
			return nil, context.Cause(ctx)
		}
	}
}

// startToolsLearn starts the learn of p's tools that toolsOf callers
// share; called with its box's mu held. It runs as the fleet's background
// work (Env.Spawn): it ends on its answer, its request timeout, its last
// caller leaving (cancel), the connection's end or the fleet's Close; a
// fleet already closed fails it at once.
func (c *Catalog) startToolsLearn(ctx context.Context, v *liveTools, p Process) *toolsLearn {
	b, conn := p.Tools.box(), p.Conn
	lctx, cancel := config.WithTimeout(context.WithoutCancel(ctx), c.host.Config().RequestTimeout)
	l := &toolsLearn{conn: conn, gen: v.gen, done: make(chan struct{}), cancel: cancel}
	v.learning = l
	// finishLocked makes the learn's outcome final; mu is held.
	finishLocked := func(set drift.Set, err error) {
		l.set, l.err = set, err
		if v.learning == l {
			v.learning = nil
			if err == nil {
				v.conn, v.set, v.setGen = conn, set, l.gen
			}
		}
		close(l.done)
	}
	started := c.env().Spawn(func(fleetCtx context.Context) {
		defer cancel()
		stop := context.AfterFunc(fleetCtx, cancel)
		defer stop()
		set, err := c.learnTools(lctx, p)
		b.mu.Lock()
		finishLocked(set, err)
		b.mu.Unlock()
	})
	if !started {
		cancel()
		finishLocked(nil, fmt.Errorf("server %s: %w", c.name(), c.env().Closed))
	}
	return l
}

// learnTools lists the tools p's process lists, for toolsOf. The shared
// instance's list is a learn like any other: cached, compared with the
// definitions known (a change reported as definitions_changed, and to the
// sessions that see the server). A per-session instance's list is its
// session's alone: it changes nothing of the server's cache, known
// definitions or readiness, and what it holds back that was not seen
// before is kept pending (private) and reported once, with the session
// that saw it. A pinned server that never learned a list of its own yet
// learns its baseline first, from its shared instance (mcpvisor's own),
// never from a client session's process.
func (c *Catalog) learnTools(ctx context.Context, p Process) (drift.Set, error) {
	if p.Session == "" {
		items, changed, err := c.learnFrom(ctx, p.Launched, p.Conn, Tools)
		c.flushDefinitions()
		if err != nil {
			return nil, err
		}
		if changed {
			c.host.ListsChanged([]ListKind{Tools})
		}
		return drift.Index(drift.Tool, items), nil
	}
	d := c.lockDefs()
	baseline := d.approved != nil
	d.mu.Unlock()
	if !baseline {
		if _, err := c.List(ctx, Tools); err != nil {
			return nil, fmt.Errorf("learning the server's own list first: %w", err)
		}
	}
	items, err := fetchList(ctx, c.name(), p.Conn, Tools)
	if err != nil {
		return nil, err
	}
	set := drift.Index(drift.Tool, items)
	d = c.lockDefs()
	news := d.observePrivateLocked(set)
	var held []string
	if len(news) > 0 {
		held = d.heldNamesLocked()
	}
	d.mu.Unlock()
	if len(news) > 0 {
		det := changeDetails(news, held)
		det.Session = p.Session
		c.emit(p.Session, det)
	}
	return set, nil
}

// CheckTool decides whether a call of the tool name (as the server knows
// it) may go to the process p (a lease's: Lease.Process). An unpinned
// server serves every call. A pinned one serves a tool only when the
// definition that very process lists under name is the one the operator
// approved: the list learned from it — learned now, before the call, if
// it was not since the process started or since it said its list changed
// — not a list cached from an earlier process, which a package update
// while the server slept would make stale. A tool the process does not
// list is not served either (its definition was never seen). The error
// wraps ErrToolHeld when the tool is held back, else says why the list
// could not be learned; ctx, bounded here by the server's request timeout
// too, bounds that learn. Safe to call concurrently: concurrent calls on
// one process share one learn.
func (c *Catalog) CheckTool(ctx context.Context, p Process, name string) error {
	cfg := c.host.Config()
	if !cfg.Pin {
		return nil
	}
	if p.Conn == nil || p.Tools == nil {
		return fmt.Errorf("server %s: no MCP connection to check tool %s on", c.name(), name)
	}
	lctx, cancel := config.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	set, err := c.toolsOf(lctx, p)
	if err != nil {
		return fmt.Errorf("server %s is pinned and its tools could not be listed to check %s against the approved definitions: %w", c.name(), name, err)
	}
	cur, listed := set[name]
	d := c.lockDefs()
	a, approved := d.approved[name]
	d.mu.Unlock()
	switch {
	case !listed:
		return &HeldError{Server: c.name(), Tool: name, Unlisted: true}
	case !approved || a.Fingerprint != cur.Fingerprint:
		return &HeldError{Server: c.name(), Tool: name}
	}
	return nil
}
