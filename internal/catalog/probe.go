package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/json"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/drift"
)

// Probe reaches into a catalog's state for the fleet's tests: those that
// drive the catalog through the fleet's lifecycle (a wake, a reload, a
// dormancy) and then look at what it holds, or take one of its steps on
// their own. Nothing but tests uses it; each method is the unexported
// step or field it names.
type Probe struct{ c *Catalog }

// ProbeOf is the Probe of c.
func ProbeOf(c *Catalog) Probe { return Probe{c} }

// InitState is what the lists hold of the initialize result: the bytes in
// memory, whether it is cold, and whether it is known to be on disk under
// the server's current launch hash.
func (p Probe) InitState() (raw string, cold, saved bool) {
	cur, _ := p.c.launchKey()
	l := &p.c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.init, l.initCold, sameLaunch(l.initHash, cur)
}

// Held reports how many lists are in memory, and the initialize result
// in memory.
func (p Probe) Held() (lists int, init string) {
	l := &p.c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items), l.init
}

// ListHeld reports whether the list of kind k is in memory.
func (p Probe) ListHeld(k ListKind) bool {
	l := &p.c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.items[k.Member]
	return ok
}

// Unsaved reports whether the list of kind k is held from an earlier
// launch.
func (p Probe) Unsaved(k ListKind) bool {
	l := &p.c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unsaved.has(k)
}

// Definitions reports whether the definitions are cold, and whether they
// are in memory.
func (p Probe) Definitions() (cold, inMemory bool) {
	d := p.c.defs()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cold, d.defsMem != nil
}

// KnownTool is the fingerprint of the known definition of tool name.
func (p Probe) KnownTool(name string) string {
	d := p.c.lockDefs()
	defer d.mu.Unlock()
	return d.known[drift.Tool][name].Fingerprint
}

// DirtyUnapproved forgets every approval and marks the definitions to be
// persisted, as a change would.
func (p Probe) DirtyUnapproved() {
	d := p.c.lockDefs()
	d.approved = nil
	d.dirty = true
	d.mu.Unlock()
}

// FlushDefinitions is flushDefinitions.
func (p Probe) FlushDefinitions() { p.c.flushDefinitions() }

// LaunchKey is launchKey.
func (p Probe) LaunchKey() ([sha256.Size]byte, bool) { return p.c.launchKey() }

// Relaunched is lists.relaunched, without warmLists.
func (p Probe) Relaunched(swap func()) { p.c.lists.relaunched(swap) }

// SpillLists is spillLists.
func (p Probe) SpillLists() { p.c.spillLists() }

// WarmLists is warmLists.
func (p Probe) WarmLists() { p.c.warmLists() }

// LearnFrom is learnFrom.
func (p Probe) LearnFrom(ctx context.Context, launched *config.Server, conn Conn, k ListKind) ([]json.RawMessage, bool, error) {
	return p.c.learnFrom(ctx, launched, conn, k)
}

// PutInit is lists.putInit.
func (p Probe) PutInit(raw json.RawMessage, cur [sha256.Size]byte, gen uint64) bool {
	return p.c.lists.putInit(raw, cur, gen)
}

// InitToWrite is lists.initToWrite.
func (p Probe) InitToWrite(hash [sha256.Size]byte) (json.RawMessage, uint16, bool) {
	raw, seq, ok := p.c.lists.initToWrite(hash)
	return raw, uint16(seq), ok
}

// InitWritten is lists.initWritten.
func (p Probe) InitWritten(seq uint16, hash [sha256.Size]byte) {
	p.c.lists.initWritten(change(seq), hash)
}

// Generation is lists.generation.
func (p Probe) Generation() uint64 { return p.c.lists.generation() }

// PutIf is putIf (the change's number left out).
func (p Probe) PutIf(gen uint64, k ListKind, items []json.RawMessage) (stored, changed bool) {
	stored, changed, _ = p.c.putIf(gen, k, items)
	return stored, changed
}

// Put is lists.put.
func (p Probe) Put(k ListKind, items []json.RawMessage) { p.c.lists.put(k, items) }

// Drop is lists.drop.
func (p Probe) Drop(k ListKind) { p.c.lists.drop(k) }

// ToolsOf is toolsOf, on the process pr.
func (p Probe) ToolsOf(ctx context.Context, pr Process) (drift.Set, error) {
	return p.c.toolsOf(ctx, pr)
}

// LiveConn is the connection whose list t holds (nil: none).
func LiveConn(t *LiveTools) Conn {
	b := t.p.Load()
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.v == nil {
		return nil
	}
	return b.v.conn
}
