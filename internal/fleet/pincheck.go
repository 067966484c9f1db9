package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcpvisor/mcpvisor/internal/drift"
)

// ErrToolHeld is matched (errors.Is) by CheckTool's error for a tool a
// pinned server holds back, a *HeldError.
var ErrToolHeld = errors.New("held back until approved")

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

// liveTools is what one process of an instance lists as its tools, for
// CheckTool: learned from conn, valid while no list_changed came from the
// instance since the learn began (gen). Kept by the instance under its mu,
// made only for a pinned server.
type liveTools struct {
	conn     Conn
	set      drift.Set // nil until a learn succeeds
	setGen   uint64    // gen when the learn of set began
	gen      uint64    // list_changed notifications of the instance, ever
	learning chan struct{}
}

// toolsChanged records that the instance's process said its tools list
// changed: what was learned of it before is not trusted for a call.
// Counted whatever the pin setting once anything was learned for a pin
// (a server unpinned and pinned again does not trust a list from before).
func (in *instance) toolsChanged() {
	in.mu.Lock()
	if in.live == nil && in.srv.Config().Pin {
		in.live = &liveTools{}
	}
	if in.live != nil {
		in.live.gen++
	}
	in.mu.Unlock()
}

// sawTools records a list of tools learned from conn, a connection of the
// instance, when the learn began at list_changed count gen (liveGen).
func (in *instance) sawTools(conn Conn, gen uint64, items []json.RawMessage) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.live == nil || in.live.learning != nil {
		// Not pinned (or pinned since the learn began: CheckTool learns
		// for itself), or a learn of CheckTool's own is under way.
		return
	}
	if in.live.gen != gen {
		return // a list_changed came meanwhile: older than the process's list
	}
	in.live.conn, in.live.set, in.live.setGen = conn, drift.Index(drift.Tool, items), gen
}

// liveGen is the instance's list_changed count, to give sawTools; ok is
// false when nothing is to be recorded (the server is not pinned).
func (in *instance) liveGen() (gen uint64, ok bool) {
	if !in.srv.Config().Pin {
		return 0, false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.live == nil {
		in.live = &liveTools{}
	}
	return in.live.gen, true
}

// toolsOf returns the tools conn's process lists: those learned from it
// before, unless it said since that they changed, else learned now, once
// for all the callers that ask meanwhile (a caller whose ctx ends first
// leaves; one whose learn fails leaves the next caller to try again).
// What is learned goes in the server's cache and definitions like any
// learn: a change is reported as definitions_changed.
func (in *instance) toolsOf(ctx context.Context, conn Conn) (drift.Set, error) {
	for {
		in.mu.Lock()
		if in.live == nil {
			in.live = &liveTools{}
		}
		v := in.live
		if v.learning == nil && v.set != nil && v.conn == conn && v.setGen == v.gen {
			set := v.set
			in.mu.Unlock()
			return set, nil
		}
		if ch := v.learning; ch != nil {
			in.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		ch := make(chan struct{})
		v.learning = ch
		gen := v.gen
		in.mu.Unlock()

		set, err := in.learnTools(ctx, conn)

		in.mu.Lock()
		v.learning = nil
		close(ch)
		if err == nil {
			v.conn, v.set, v.setGen = conn, set, gen
		}
		in.mu.Unlock()
		return set, err
	}
}

// learnTools lists the tools conn's process lists, for toolsOf. The
// shared instance's list is a learn like any other: cached, compared with
// the definitions known (a change reported as definitions_changed, and to
// the sessions that see the server). A per-session instance's list is its
// session's alone: it changes nothing of the server's cache, known
// definitions or readiness, and what it holds back that was not seen
// before is kept pending (private) and reported once, with the session
// that saw it. A pinned server that never learned a list of its own yet
// learns its baseline first, from its shared instance (mcpvisor's own),
// never from a client session's process.
func (in *instance) learnTools(ctx context.Context, conn Conn) (drift.Set, error) {
	s := in.srv
	if in.key == "" {
		items, changed, err := s.learnFrom(ctx, conn, Tools)
		s.flushDefinitions()
		if err != nil {
			return nil, err
		}
		if changed {
			s.f.listsChanged(s, []ListKind{Tools})
		}
		return drift.Index(drift.Tool, items), nil
	}
	d := s.lockDefs()
	baseline := d.approved != nil
	d.mu.Unlock()
	if !baseline {
		if _, err := s.List(ctx, Tools); err != nil {
			return nil, fmt.Errorf("learning the server's own list first: %w", err)
		}
	}
	items, err := fetchList(ctx, s.Name(), conn, Tools)
	if err != nil {
		return nil, err
	}
	set := drift.Index(drift.Tool, items)
	d = s.lockDefs()
	news := d.observePrivateLocked(set)
	var held []string
	if len(news) > 0 {
		held = d.heldNamesLocked()
	}
	d.mu.Unlock()
	if len(news) > 0 {
		det := changeDetails(news, held)
		det["session"] = in.key
		s.f.emit(Event{Server: s.Name(), Session: in.key, Type: "definitions_changed", Details: det})
	}
	return set, nil
}

// CheckTool decides whether a call of the tool name (as the server knows
// it) may go to the process l leases. An unpinned server serves every
// call. A pinned one serves a tool only when the definition that very
// process lists under name is the one the operator approved: the list
// learned from it — learned now, before the call, if it was not since the
// process started or since it said its list changed — not a list cached
// from an earlier process, which a package update while the server slept
// would make stale. A tool the process does not list is not served
// either (its definition was never seen). The error wraps ErrToolHeld
// when the tool is held back, else says why the list could not be
// learned; ctx, bounded here by the server's request timeout too, bounds
// that learn. Safe to call concurrently: concurrent calls on one process
// share one learn.
func (s *Server) CheckTool(ctx context.Context, l *Lease, name string) error {
	cfg := s.Config()
	if !cfg.Pin {
		return nil
	}
	if l == nil || l.conn == nil {
		return fmt.Errorf("server %s: no MCP connection to check tool %s on", s.Name(), name)
	}
	lctx, cancel := WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	set, err := l.in.toolsOf(lctx, l.conn)
	if err != nil {
		return fmt.Errorf("server %s is pinned and its tools could not be listed to check %s against the approved definitions: %w", s.Name(), name, err)
	}
	cur, listed := set[name]
	d := s.lockDefs()
	a, approved := d.approved[name]
	d.mu.Unlock()
	switch {
	case !listed:
		return &HeldError{Server: s.Name(), Tool: name, Unlisted: true}
	case !approved || a.Fingerprint != cur.Fingerprint:
		return &HeldError{Server: s.Name(), Tool: name}
	}
	return nil
}

// forgetLiveTools drops what CheckTool learned of each instance's
// process: after an unpin and a pin again, nothing learned before counts
// (the lists the process sent meanwhile were not watched for it).
func (s *Server) forgetLiveTools() {
	for _, in := range s.instances() {
		in.mu.Lock()
		if in.live != nil && in.live.learning == nil {
			in.live = nil
		} else if in.live != nil {
			in.live.gen++ // a learn under way: its list is not kept
		}
		in.mu.Unlock()
	}
}
