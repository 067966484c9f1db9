package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// lists caches one server's lists, as the server sent their items, and its
// initialize result, so that a dormant or never-started server still lists
// its tools. It is written through to the persisted store, keyed by the
// server's launch hash (a config change starts afresh), and refreshed when
// the server says a list changed, restarts or wakes. The Catalog owns it;
// the gateway asks for lists through Catalog.List.
type lists struct {
	mu    sync.RWMutex // read-locked by the per-request reads (cachedListErr)
	items map[string][]json.RawMessage
	// init is the server's initialize result, while it is in memory (its
	// own bytes, as a string: not the message's or a read buffer's); ""
	// when none is known, or when it is cold (initCold): on disk only,
	// under coldHash, like a cold list, and read from the store when
	// asked for (Catalog.CachedInit). What every session reads of it stays
	// in memory: initVer and announce.
	init string
	// gen counts the server's list_changed notifications: a fetch begun
	// before one does not store what it fetched (a newer fetch will).
	gen uint64

	// The refresh of the server's lists: at most one refresher runs, and
	// what is asked while it does waits in pending (told: the kinds the
	// server said changed) for its next round. See Catalog.requestRefresh.
	refreshing    bool
	pending, told kindSet
	// unsaved are the kinds held from an earlier launch of the server
	// (relaunched): not yet stored under the current launch's hash,
	// whether or not the next fetch finds them the same.
	unsaved kindSet

	// cold are the kinds whose lists are not in items but only in the
	// store, under the launch hash coldHash (Catalog.spillLists puts them
	// there when the server goes dormant; Catalog.cachedList reads them);
	// full are those of them that have items.
	cold, full kindSet
	// stale are the kinds whose lists in items may not be on disk as they
	// are: changed since they were last persisted without error. seq
	// counts each kind's changes (wrapping), so that a persist that
	// finishes after a newer change does not mark the newer one written.
	stale kindSet

	// initVer is the initialize result's protocol version, as an index
	// into knownVersions plus one (0: none, or one not in that table);
	// announce the capabilities whose list changes it announces (see
	// AnnouncesChanges). Both are derived from the result in one place,
	// setInit. initCold: the result is on disk only (init is "").
	initVer  version
	announce capSet
	initCold bool
	// initDual: the result records a dual-era server (backend.EraDual).
	initDual bool
	// initSeq counts the changes of the result held (wrapping): a write
	// begun before one does not mark the newer result written.
	initSeq change

	seq      [len(allKindsArray)]change
	coldHash launchRef // nil until a list or the init goes cold
	// initHash is the launch hash the result held is on disk under, as it
	// is (nil: not known to be). Only a result on disk under the current
	// launch's hash goes cold, and none while a relaunch is pending
	// (unsaved). The same pointer as coldHash when the two are equal.
	initHash launchRef
}

// relaunched marks every cached list and the initialize result as of an
// earlier launch — a fetch begun before does not store what it fetched,
// the next fetch of each kind is persisted even when it finds the same
// items, and the result held is not known to be on disk (the entry it is
// under is pruned) — and runs swap, which puts the new launch's
// configuration in force, in the same step: a learn looks at the
// generation and the configuration together (launchNow), so it sees
// either the earlier launch or the new one, never the new generation
// with the earlier configuration; and a server going dormant meanwhile
// spills nothing of the earlier launch.
func (c *lists) relaunched(swap func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.unsaved = setOf(allKinds...)
	c.initHash = nil
	swap()
}

// launchNow is the lists' generation and the server's configuration, as
// one (see relaunched).
func (c *Catalog) launchNow() (gen uint64, cfg *config.Server) {
	l := &c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen, c.host.Config()
}

// Relaunch marks everything held as of an earlier launch and runs swap,
// which puts the new launch's configuration in force, in the same step
// (see lists.relaunched); then it reads what is on disk only back into
// memory (warmLists), since the store entry it is under goes: the lists
// of the earlier launch are served until the new one's are learned
// (Learn, Refresh), or dropped (DropRelaunched). The fleet's reload calls
// it, under the server's operator lock.
func (c *Catalog) Relaunch(swap func()) {
	c.lists.relaunched(swap)
	c.warmLists()
}

// RelaunchPending reports whether lists of an earlier launch are held, to
// be learned again from the new one.
func (c *Catalog) RelaunchPending() bool { return c.lists.relaunchPending() }

// DropRelaunched forgets the lists still held from an earlier launch (a
// relaunched server whose new launch could not be learned) and returns
// the kinds of those that had items, for the caller to report.
func (c *Catalog) DropRelaunched() []ListKind { return c.lists.dropUnsaved() }

// relaunchPending reports whether lists of an earlier launch are held,
// to be learned again from the new one (the fleet's relearn does).
func (c *lists) relaunchPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unsaved != 0
}

// saved reports whether kind k had to be persisted although unchanged,
// and clears that.
func (c *lists) saved(k ListKind) (was bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was = c.unsaved.has(k)
	c.unsaved &^= setOf(k)
	return was
}

// dropUnsaved forgets the lists still held from an earlier launch and
// returns the kinds of those that had items.
func (c *lists) dropUnsaved() []ListKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ListKind
	for _, k := range c.unsaved.kinds() {
		if len(c.items[k.Member]) > 0 || c.cold.has(k) && c.full.has(k) {
			out = append(out, k)
		}
		delete(c.items, k.Member)
		c.cold &^= setOf(k)
	}
	c.unsaved = 0
	return out
}

// putIf stores a list fetched at generation gen, unless the server said
// its lists changed since; it reports whether it stored it, whether that
// differs from what was there (a list only on disk is read back to
// compare: a learn's path, rare), and the change's number for persisted.
func (c *Catalog) putIf(gen uint64, k ListKind, items []json.RawMessage) (stored, changed bool, seq change) {
	l := &c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != gen {
		return false, false, 0
	}
	old, had := l.items[k.Member]
	if !had && l.cold.has(k) {
		old, had, _ = c.readCold(k, *l.coldHash) // unreadable: compared as new
	}
	changed = !had || !sameItems(old, items)
	// A list of an earlier launch is not on disk under this one's hash,
	// changed or not, until persisted.
	return true, changed, l.setLocked(k, items, changed || l.unsaved.has(k))
}

// setLocked puts items in memory as the list of kind k; changed says they
// differ from the list known before (which, unless it was stale, is on
// disk as it is). It returns the change's number. mu is held.
func (c *lists) setLocked(k ListKind, items []json.RawMessage, changed bool) change {
	if c.items == nil {
		c.items = map[string][]json.RawMessage{}
	}
	c.items[k.Member] = items
	c.cold &^= setOf(k)
	if changed {
		c.stale |= setOf(k)
	}
	return c.seq[kindIndex(k)].next()
}

// persisted records that the list of kind k, as its change seq left it,
// was written to disk: unless it changed again since, it is no longer
// stale.
func (c *lists) persisted(k ListKind, seq change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq[kindIndex(k)] == seq {
		c.stale &^= setOf(k)
	}
}

// putInit keeps raw, learned at generation gen (nothing if the server was
// relaunched since), as the initialize result, in memory, and reports
// whether it must be persisted: it changed, or the one held is not known
// to be on disk under cur, the current launch's hash. A cold result is
// taken for changed (the caller compares it with the store's first: see
// rememberInit).
func (c *lists) putInit(raw json.RawMessage, cur [sha256.Size]byte, gen uint64) (persist bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return false // of a launch relaunched since: not kept
	}
	if !c.initCold && c.init != "" && c.init == string(raw) {
		return !sameLaunch(c.initHash, cur)
	}
	c.setInit(raw)
	c.initHash, c.initCold = nil, false
	c.initSeq.next()
	return true
}

// initToWrite is the initialize result held, if it is to be written
// under hash (in memory, not known to be on disk under it), and its
// change count, for initWritten.
func (c *lists) initToWrite(hash [sha256.Size]byte) (raw json.RawMessage, seq change, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.init == "" || c.initCold || sameLaunch(c.initHash, hash) {
		return nil, 0, false
	}
	return json.RawMessage(c.init), c.initSeq, true
}

// initWritten records that the result initToWrite gave with seq is on
// disk under hash, unless it changed since.
func (c *lists) initWritten(seq change, hash [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initSeq != seq || c.init == "" || c.initCold {
		return
	}
	if sameLaunch(c.coldHash, hash) {
		c.initHash = c.coldHash
	} else {
		c.initHash = &hash
	}
}

// setInit makes raw (copied) the initialize result held, with what is
// derived from it; nil: none. c.mu is held.
func (c *lists) setInit(raw json.RawMessage) {
	c.init = string(raw)
	c.initVer, c.announce, c.initDual = 0, 0, false
	if raw == nil {
		return
	}
	c.initDual = backend.EraOf(raw) == backend.EraDual
	if v, ok := rpc.StringMember(raw, "protocolVersion"); ok {
		c.initVer = versionOf(v)
	}
	for i, cp := range capabilityNames {
		if AnnouncesChanges(raw, cp) {
			c.announce = c.announce.with(i)
		}
	}
}

// initFrom takes raw, read from the store under the launch hash hash,
// as the initialize result, cold: only what is derived from it is kept
// (Catalog.Load). One whose version is not in knownVersions is kept in
// memory.
func (c *lists) initFrom(raw json.RawMessage, hash [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setInit(raw)
	if !sameLaunch(c.coldHash, hash) {
		c.coldHash = &hash // coldFrom's, but for a server with no list
	}
	c.initHash = c.coldHash
	if c.initVer != 0 {
		c.init, c.initCold = "", true
	}
}

// capabilityNames are the capabilities that announce list changes.
var capabilityNames = [...]string{"tools", "prompts", "resources"}

// AnnouncesChanges reports whether a server whose initialize result is
// init tells of every change of its list of capability kind: it declares
// listChanged for it, or has no such list at all. Unknown (a nil init)
// is no.
func AnnouncesChanges(init json.RawMessage, capability string) bool {
	var caps map[string]struct {
		ListChanged bool `json:"listChanged"`
	}
	if init == nil || json.Unmarshal(rpc.Member(init, "capabilities"), &caps) != nil {
		return false
	}
	c, ok := caps[capability]
	return !ok || c.ListChanged
}

// AnnouncesChanges reports whether the server, by its cached initialize
// result, tells of every change of its list of capability kind (see the
// function of that name): without reading a cold result. False for a
// capability not in capabilityNames.
func (c *Catalog) AnnouncesChanges(capability string) bool {
	l := &c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.announce.has(capability)
}

// cachedList is the server's list of kind k: from memory, else from the
// store when it was put there (spillLists). A list the store no longer
// has (its entry replaced) is known no more.
func (c *Catalog) cachedList(k ListKind) ([]json.RawMessage, bool) {
	items, ok, _ := c.cachedListErr(k)
	return items, ok
}

// cachedListErr is cachedList, with the error of a list on disk that
// could not be read: such a list stays known (cold) — the next read tries
// again — and the caller, unlike for one the store does not have, must
// not take it for unknown (List does not start the server for it).
func (c *Catalog) cachedListErr(k ListKind) ([]json.RawMessage, bool, error) {
	l := &c.lists
	l.mu.RLock()
	items, ok := l.items[k.Member]
	cold, hash := l.cold.has(k), l.coldHash
	l.mu.RUnlock()
	if ok || !cold {
		return items, ok, nil
	}
	items, ok, err := c.readCold(k, *hash)
	if err != nil {
		return nil, false, fmt.Errorf("server %s: its %s list is kept in the state file, which could not be read: %w", c.name(), k.Member, err)
	}
	if !ok {
		l.mu.Lock()
		if l.cold.has(k) && l.coldHash == hash {
			l.cold &^= setOf(k)
		}
		l.mu.Unlock()
	}
	return items, ok, nil
}

// readCold reads the list of kind k from the store's entry of the server
// under launch hash.
func (c *Catalog) readCold(k ListKind, hash [sha256.Size]byte) ([]json.RawMessage, bool, error) {
	return c.env().Store.List(c.name(), hex.EncodeToString(hash[:]), store.Kind(k.Member))
}

// launchKey is the server's launch hash (config.Server.LaunchHash) as
// bytes, the form the lists keep of the hash their disk copy is under.
func (c *Catalog) launchKey() (key [sha256.Size]byte, ok bool) {
	return launchKeyOf(c.host.Config())
}

// launchKeyOf is cfg's launch hash as bytes (see launchKey).
func launchKeyOf(cfg *config.Server) (key [sha256.Size]byte, ok bool) {
	_, err := hex.Decode(key[:], []byte(cfg.LaunchHash()))
	return key, err == nil
}

// spillLists puts the lists of a server gone dormant out of memory: each
// that is on disk as it is in memory, under the current launch's hash —
// not one held from an earlier launch, not one whose change failed to be
// written — is read from the store when asked for (cachedList), and so
// is the initialize result, once it is on disk as it is; what every
// session reads of it (its version, the changes it announces) stays.
func (c *Catalog) spillLists() {
	if c.env().Store == nil {
		return
	}
	hash, ok := c.launchKey()
	if !ok {
		return
	}
	l := &c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.cold != 0 || l.initCold) && !sameLaunch(l.coldHash, hash) {
		return // some are on disk under an earlier launch: one hash is kept
	}
	if !sameLaunch(l.coldHash, hash) {
		if sameLaunch(l.initHash, hash) {
			l.coldHash = l.initHash
		} else {
			l.coldHash = &hash
		}
	}
	if l.init != "" && l.initVer != 0 && l.unsaved == 0 && sameLaunch(l.initHash, hash) {
		l.init, l.initCold = "", true
		l.initHash = l.coldHash
	}
	for _, k := range allKinds {
		items, ok := l.items[k.Member]
		if !ok || l.unsaved.has(k) || l.stale.has(k) {
			continue
		}
		delete(l.items, k.Member)
		l.cold |= setOf(k)
		if len(items) > 0 {
			l.full |= setOf(k)
		} else {
			l.full &^= setOf(k)
		}
	}
	if len(l.items) == 0 {
		l.items = nil
	}
}

// warmLists reads the lists that are on disk only back into memory. A
// relaunch does so first: the lists of the earlier launch are served until
// the new one's are learned, and the store entry they are under is
// pruned.
func (c *Catalog) warmLists() {
	l := &c.lists
	l.mu.Lock()
	cold, initCold, hash := l.cold, l.initCold, l.coldHash
	l.mu.Unlock()
	if cold == 0 && !initCold {
		return
	}
	got, ok := c.env().Store.Lists(c.name(), hex.EncodeToString(hash[:]))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.coldHash != hash {
		return
	}
	if l.initCold {
		// Copied (setInit): got.Init is part of one buffer with every
		// list read. Not read, the result is lost, but what is derived
		// from it stays known.
		l.initCold = false
		if ok && got.Init != nil {
			l.setInit(got.Init)
		}
	}
	for _, k := range cold.kinds() {
		if !l.cold.has(k) {
			continue
		}
		l.cold &^= setOf(k)
		items, found := got.Get(store.Kind(k.Member))
		if !ok || !found {
			continue
		}
		if items == nil {
			items = []json.RawMessage{}
		}
		if l.items == nil {
			l.items = map[string][]json.RawMessage{}
		}
		l.items[k.Member] = items
	}
}

// coldFrom records the lists found on disk under the launch hash hash
// (fetched: whether each has items), without reading them
// (Catalog.Load).
func (c *lists) coldFrom(fetched map[store.Kind]bool, hash [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range allKinds {
		full, ok := fetched[store.Kind(k.Member)]
		if !ok {
			continue
		}
		c.cold |= setOf(k)
		if full {
			c.full |= setOf(k)
		}
	}
	c.coldHash = &hash
}

// drop forgets a list (the next List fetches it) and returns what was
// there, for the refresh to compare with.
func (c *lists) drop(k ListKind) (old []json.RawMessage, had bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had = c.items[k.Member]
	delete(c.items, k.Member)
	c.cold &^= setOf(k)
	return old, had
}

func sameItems(a, b []json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

// CachedInit is the server's initialize result as last seen (persisted
// across restarts of mcpvisor), or nil.
// A cold one is read from the store (nil if that fails).
func (c *Catalog) CachedInit() json.RawMessage {
	l := &c.lists
	l.mu.Lock()
	held, cold, hash := l.init, l.initCold, l.coldHash
	l.mu.Unlock()
	if !cold {
		if held == "" {
			return nil
		}
		return json.RawMessage(held)
	}
	raw, ok, err := c.env().Store.Init(c.name(), hex.EncodeToString(hash[:]))
	if err == nil && !ok {
		// Gone from the store (pruned): unknown, as for a cold list.
		l.mu.Lock()
		if l.initCold && l.coldHash == hash {
			l.initCold = false
			l.setInit(nil)
		}
		l.mu.Unlock()
	}
	return raw
}

// ColdInit is the server's cached initialize result (CachedInit), parsed,
// when the shared instance runs no connection — a dormant or
// never-started server —, so that it is answered without starting it;
// nil when one runs (its live result is the one to read), when none is
// cached, or when the cached one does not parse.
func (c *Catalog) ColdInit() *backend.InitResult {
	if c.host.Init() != nil {
		return nil
	}
	raw := c.CachedInit()
	if raw == nil {
		return nil
	}
	in, err := backend.ParseInit(raw)
	if err != nil {
		return nil
	}
	return in
}

// KnownInit is the server's initialize result as far as it is known
// without starting anything: the shared instance's live one when it runs,
// else the cached one (ColdInit); nil when neither is known.
func (c *Catalog) KnownInit() *backend.InitResult {
	if in := c.host.Init(); in != nil {
		return in
	}
	return c.ColdInit()
}

// CachedVersion is the protocol version of the cached initialize result,
// or "": what the server spoke when it last ran, read without the result
// when it is on disk only.
func (c *Catalog) CachedVersion() string {
	l := &c.lists
	l.mu.Lock()
	v, raw := l.initVer, l.init
	l.mu.Unlock()
	if v != 0 {
		return v.String()
	}
	if raw == "" {
		return ""
	}
	str, _ := rpc.StringMember(json.RawMessage(raw), "protocolVersion")
	return str
}

// CachedList is the server's list of kind k as cached, without starting
// or waking it; ok is false when it was never learned.
func (c *Catalog) CachedList(k ListKind) (items []json.RawMessage, ok bool) { return c.cachedList(k) }

// Era is the protocol version the server speaks: its live shared
// connection's, else the one it spoke when its lists were last learned
// (the cached initialize or server/discover result); "" if neither is
// known. A dual-era server speaks two, joined by "+": the legacy one its
// legacy clients are served in, then ModernVersion (e.g.
// "2025-11-25+2026-07-28").
func (c *Catalog) Era() string {
	v, dual := "", false
	if in := c.host.Init(); in != nil {
		v, dual = in.ProtocolVersion, in.Era() == backend.EraDual
	} else {
		v = c.CachedVersion()
		c.lists.mu.Lock()
		dual = c.lists.initDual
		c.lists.mu.Unlock()
	}
	if dual && v != "" {
		return v + "+" + backend.ModernVersion
	}
	return v
}

// ServerInfo is the server's serverInfo, from the same source as Era (nil
// if unknown).
func (c *Catalog) ServerInfo() json.RawMessage {
	if in := c.host.Init(); in != nil {
		return in.ServerInfo
	}
	return rpc.Member(c.CachedInit(), "serverInfo")
}

// Cached reports whether the server's list of kind k is known without
// starting it.
func (c *Catalog) Cached(k ListKind) bool {
	l := &c.lists
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.items[k.Member]
	return ok || l.cold.has(k)
}

// List returns the server's whole list of kind k (every page), from the
// cache when it is there — a dormant server is not woken for it — else
// fetched from the shared instance under a lease (starting it) and cached.
// A list kept on disk that cannot be read back is an error: the server is
// not started for it. A server without the capability has an empty list.
// ctx bounds the start and the fetch.
func (c *Catalog) List(ctx context.Context, k ListKind) ([]json.RawMessage, error) {
	if items, ok, err := c.cachedListErr(k); ok || err != nil {
		// A list on disk that could not be read is an error, not a
		// reason to start the server: a state file that fails would
		// otherwise start every dormant server an aggregate list asks.
		return items, err
	}
	lease, err := c.host.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	p := lease.Process()
	items, _, err := c.learnFrom(ctx, p.Launched, p.Conn, k)
	c.flushDefinitions()
	return items, err
}

// learnFrom fetches kind k from conn, a connection of the launch
// launched (the configuration its instance was made with), caches and
// persists it, and reports whether it differs from the cached one. The
// connection of an earlier launch (an instance the server was relaunched
// from, still draining) is listed from, but neither its list nor its
// initialize result is kept as the server's: they are not the current
// launch's.
func (c *Catalog) learnFrom(ctx context.Context, launched *config.Server, conn Conn, k ListKind) ([]json.RawMessage, bool, error) {
	if conn == nil {
		return nil, false, fmt.Errorf("server %s: no MCP connection to list from", c.name())
	}
	gen, cur := c.launchNow() // a relaunch after this is refused by putIf and putInit
	if launched != cur && launched.LaunchHash() != cur.LaunchHash() {
		items, err := fetchList(ctx, c.name(), conn, k)
		return items, false, err
	}
	c.rememberInit(conn, cur, gen)
	items, err := fetchList(ctx, c.name(), conn, k)
	if err != nil {
		return nil, false, err
	}
	// Cached and observed as one step: what the definitions know follows
	// the cache's order when two learns race. The caller reports what was
	// observed (flushDefinitions), once for all the kinds it learns.
	d := c.lockDefs()
	stored, changed, seq := c.putIf(gen, k, items)
	if stored {
		d.observeLocked(k, items, c.host.Config().Pin)
	}
	d.mu.Unlock()
	// A list refused for an older generation (the launch it came from
	// was relaunched meanwhile) is not this launch's: neither marked
	// saved nor persisted under its hash.
	if stored && (c.lists.saved(k) || changed) {
		c.persist(k, items, seq)
	}
	return items, changed, nil
}

// fetchList lists every page of kind k from conn.
func fetchList(ctx context.Context, name string, conn Conn, k ListKind) ([]json.RawMessage, error) {
	if !conn.Init().Has(k.Capability) {
		return nil, nil
	}
	var items []json.RawMessage
	cursor := ""
	for page := 0; ; page++ {
		if page > 1000 {
			return nil, fmt.Errorf("server %s: %s: more than 1000 pages", name, k.Method)
		}
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		resp, err := conn.Call(ctx, k.Method, params)
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("server %s: %s: %s", name, k.Method, resp.Error.Message)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(resp.Result, &body); err != nil {
			return nil, fmt.Errorf("server %s: %s: malformed result: %v", name, k.Method, err)
		}
		var pageItems []json.RawMessage
		if raw := body[k.Member]; len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &pageItems); err != nil {
				return nil, fmt.Errorf("server %s: %s: malformed %s: %v", name, k.Method, k.Member, err)
			}
		}
		items = append(items, pageItems...)
		cursor = ""
		if raw := body["nextCursor"]; len(raw) > 0 {
			_ = json.Unmarshal(raw, &cursor)
		}
		if cursor == "" {
			break
		}
	}
	if items == nil {
		items = []json.RawMessage{}
	}
	return items, nil
}

// rememberInit caches (and persists) the server's initialize result, as
// conn, a connection of the launch cfg, gave it at the lists' generation
// gen (launchNow).
func (c *Catalog) rememberInit(conn Conn, cfg *config.Server, gen uint64) {
	if conn.Init() == nil {
		return
	}
	raw := conn.Init().Raw
	cur, ok := launchKeyOf(cfg)
	if !ok || c.lists.warmInit(raw, c.env().Store, c.name()) || !c.lists.putInit(raw, cur, gen) || c.env().Store == nil {
		return
	}
	c.persistInit()
}

// EraLearned keeps the initialize result of conn, a connection of the
// launch launched, once it records what conn learned of the server's era
// after it connected (the first modern client's request to a server
// initialized probes it: dual.go in package backend), as a list fetch
// keeps it: the next start of any of its instances knows.
func (c *Catalog) EraLearned(launched *config.Server, conn Conn) {
	gen, cur := c.launchNow()
	if launched != cur && launched.LaunchHash() != cur.LaunchHash() {
		return // of a launch relaunched since
	}
	c.rememberInit(conn, cur, gen)
}

// persistInit writes the initialize result held to the store, under the
// current launch's hash, unless it is known to be there. Writes are one
// at a time (Env.initWrites), each of the result held when it begins:
// two instances remembering different results leave the store with the
// one held last, and the result is marked saved only if it is what was
// written (initSeq).
func (c *Catalog) persistInit() {
	c.env().initWrites.Lock()
	defer c.env().initWrites.Unlock()
	key, ok := c.launchKey()
	if !ok {
		return
	}
	raw, seq, ok := c.lists.initToWrite(key)
	if !ok {
		return
	}
	if hook := c.env().beforeInitWrite; hook != nil {
		hook()
	}
	if err := c.env().Store.PutInit(c.name(), hex.EncodeToString(key[:]), raw); err != nil {
		c.env().Log.Warn("could not persist a server's initialize result", "server", c.name(), "err", err)
		return
	}
	c.lists.initWritten(seq, key)
}

// warmInit takes raw, the result of a server that woke, as the cold
// initialize result, in memory again, if the store holds the same (so
// that a wake does not write it again), and reports whether it did.
func (c *lists) warmInit(raw json.RawMessage, st *store.Store, server string) bool {
	c.mu.Lock()
	cold, hash := c.initCold, c.coldHash
	c.mu.Unlock()
	if !cold {
		return false
	}
	old, ok, err := st.Init(server, hex.EncodeToString(hash[:]))
	if err != nil || !ok || string(old) != string(raw) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.initCold || c.coldHash != hash {
		return false
	}
	c.init, c.initCold = string(old), false
	return true
}

// persist writes the list of kind k, as its change seq left it, to the
// store under the server's launch hash.
func (c *Catalog) persist(k ListKind, items []json.RawMessage, seq change) {
	if c.env().Store == nil {
		return
	}
	if err := c.env().Store.PutList(c.name(), c.host.Config().LaunchHash(), store.Kind(k.Member), items); err != nil {
		c.env().Log.Warn("could not persist a server's list", "server", c.name(), "list", k.Member, "err", err)
		return
	}
	c.lists.persisted(k, seq)
}

// ListChanged handles a notifications/…/list_changed the server's shared
// instance sent: the cached lists it names are fetched again in the
// background, and a fetch begun before does not store what it fetched.
// Another method does nothing.
func (c *Catalog) ListChanged(method string) {
	var kinds []ListKind
	switch method {
	case "notifications/tools/list_changed":
		kinds = []ListKind{Tools}
	case "notifications/prompts/list_changed":
		kinds = []ListKind{Prompts}
	case "notifications/resources/list_changed":
		kinds = []ListKind{Resources, Templates}
	default:
		return
	}
	c.lists.mu.Lock()
	c.lists.gen++
	c.lists.mu.Unlock()
	c.requestRefresh(true, kinds...)
}

// Refresh asks for kinds to be fetched again from the running shared
// instance, in the background (see requestRefresh): after a start, a
// wake or a relaunch.
func (c *Catalog) Refresh(kinds ...ListKind) { c.requestRefresh(false, kinds...) }

// requestRefresh asks for kinds to be fetched again from the running
// shared instance, told when the server said they changed; it does not
// wait. Requests coalesce: one refresher per server runs the refreshes one
// after the other, and whatever is asked while one runs — any number of
// notifications — makes exactly one more after it, of every kind asked
// meanwhile, so the last change is never lost and a storm of notifications
// costs two fetches of each list, not one each. The refresher ends when
// nothing is pending, or when the fleet closes (what is pending then is
// dropped); nothing starts once the fleet is closing.
func (c *Catalog) requestRefresh(told bool, kinds ...ListKind) {
	l := &c.lists
	set := setOf(kinds...)
	l.mu.Lock()
	l.pending |= set
	if told {
		l.told |= set
	}
	if l.refreshing {
		l.mu.Unlock()
		return
	}
	l.refreshing = true
	l.mu.Unlock()
	if !c.env().Spawn(c.refresher) {
		l.mu.Lock()
		l.refreshing = false
		l.pending, l.told = 0, 0
		l.mu.Unlock()
	}
}

// refresher runs the pending refreshes of the server until none is left or
// ctx (the fleet's) ends.
func (c *Catalog) refresher(ctx context.Context) {
	l := &c.lists
	for {
		l.mu.Lock()
		kinds, told := l.pending, l.told
		l.pending, l.told = 0, 0
		if kinds == 0 || ctx.Err() != nil {
			l.refreshing = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		c.refresh(ctx, kinds, told)
	}
}

// refresh fetches kinds again from the running shared instance (under a
// lease, so it is not put to sleep meanwhile; a server that is not running
// has nothing new to say), stores them, and reports the kinds that changed
// through Host.ListsChanged. A kind in told is one the server said
// changed: when it cannot be fetched it is dropped and reported as
// changed, so that clients list again rather than keep a stale one — unless
// the fetch failed because ctx ended (the fleet is closing), which changes
// nothing. Each refresh is bounded by the server's request timeout plus its
// init timeout (none if either is 0) and by ctx.
func (c *Catalog) refresh(ctx context.Context, kinds, told kindSet) {
	lease, ok := c.host.Peek()
	if !ok {
		dropped := (kinds & told).kinds()
		for _, k := range dropped {
			c.lists.drop(k)
		}
		if len(dropped) > 0 {
			c.host.ListsChanged(dropped)
		}
		return
	}
	defer lease.Release()
	cfg := c.host.Config()
	rctx, cancel := config.WithTimeout(ctx, config.PlusTimeouts(cfg.RequestTimeout, cfg.InitTimeout))
	defer cancel()
	p := lease.Process()
	gen, pinned := p.Tools.liveGen(cfg.Pin)
	var changed []ListKind
	for _, k := range kinds.kinds() {
		items, diff, err := c.learnFrom(rctx, p.Launched, p.Conn, k)
		if err == nil && pinned && k == Tools {
			p.Tools.sawTools(p.Conn, gen, items)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.env().Log.Debug("list refresh failed", "server", c.name(), "list", k.Member, "err", err)
			if told.has(k) {
				c.lists.drop(k)
				changed = append(changed, k)
			}
			continue
		}
		if diff {
			changed = append(changed, k)
		}
	}
	c.flushDefinitions()
	if len(changed) > 0 {
		c.host.ListsChanged(changed)
	}
}

// Load takes in what the state file holds of the server: its
// definitions record (loadDefinitions), and sum, what the store's index
// holds of its lists and initialize result under its current launch hash
// (nil: nothing) — which lists are known, and the result's version and
// the changes it announces, the lists staying on disk, read when asked
// for. Then the definitions go out of memory too when they can (as a
// dormant server's). The fleet calls it for every server once, before
// serving.
func (c *Catalog) Load(sum *store.Summary) {
	c.loadDefinitions()
	if sum != nil {
		if hash, ok := c.launchKey(); ok {
			c.lists.coldFrom(sum.Lists, hash)
			if len(sum.Init) > 0 {
				c.lists.initFrom(sum.Init, hash)
			}
		}
	}
	c.spillDefs()
}

// LoadDefinitions takes in the server's persisted definitions record
// (see loadDefinitions): a server a reload added.
func (c *Catalog) LoadDefinitions() { c.loadDefinitions() }

// loadDefinitions takes in the server's persisted definitions record, if
// the fleet has a store: left on disk, as for a dormant server (lockDefs
// reads it when something looks at the definitions), with only its held
// and lost counts read into memory. A record written before it kept the
// held count is read whole (and put out of memory by spillDefs).
func (c *Catalog) loadDefinitions() {
	if c.env().Store == nil {
		return
	}
	raw := c.env().Store.Definitions(c.name())
	if raw == nil {
		return
	}
	var sum defsSummary
	if json.Unmarshal(raw, &sum) == nil && sum.V == 1 && sum.Held != nil {
		d := c.defs()
		d.mu.Lock()
		d.coldLocked(*sum.Held)
		d.lost = sum.Lost
		d.mu.Unlock()
		return
	}
	if err := c.defs().load(raw); err != nil {
		c.env().Log.Warn("ignoring a server's unreadable definitions record", "server", c.name(), "err", err)
	}
}

// definitionsGrace is how long the definitions record of a server no
// longer configured is kept: added again within it, the server has its
// approvals and its last known definitions back.
const definitionsGrace = 30 * 24 * time.Hour

// PruneDefinitions drops the definitions records of servers not in keep
// (by name) for definitionsGrace.
func (e *Env) PruneDefinitions(keep map[string]bool) {
	if e.Store == nil {
		return
	}
	if _, err := e.Store.PruneDefinitions(keep, time.Now(), definitionsGrace); err != nil {
		e.Log.Warn("could not prune the persisted definitions", "err", err)
	}
}

// Learn fetches every list from the process lease holds, caches and
// persists each, releases lease, and reports the kinds that changed
// through Host.ListsChanged. It reports whether every list was learned;
// it stops at the first that could not be, which it logs. ctx bounds the
// fetches.
func (c *Catalog) Learn(ctx context.Context, lease Lease) bool {
	p := lease.Process()
	ok := true
	var learned []ListKind
	for _, k := range allKinds {
		_, changed, err := c.learnFrom(ctx, p.Launched, p.Conn, k)
		if err != nil {
			c.env().Log.Warn("could not learn a server's lists", "server", c.name(), "list", k.Member, "err", err)
			ok = false
			break
		}
		if changed {
			learned = append(learned, k)
		}
	}
	lease.Release()
	c.flushDefinitions()
	if len(learned) > 0 {
		c.host.ListsChanged(learned)
	}
	return ok
}
