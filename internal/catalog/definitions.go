package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/drift"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// defs is what the catalog knows of one server's definitions — its tools,
// prompts and resource templates as last learned, the tools the operator
// approved, and the last change — for drift reports and pinning. It is
// persisted by server name alone (store.Definitions): it outlives a
// change of the server's launch and a restart of mcpvisor, so a change
// across either is a change too. The Catalog owns it; every change goes
// through its methods under mu.
type defs struct {
	mu sync.Mutex // guards every field but writeMu's: the readers of every pinned call take it
	// defsMem is the definitions in memory; nil while cold.
	*defsMem
	// lost is how many tools the server had when a relearn found none
	// (0: not lost); lostNews and restored are its event to report.
	lost     int
	restored int
	// gen numbers the records made to persist (under mu); they are
	// written outside mu, one at a time under writeMu, and a record
	// older than the one written last (written) is dropped: the disk
	// write never holds up the readers of mu (every pinned call).
	gen     uint64
	writeMu sync.Mutex // one disk write at a time; guards written and stored
	written uint64
	// stored is the gen of the last record written without error (under
	// writeMu).
	stored uint64
	// pending, while cold: how many tools are held back
	// (heldNamesLocked).
	pending  int
	lostNews bool
	dirty    bool // to persist at the next flush
	// cold is set while the definitions are not in memory (defsMem is
	// nil) but only in the persisted record — a server gone dormant,
	// everything it knows written (Catalog.spillDefs) — with lost and
	// pending still here: Catalog.lockDefs reads the rest back before
	// anything looks at it. A dormant server keeps only this much of its
	// definitions in memory.
	cold bool
	// retired is set, under writeMu, when a reload removes the server:
	// nothing of it is written after, so that a server added again under
	// its name owns the record (its writes are not undone by a late one
	// of the removed server's refresher).
	retired bool
}

// defsMem is what defs holds of the definitions while they are in
// memory.
type defsMem struct {
	// known are the definitions last learned of each kind; a kind never
	// learned is absent. items are the same, as the server sent them (for
	// the record).
	known map[drift.Kind]drift.Set
	items map[drift.Kind][]json.RawMessage
	// approved are the tool definitions the operator approved (by
	// fingerprint): a pinned server lists and serves only those. nil
	// until the first list of tools is learned, which is approved as it
	// is (trust on first use). An unpinned server's follow what it lists.
	approved drift.Set
	// private are tool definitions seen only on per-session processes —
	// a client session's own, never the cache's — that are not approved
	// and not the ones known: held, and pending approval like the known
	// ones (the known one is shown first when both are held). The latest
	// seen under each name is kept.
	private map[string]drift.Def
	// last is the last change reported, and when.
	last      []drift.Change
	changedAt time.Time
	// unreported are the changes observed and not yet reported (flush).
	unreported []drift.Change
}

// Retire ends the server's writes of its definitions record; a write
// under way finishes first. A reload that removes the server calls it, so
// that a server added again under its name owns the record.
func (c *Catalog) Retire() {
	d := c.defs()
	d.writeMu.Lock()
	d.retired = true
	d.writeMu.Unlock()
}

// lockDefs locks the server's definitions, read back from the persisted
// record first if they were put out of memory (spillDefs), and returns
// them; the caller unlocks d.mu. A record that cannot be read back is
// logged, and nothing is approved any more: the server's next list is the
// baseline of what is known, and a pinned server holds its tools until
// the operator approves them again.
func (c *Catalog) lockDefs() *defs {
	d := c.defs()
	d.mu.Lock()
	if d.cold {
		d.cold, d.pending, d.defsMem = false, 0, &defsMem{}
		raw := c.env().Store.Definitions(c.name())
		err := d.loadLocked(raw)
		if raw == nil && err == nil {
			err = errors.New("the record is gone")
		}
		if err != nil {
			// Fail closed: with the approvals unknown, nothing is approved
			// (a pinned server's tools are held until approved again); the
			// next list is the baseline of what is known.
			d.known, d.items, d.approved = nil, nil, drift.Set{}
			c.env().Log.Warn("could not read a server's definitions back from the state file: its tools are held until approved again if it is pinned", "server", c.name(), "err", err)
		}
	}
	return d
}

// spillDefs puts the server's definitions out of memory, for lockDefs to
// read back from the persisted record when they are needed: only when
// that record holds all of them — written without error, nothing changed
// since, nothing to report — and none is a per-session process's own
// (never persisted). A dormant server needs none of them until it lists
// or is asked about them; its lost count and held count stay here.
func (c *Catalog) spillDefs() {
	d := c.dp.Load()
	if d == nil || c.env().Store == nil {
		return
	}
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cold || d.retired || d.known == nil || d.dirty || d.stored != d.gen ||
		len(d.unreported) > 0 || d.lostNews || d.restored > 0 || len(d.private) > 0 {
		return
	}
	d.coldLocked(len(d.heldNamesLocked()))
}

// coldLocked puts the definitions out of memory, keeping what a status
// shows of them: pending, the count of held tools (lost stays as it is).
// The persisted record holds the rest; lockDefs reads it back. mu is held.
func (d *defs) coldLocked(pending int) {
	d.defsMem = nil
	d.cold, d.pending = true, pending
}

// putDefinitions writes the server's definitions record rec to st
// (through Env.putDefs when a test set it).
func (c *Catalog) putDefinitions(st *store.Store, rec json.RawMessage) error {
	if put := c.env().putDefs; put != nil {
		return put(st, c.name(), rec)
	}
	return st.PutDefinitions(c.name(), rec)
}

// driftKind is the definition kind of a list, or "" for resources (their
// items are data, not definitions).
func driftKind(k ListKind) drift.Kind {
	switch k {
	case Tools:
		return drift.Tool
	case Prompts:
		return drift.Prompt
	case Templates:
		return drift.ResourceTemplate
	}
	return ""
}

// defsRecord is the persisted form of defs.
type defsRecord struct {
	V         int                              `json:"v"`
	Known     map[drift.Kind][]json.RawMessage `json:"known,omitempty"`
	Approved  []json.RawMessage                `json:"approved,omitempty"`
	Last      []drift.Change                   `json:"last,omitempty"`
	ChangedAt time.Time                        `json:"changedAt,omitzero"`
	Lost      int                              `json:"lost,omitempty"`
	// Held is how many known tools are held back (heldLocked): what a
	// server whose definitions stay on disk reports without reading
	// them (coldSummary). Records written before it was kept lack it.
	Held *int `json:"held,omitempty"`
}

// defsSummary is the part of a record that a server whose definitions
// stay on disk keeps in memory.
type defsSummary struct {
	V    int  `json:"v"`
	Held *int `json:"held"`
	Lost int  `json:"lost"`
}

func (d *defs) recordLocked() json.RawMessage {
	held := 0
	for name := range d.known[drift.Tool] {
		if d.heldLocked(name) {
			held++
		}
	}
	r := defsRecord{V: 1, Known: d.items, Last: d.last, ChangedAt: d.changedAt, Lost: d.lost, Held: &held}
	if d.approved != nil {
		r.Approved = []json.RawMessage{}
		for _, key := range sortedKeysOf(d.approved) {
			r.Approved = append(r.Approved, d.approved[key].Canonical)
		}
	}
	b, _ := json.Marshal(r)
	return b
}

// load replaces what d knows by a persisted record; a record that cannot
// be read is ignored (and the server's next learn is a first one).
func (d *defs) load(raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loadLocked(raw)
}

// loadLocked is load with mu held.
func (d *defs) loadLocked(raw json.RawMessage) error {
	var r defsRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	if r.V != 1 {
		return fmt.Errorf("definitions record of version %d", r.V)
	}
	d.known, d.items = map[drift.Kind]drift.Set{}, map[drift.Kind][]json.RawMessage{}
	for k, items := range r.Known {
		if slices.Contains(drift.Kinds, k) {
			d.known[k] = drift.Index(k, items)
			d.items[k] = items
		}
	}
	d.approved = nil
	if r.Approved != nil {
		d.approved = drift.Index(drift.Tool, r.Approved)
	}
	d.last, d.changedAt, d.lost = r.Last, r.ChangedAt, r.Lost
	return nil
}

func sortedKeysOf(s drift.Set) []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// observeLocked records a list of kind k just learned (and cached) from
// the server, for the next flush to report: the first list of a kind is
// the baseline (the first of tools also approved), a list that differs
// from the one known before is a change. A server whose tools relearn
// finds none where it had some has lost them: that is not recorded as a
// change of its definitions (they come back as they were, or as a change
// then) but reported as tools_lost, and as tools_restored when they come
// back. pin is the server's setting: an unpinned server's approved
// tools follow what it lists. Called with d.mu held, and the list put in
// the cache under it, so that what is known follows the cache's order.
func (d *defs) observeLocked(k ListKind, items []json.RawMessage, pin bool) {
	dk := driftKind(k)
	if dk == "" {
		return
	}
	set := drift.Index(dk, items)
	if d.known == nil {
		d.known, d.items = map[drift.Kind]drift.Set{}, map[drift.Kind][]json.RawMessage{}
	}
	old, had := d.known[dk]
	if dk == drift.Tool {
		switch {
		case had && len(old) > 0 && len(set) == 0:
			if d.lost == 0 {
				d.lost, d.lostNews, d.dirty = len(old), true, true
			}
			return
		case d.lost > 0 && len(set) > 0:
			d.restored, d.lost, d.lostNews, d.dirty = len(set), 0, false, true
		}
	}
	if !had {
		d.known[dk], d.items[dk] = set, items
		d.dirty = true
		if dk == drift.Tool && (d.approved == nil || !pin) {
			d.approved = set
		}
		return
	}
	changes := drift.Diff(old, set)
	if len(changes) == 0 {
		return
	}
	d.known[dk], d.items[dk] = set, items
	d.unreported = append(d.unreported, changes...)
	d.dirty = true
	if dk == drift.Tool && !pin {
		d.approved = set
	}
}

// heldNamesLocked lists, sorted, the tools a pinned server holds back:
// known, and new or changed since approved (fingerprints alone compared).
// mu is held.
func (d *defs) heldNamesLocked() []string {
	var out []string
	for _, name := range sortedKeysOf(d.known[drift.Tool]) {
		if d.heldLocked(name) {
			out = append(out, name)
		}
	}
	for name := range d.private {
		if _, ok := d.privateHeldLocked(name); ok && !d.heldLocked(name) { // else listed above
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// pendingDefLocked is the definition of name held back: the known one,
// else one seen on a per-session process. mu is held.
func (d *defs) pendingDefLocked(name string) (drift.Def, bool) {
	if d.heldLocked(name) {
		return d.known[drift.Tool][name], true
	}
	return d.privateHeldLocked(name)
}

// privateHeldLocked is the definition of name seen on a per-session
// process, if it is not the one approved. mu is held.
func (d *defs) privateHeldLocked(name string) (drift.Def, bool) {
	p, ok := d.private[name]
	if !ok {
		return drift.Def{}, false
	}
	if a, ok := d.approved[name]; ok && a.Fingerprint == p.Fingerprint {
		return drift.Def{}, false
	}
	return p, true
}

// observePrivateLocked records the tools a per-session process lists (set)
// for a pinned server: a definition neither approved nor the one known is
// kept as pending (private), and returned when it was not seen before, to
// report. Nothing known, cached or persisted changes. mu is held.
func (d *defs) observePrivateLocked(set drift.Set) []drift.Change {
	var news []drift.Change
	for _, name := range sortedKeysOf(set) {
		def := set[name]
		if a, ok := d.approved[name]; ok && a.Fingerprint == def.Fingerprint {
			continue
		}
		if k, ok := d.known[drift.Tool][name]; ok && k.Fingerprint == def.Fingerprint {
			continue // held as known already
		}
		if p, ok := d.private[name]; ok && p.Fingerprint == def.Fingerprint {
			continue
		}
		if d.private == nil {
			d.private = map[string]drift.Def{}
		}
		d.private[name] = def
		if a, ok := d.approved[name]; ok {
			news = append(news, drift.Compare(a, def))
		} else {
			news = append(news, drift.Change{Kind: drift.Tool, Name: name, Change: drift.Added})
		}
	}
	return news
}

// heldLocked reports whether the known tool name is held back: new, or
// changed since approved. mu is held.
func (d *defs) heldLocked(name string) bool {
	cur, ok := d.known[drift.Tool][name]
	if !ok {
		return false
	}
	a, ok := d.approved[name]
	return !ok || a.Fingerprint != cur.Fingerprint
}

// heldChangesLocked is what each held tool changed since approved (the
// field-level diff is made here only, for those who show it). mu is held.
func (d *defs) heldChangesLocked() []drift.Change {
	var out []drift.Change
	for _, name := range d.heldNamesLocked() {
		def, _ := d.pendingDefLocked(name)
		if a, ok := d.approved[name]; ok {
			out = append(out, drift.Compare(a, def))
		} else {
			out = append(out, drift.Change{Kind: drift.Tool, Name: name, Change: drift.Added})
		}
	}
	return out
}

// flushDefinitions reports what observeLocked recorded since the last
// flush — one definitions_changed event for all the kinds one learn
// changed, tools_lost, tools_restored — and persists the record if it
// changed. Safe to call at any time; it does nothing when nothing is new.
func (c *Catalog) flushDefinitions() {
	d := c.defs()
	pin := c.host.Config().Pin
	d.mu.Lock()
	if d.cold {
		// Nothing to report or persist: spillDefs made it cold with
		// nothing unreported or unwritten, and only lockDefs changes it.
		d.mu.Unlock()
		return
	}
	changes := d.unreported
	d.unreported = nil
	lost, restored := 0, d.restored
	if d.lostNews {
		lost = d.lost
	}
	d.lostNews, d.restored = false, 0
	var held []string
	if len(changes) > 0 {
		d.last, d.changedAt = changes, time.Now()
		if pin {
			held = d.heldNamesLocked()
		}
	}
	var rec json.RawMessage
	var gen uint64
	st := c.env().Store
	if d.dirty && st != nil {
		d.dirty = false
		d.gen++
		rec, gen = d.recordLocked(), d.gen
	}
	d.mu.Unlock()
	if rec != nil {
		d.writeMu.Lock()
		if gen > d.written && !d.retired {
			d.written = gen
			if err := c.putDefinitions(st, rec); err != nil {
				c.env().Log.Warn("could not persist a server's definitions", "server", c.name(), "err", err)
			} else {
				d.stored = gen
			}
		}
		d.writeMu.Unlock()
	}
	if len(changes) > 0 {
		c.emit("", changeDetails(changes, held))
	}
	if lost > 0 {
		c.emit("", event.ToolsLostDetails{Previous: lost})
	}
	if restored > 0 {
		c.emit("", event.ToolsRestoredDetails{Tools: restored})
	}
}

// changeDetails are the details of a definitions_changed event.
func changeDetails(changes []drift.Change, held []string) event.DefinitionsChangedDetails {
	d := event.DefinitionsChangedDetails{Added: []event.DefinitionRef{}, Removed: []event.DefinitionRef{}, Changed: []event.ChangedDefinition{}, Held: held}
	for _, c := range changes {
		switch c.Change {
		case drift.Added:
			d.Added = append(d.Added, event.DefinitionRef{Kind: string(c.Kind), Name: c.Name})
		case drift.Removed:
			d.Removed = append(d.Removed, event.DefinitionRef{Kind: string(c.Kind), Name: c.Name})
		default:
			d.Changed = append(d.Changed, event.ChangedDefinition{Kind: string(c.Kind), Name: c.Name, Fields: c.Paths()})
		}
	}
	if d.Held == nil {
		d.Held = []string{}
	}
	return d
}

// Definitions is what is known of a server's definitions, for the admin
// API.
type Definitions struct {
	// Pin is the server's pin setting.
	Pin bool `json:"pin"`
	// ChangedAt is when the last change was seen (zero: none seen).
	ChangedAt time.Time `json:"changedAt,omitzero"`
	// Last is the last change: what was added, removed and changed, each
	// changed definition's fields with their values before and after.
	Last []drift.Change `json:"-"`
	// Pending are the tools a pinned server holds back until approved:
	// each new ("added") or changed since approved (with its fields).
	Pending []Pending `json:"pending"`
}

// Pending is a tool held back by pinning.
type Pending struct {
	drift.Change
	// Fingerprint is the held definition's: an approval that names it
	// approves that definition only.
	Fingerprint string `json:"fingerprint"`
}

// Definitions reports what is known of the server's definitions.
func (c *Catalog) Definitions() Definitions {
	pin := c.host.Config().Pin
	d := c.lockDefs()
	defer d.mu.Unlock()
	out := Definitions{Pin: pin, ChangedAt: d.changedAt, Last: slices.Clone(d.last), Pending: []Pending{}}
	if pin {
		for _, c := range d.heldChangesLocked() {
			def, _ := d.pendingDefLocked(c.Name)
			out.Pending = append(out.Pending, Pending{Change: c, Fingerprint: def.Fingerprint})
		}
	}
	return out
}

// PendingDefinitions counts the tools held back (0 for an unpinned
// server), without reading definitions that are on disk only.
func (c *Catalog) PendingDefinitions() int {
	d := c.dp.Load()
	if d == nil || !c.host.Config().Pin {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cold {
		return d.pending
	}
	return len(d.heldNamesLocked())
}

// Warning is the server's status warning: its tools are lost ("" when
// they are not).
func (c *Catalog) Warning() string {
	d := c.dp.Load()
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost == 0 {
		return ""
	}
	return fmt.Sprintf("it lists no tools where it had %d: serving none until it lists them again (if it rightly has none now, clear this with mcpvisor tools accept-lost %s)", d.lost, c.name())
}

// ToolHeld reports whether a pinned server's tool name, as last learned
// (the cache's view), is held back: new or changed since the operator
// approved the server's tools. A name never learned is not reported held.
// A call is decided by CheckTool, on the process that would serve it.
func (c *Catalog) ToolHeld(name string) bool {
	if !c.host.Config().Pin {
		return false
	}
	d := c.lockDefs()
	defer d.mu.Unlock()
	return d.heldLocked(name)
}

// ToolVisible reports whether the server lets clients see item, a tool
// of its list (as it sent it): always, unless the server is pinned and
// item's definition is not the one approved under its name. An item that
// is not a tool object is left as it is.
func (c *Catalog) ToolVisible(item json.RawMessage) bool {
	if !c.host.Config().Pin {
		return true
	}
	def, err := drift.Define(drift.Tool, item)
	if err != nil {
		return true
	}
	d := c.lockDefs()
	defer d.mu.Unlock()
	a, ok := d.approved[def.Key]
	return ok && a.Fingerprint == def.Fingerprint
}

// HeldToolError is the message a call of a held tool gets.
func HeldToolError(server, tool string) string {
	return fmt.Sprintf("tool %s of server %s is held back: its definition is new or changed since it was approved (pinned); review it with `mcpvisor tools diff %s` and approve it with `mcpvisor tools approve %s %s`", tool, server, server, server, tool)
}

// Approve approves tools of the server held back by pinning: those named
// (all that are pending when names is empty), each at the definition
// known now — or, when fingerprints gives one for its name, only if that
// is still the definition known (else ErrStaleApproval and nothing is
// approved). A name that is not pending fails with ErrNotPending, listing
// those that are, and nothing is approved. It returns the tools approved
// and those still pending, persists the approvals, and reports the tools
// list changed so that clients list it again. An approval is of a
// definition, by fingerprint: one a relearn brings after it is held
// again. Safe to call concurrently with learns and other approvals.
func (c *Catalog) Approve(names []string, fingerprints map[string]string) (approved, pending []string, err error) {
	d := c.lockDefs()
	var heldNames []string
	if c.host.Config().Pin {
		heldNames = d.heldNamesLocked()
	}
	isHeld := map[string]bool{}
	for _, n := range heldNames {
		isHeld[n] = true
	}
	if len(names) == 0 {
		names = heldNames
	}
	var bad []string
	for _, n := range names {
		if !isHeld[n] {
			bad = append(bad, n)
		}
	}
	if len(bad) > 0 {
		d.mu.Unlock()
		what := "none is"
		if len(heldNames) > 0 {
			what = "pending: " + strings.Join(heldNames, ", ")
		}
		return nil, heldNames, fmt.Errorf("server %s: %s %w (%s)", c.name(), strings.Join(bad, ", "), ErrNotPending, what)
	}
	for _, n := range names {
		if fp, ok := fingerprints[n]; ok && fp != d.approvableLocked(n, fingerprints).Fingerprint {
			d.mu.Unlock()
			return nil, heldNames, fmt.Errorf("server %s: tool %s: %w; review it again (mcpvisor tools diff %s)", c.name(), n, ErrStaleApproval, c.name())
		}
	}
	// Written into, the approved set is a copy of its own: until now it
	// may be the very set known holds (the first list, approved as it is;
	// an unpinned server's), which an approval must not change.
	if d.approved == nil {
		d.approved = drift.Set{}
	} else {
		d.approved = maps.Clone(d.approved)
	}
	for _, n := range names {
		d.approved[n] = d.approvableLocked(n, fingerprints)
		if p, ok := d.private[n]; ok && p.Fingerprint == d.approved[n].Fingerprint {
			delete(d.private, n)
		}
		approved = append(approved, n)
	}
	slices.Sort(approved)
	pending = []string{}
	for _, n := range heldNames {
		if !slices.Contains(approved, n) {
			pending = append(pending, n)
		}
	}
	if len(approved) > 0 {
		d.dirty = true
	}
	d.mu.Unlock()
	if len(approved) == 0 {
		return []string{}, pending, nil
	}
	c.flushDefinitions()
	c.emit("", event.DefinitionsApprovedDetails{Approved: approved})
	c.host.ListsChanged([]ListKind{Tools})
	return approved, pending, nil
}

// approvableLocked is the held definition of name an approval approves:
// the one whose fingerprint it gives, known or seen on a per-session
// process, else the one pending first. mu is held.
func (d *defs) approvableLocked(name string, fingerprints map[string]string) drift.Def {
	if fp, ok := fingerprints[name]; ok {
		if p, ok := d.private[name]; ok && p.Fingerprint == fp {
			return p
		}
		if k, ok := d.known[drift.Tool][name]; ok && k.Fingerprint == fp {
			return k
		}
	}
	def, _ := d.pendingDefLocked(name)
	return def
}

// PinChanged follows a reload's change of the pin setting: unpinning
// approves every tool as it is now (an unpinned server's approved tools
// follow its list), so that pinning again later starts from what clients
// saw. It reports whether clients see other tools now. The caller has
// each instance's LiveTools forget first (nothing learned before counts).
func (c *Catalog) PinChanged(was, now bool) bool {
	if was == now {
		return false
	}
	d := c.lockDefs()
	n := len(d.heldNamesLocked())
	if !now && n > 0 {
		d.approved = d.known[drift.Tool]
		d.private = nil
		d.dirty = true
	}
	d.mu.Unlock()
	if !now && n > 0 {
		c.flushDefinitions()
	}
	return n > 0
}

// AcceptLost is the operator's "it lists no tools now, and that is right":
// for a server whose tools relearn found none where it had some (its
// tools_lost warning, which keeps it from being ready), the empty list
// becomes its known definitions — reported as a definitions_changed that
// removed them, the warning cleared. Tools it lists later are compared
// with none (added); a pinned server's approvals are kept, so a tool that
// comes back as it was approved is served, a changed one held. It returns
// how many tools were given up, or an error wrapping ErrNotLost.
func (c *Catalog) AcceptLost() (int, error) {
	d := c.lockDefs()
	n := d.lost
	if n == 0 {
		d.mu.Unlock()
		return 0, fmt.Errorf("server %s %w (no tools_lost warning to clear)", c.name(), ErrNotLost)
	}
	changes := drift.Diff(d.known[drift.Tool], drift.Set{})
	d.known[drift.Tool], d.items[drift.Tool] = drift.Set{}, []json.RawMessage{}
	d.lost, d.lostNews = 0, false
	d.unreported = append(d.unreported, changes...)
	d.dirty = true
	d.mu.Unlock()
	c.flushDefinitions()
	c.emit("", event.ToolsLostAcceptedDetails{Previous: n})
	return n, nil
}
