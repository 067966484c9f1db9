package fleet

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

// ListKind is a kind of list a server serves: its list method, the member
// of the result that holds the items, and the capability that announces
// it.
type ListKind struct {
	Method, Member, Capability string
}

// The lists the fleet caches for every server.
var (
	Tools     = ListKind{"tools/list", "tools", "tools"}
	Prompts   = ListKind{"prompts/list", "prompts", "prompts"}
	Resources = ListKind{"resources/list", "resources", "resources"}
	Templates = ListKind{"resources/templates/list", "resourceTemplates", "resources"}

	allKindsArray = [...]ListKind{Tools, Prompts, Resources, Templates}
	allKinds      = allKindsArray[:]
)

// ListChanged is the notification that tells clients a list of kind k
// changed.
func (k ListKind) ListChanged() string {
	switch k {
	case Tools:
		return "notifications/tools/list_changed"
	case Prompts:
		return "notifications/prompts/list_changed"
	}
	return "notifications/resources/list_changed"
}

// lists caches one server's lists, as the server sent their items, and its
// initialize result, so that a dormant or never-started server still lists
// its tools. It is written through to the persisted store, keyed by the
// server's launch hash (a config change starts afresh), and refreshed when
// the server says a list changed, restarts or wakes. The Server owns it;
// the front asks for lists through Server.List.
type lists struct {
	mu    sync.RWMutex // read-locked by the per-request reads (cachedListErr)
	items map[string][]json.RawMessage
	// init is the server's initialize result, while it is in memory (its
	// own bytes, as a string: not the message's or a read buffer's); ""
	// when none is known, or when it is cold (initCold): on disk only,
	// under coldHash, like a cold list, and read from the store when
	// asked for (Server.CachedInit). What every session reads of it stays
	// in memory: initVer and announce.
	init string
	// gen counts the server's list_changed notifications: a fetch begun
	// before one does not store what it fetched (a newer fetch will).
	gen uint64

	// The refresh of the server's lists: at most one refresher runs, and
	// what is asked while it does waits in pending (told: the kinds the
	// server said changed) for its next round. See Server.requestRefresh.
	refreshing    bool
	pending, told kindSet
	// unsaved are the kinds held from an earlier launch of the server
	// (relaunched): not yet stored under the current launch's hash,
	// whether or not the next fetch finds them the same.
	unsaved kindSet

	// cold are the kinds whose lists are not in items but only in the
	// store, under the launch hash coldHash (Server.spillLists puts them
	// there when the server goes dormant; Server.cachedList reads them);
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
	initVer  uint8
	announce capSet
	initCold bool
	// initDual: the result records a dual-era server (backend.EraDual).
	initDual bool
	// initSeq counts the changes of the result held (wrapping): a write
	// begun before one does not mark the newer result written.
	initSeq uint16

	seq      [len(allKindsArray)]uint16
	coldHash *[sha256.Size]byte // nil until a list or the init goes cold
	// initHash is the launch hash the result held is on disk under, as it
	// is (nil: not known to be). Only a result on disk under the current
	// launch's hash goes cold, and none while a relaunch is pending
	// (unsaved). The same pointer as coldHash when the two are equal.
	initHash *[sha256.Size]byte
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
func (s *Server) launchNow() (gen uint64, cfg *config.Server) {
	c := s.lists
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen, s.Config()
}

// relaunchPending reports whether lists of an earlier launch are held,
// to be learned again from the new one (Fleet.relearn does).
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

// kindSet is a set of list kinds: bit i stands for allKinds[i].
type kindSet uint8

func setOf(kinds ...ListKind) kindSet {
	var set kindSet
	for _, k := range kinds {
		for i, a := range allKinds {
			if a == k {
				set |= 1 << i
			}
		}
	}
	return set
}

func (set kindSet) has(k ListKind) bool { return set&setOf(k) != 0 }

// kinds lists the set's kinds in the order of allKinds.
func (set kindSet) kinds() []ListKind {
	var out []ListKind
	for i, k := range allKinds {
		if set&(1<<i) != 0 {
			out = append(out, k)
		}
	}
	return out
}

func (c *lists) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// putIf stores a list fetched at generation gen, unless the server said
// its lists changed since; it reports whether it stored it, whether that
// differs from what was there (a list only on disk is read back to
// compare: a learn's path, rare), and the change's number for persisted.
func (s *Server) putIf(gen uint64, k ListKind, items []json.RawMessage) (stored, changed bool, seq uint16) {
	c := s.lists
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return false, false, 0
	}
	old, had := c.items[k.Member]
	if !had && c.cold.has(k) {
		old, had, _ = s.readCold(k, *c.coldHash) // unreadable: compared as new
	}
	changed = !had || !sameItems(old, items)
	// A list of an earlier launch is not on disk under this one's hash,
	// changed or not, until persisted.
	return true, changed, c.setLocked(k, items, changed || c.unsaved.has(k))
}

// setLocked puts items in memory as the list of kind k; changed says they
// differ from the list known before (which, unless it was stale, is on
// disk as it is). It returns the change's number. mu is held.
func (c *lists) setLocked(k ListKind, items []json.RawMessage, changed bool) uint16 {
	if c.items == nil {
		c.items = map[string][]json.RawMessage{}
	}
	c.items[k.Member] = items
	c.cold &^= setOf(k)
	i := kindIndex(k)
	c.seq[i]++
	if changed {
		c.stale |= setOf(k)
	}
	return c.seq[i]
}

// persisted records that the list of kind k, as its change seq left it,
// was written to disk: unless it changed again since, it is no longer
// stale.
func (c *lists) persisted(k ListKind, seq uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq[kindIndex(k)] == seq {
		c.stale &^= setOf(k)
	}
}

func kindIndex(k ListKind) int {
	for i, a := range allKinds {
		if a == k {
			return i
		}
	}
	panic("fleet: unknown list kind " + k.Member)
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
		return c.initHash == nil || *c.initHash != cur
	}
	c.setInit(raw)
	c.initHash, c.initCold = nil, false
	c.initSeq++
	return true
}

// initToWrite is the initialize result held, if it is to be written
// under hash (in memory, not known to be on disk under it), and its
// change count, for initWritten.
func (c *lists) initToWrite(hash [sha256.Size]byte) (raw json.RawMessage, seq uint16, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.init == "" || c.initCold || c.initHash != nil && *c.initHash == hash {
		return nil, 0, false
	}
	return json.RawMessage(c.init), c.initSeq, true
}

// initWritten records that the result initToWrite gave with seq is on
// disk under hash, unless it changed since.
func (c *lists) initWritten(seq uint16, hash [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initSeq != seq || c.init == "" || c.initCold {
		return
	}
	if c.coldHash != nil && *c.coldHash == hash {
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
		for i, k := range knownVersions {
			if v == k {
				c.initVer = uint8(i + 1)
			}
		}
	}
	for i, cp := range capabilityNames {
		if AnnouncesChanges(raw, cp) {
			c.announce |= 1 << i
		}
	}
}

// initFrom takes raw, read from the store under the launch hash hash,
// as the initialize result, cold: only what is derived from it is kept
// (Fleet.SetStore). One whose version is not in knownVersions is kept in
// memory.
func (c *lists) initFrom(raw json.RawMessage, hash [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setInit(raw)
	if c.coldHash == nil || *c.coldHash != hash {
		c.coldHash = &hash // coldFrom's, but for a server with no list
	}
	c.initHash = c.coldHash
	if c.initVer != 0 {
		c.init, c.initCold = "", true
	}
}

// knownVersions are the protocol versions an initialize result's
// protocolVersion is kept as, in a byte, once the result goes cold; a
// result with another stays in memory.
var knownVersions = [...]string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// capSet is a set of capabilities: bit i stands for capabilityNames[i].
type capSet uint8

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
func (s *Server) AnnouncesChanges(capability string) bool {
	c := s.lists
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cp := range capabilityNames {
		if cp == capability {
			return c.announce&(1<<i) != 0
		}
	}
	return false
}

// put stores a list in memory, as one not known to be on disk.
func (c *lists) put(k ListKind, items []json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(k, items, true)
}

// cachedList is the server's list of kind k: from memory, else from the
// store when it was put there (spillLists). A list the store no longer
// has (its entry replaced) is known no more.
func (s *Server) cachedList(k ListKind) ([]json.RawMessage, bool) {
	items, ok, _ := s.cachedListErr(k)
	return items, ok
}

// cachedListErr is cachedList, with the error of a list on disk that
// could not be read: such a list stays known (cold) — the next read tries
// again — and the caller, unlike for one the store does not have, must
// not take it for unknown (List does not start the server for it).
func (s *Server) cachedListErr(k ListKind) ([]json.RawMessage, bool, error) {
	c := s.lists
	c.mu.RLock()
	items, ok := c.items[k.Member]
	cold, hash := c.cold.has(k), c.coldHash
	c.mu.RUnlock()
	if ok || !cold {
		return items, ok, nil
	}
	items, ok, err := s.readCold(k, *hash)
	if err != nil {
		return nil, false, fmt.Errorf("server %s: its %s list is kept in the state file, which could not be read: %w", s.Name(), k.Member, err)
	}
	if !ok {
		c.mu.Lock()
		if c.cold.has(k) && c.coldHash == hash {
			c.cold &^= setOf(k)
		}
		c.mu.Unlock()
	}
	return items, ok, nil
}

// readCold reads the list of kind k from the store's entry of the server
// under launch hash.
func (s *Server) readCold(k ListKind, hash [sha256.Size]byte) ([]json.RawMessage, bool, error) {
	return s.f.store.List(s.Name(), hex.EncodeToString(hash[:]), store.Kind(k.Member))
}

// launchKey is the server's launch hash (config.Server.LaunchHash) as
// bytes, the form the lists keep of the hash their disk copy is under.
func (s *Server) launchKey() (key [sha256.Size]byte, ok bool) {
	return launchKeyOf(s.Config())
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
func (s *Server) spillLists() {
	if s.f.store == nil {
		return
	}
	hash, ok := s.launchKey()
	if !ok {
		return
	}
	c := s.lists
	c.mu.Lock()
	defer c.mu.Unlock()
	if (c.cold != 0 || c.initCold) && *c.coldHash != hash {
		return // some are on disk under an earlier launch: one hash is kept
	}
	if c.coldHash == nil || *c.coldHash != hash {
		if c.initHash != nil && *c.initHash == hash {
			c.coldHash = c.initHash
		} else {
			c.coldHash = &hash
		}
	}
	if c.init != "" && c.initVer != 0 && c.unsaved == 0 && c.initHash != nil && *c.initHash == hash {
		c.init, c.initCold = "", true
		c.initHash = c.coldHash
	}
	for _, k := range allKinds {
		items, ok := c.items[k.Member]
		if !ok || c.unsaved.has(k) || c.stale.has(k) {
			continue
		}
		delete(c.items, k.Member)
		c.cold |= setOf(k)
		if len(items) > 0 {
			c.full |= setOf(k)
		} else {
			c.full &^= setOf(k)
		}
	}
	if len(c.items) == 0 {
		c.items = nil
	}
}

// warmLists reads the lists that are on disk only back into memory. A
// relaunch does so first: the lists of the earlier launch are served until
// the new one's are learned, and the store entry they are under is
// pruned.
func (s *Server) warmLists() {
	c := s.lists
	c.mu.Lock()
	cold, initCold, hash := c.cold, c.initCold, c.coldHash
	c.mu.Unlock()
	if cold == 0 && !initCold {
		return
	}
	l, ok := s.f.store.Lists(s.Name(), hex.EncodeToString(hash[:]))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.coldHash != hash {
		return
	}
	if c.initCold {
		// Copied (setInit): l.Init is part of one buffer with every list
		// read. Not read, the result is lost, but what is derived from
		// it stays known.
		c.initCold = false
		if ok && l.Init != nil {
			c.setInit(l.Init)
		}
	}
	for _, k := range cold.kinds() {
		if !c.cold.has(k) {
			continue
		}
		c.cold &^= setOf(k)
		items, found := l.Get(store.Kind(k.Member))
		if !ok || !found {
			continue
		}
		if items == nil {
			items = []json.RawMessage{}
		}
		if c.items == nil {
			c.items = map[string][]json.RawMessage{}
		}
		c.items[k.Member] = items
	}
}

// coldFrom records the lists found on disk under the launch hash hash
// (fetched: whether each has items), without reading them
// (Fleet.SetStore).
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
func (s *Server) CachedInit() json.RawMessage {
	c := s.lists
	c.mu.Lock()
	held, cold, hash := c.init, c.initCold, c.coldHash
	c.mu.Unlock()
	if !cold {
		if held == "" {
			return nil
		}
		return json.RawMessage(held)
	}
	raw, ok, err := s.f.store.Init(s.Name(), hex.EncodeToString(hash[:]))
	if err == nil && !ok {
		// Gone from the store (pruned): unknown, as for a cold list.
		c.mu.Lock()
		if c.initCold && c.coldHash == hash {
			c.initCold = false
			c.setInit(nil)
		}
		c.mu.Unlock()
	}
	return raw
}

// cachedVersion is the protocol version of the cached initialize result,
// or "".
func (s *Server) cachedVersion() string {
	c := s.lists
	c.mu.Lock()
	v, raw := c.initVer, c.init
	c.mu.Unlock()
	if v != 0 {
		return knownVersions[v-1]
	}
	if raw == "" {
		return ""
	}
	str, _ := rpc.StringMember(json.RawMessage(raw), "protocolVersion")
	return str
}

// CachedList is the server's list of kind k as cached, without starting
// or waking it; ok is false when it was never learned.
func (s *Server) CachedList(k ListKind) (items []json.RawMessage, ok bool) { return s.cachedList(k) }

// Era is the protocol version the server speaks: its live shared
// connection's, else the one it spoke when its lists were last learned
// (the cached initialize or server/discover result); "" if neither is
// known. A dual-era server speaks two, joined by "+": the legacy one its
// legacy clients are served in, then ModernVersion (e.g.
// "2025-11-25+2026-07-28").
func (s *Server) Era() string {
	v, dual := "", false
	if in := s.Init(); in != nil {
		v, dual = in.ProtocolVersion, in.Era() == backend.EraDual
	} else {
		v = s.cachedVersion()
		s.lists.mu.Lock()
		dual = s.lists.initDual
		s.lists.mu.Unlock()
	}
	if dual && v != "" {
		return v + "+" + backend.ModernVersion
	}
	return v
}

// ServerInfo is the server's serverInfo, from the same source as Era (nil
// if unknown).
func (s *Server) ServerInfo() json.RawMessage {
	if in := s.Init(); in != nil {
		return in.ServerInfo
	}
	return rpc.Member(s.CachedInit(), "serverInfo")
}

// Cached reports whether the server's list of kind k is known without
// starting it.
func (s *Server) Cached(k ListKind) bool {
	c := s.lists
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[k.Member]
	return ok || c.cold.has(k)
}

// List returns the server's whole list of kind k (every page), from the
// cache when it is there — a dormant server is not woken for it — else
// fetched from the shared instance under a lease (starting it) and cached.
// A list kept on disk that cannot be read back is an error: the server is
// not started for it. A server without the capability has an empty list.
// ctx bounds the start and the fetch.
func (s *Server) List(ctx context.Context, k ListKind) ([]json.RawMessage, error) {
	if items, ok, err := s.cachedListErr(k); ok || err != nil {
		// A list on disk that could not be read is an error, not a
		// reason to start the server: a state file that fails would
		// otherwise start every dormant server an aggregate list asks.
		return items, err
	}
	l, err := s.Acquire(ctx, "")
	if err != nil {
		return nil, err
	}
	defer l.Release()
	items, _, err := s.learnFrom(ctx, l.in.cfg, l.Conn(), k)
	s.flushDefinitions()
	return items, err
}

// learnFrom fetches kind k from conn, a connection of the launch
// launched (the configuration its instance was made with), caches and
// persists it, and reports whether it differs from the cached one. The
// connection of an earlier launch (an instance the server was relaunched
// from, still draining) is listed from, but neither its list nor its
// initialize result is kept as the server's: they are not the current
// launch's.
func (s *Server) learnFrom(ctx context.Context, launched *config.Server, conn Conn, k ListKind) ([]json.RawMessage, bool, error) {
	if conn == nil {
		return nil, false, fmt.Errorf("server %s: no MCP connection to list from", s.Name())
	}
	gen, cur := s.launchNow() // a relaunch after this is refused by putIf and putInit
	if launched != cur && launched.LaunchHash() != cur.LaunchHash() {
		items, err := fetchList(ctx, s.Name(), conn, k)
		return items, false, err
	}
	s.rememberInit(conn, cur, gen)
	items, err := fetchList(ctx, s.Name(), conn, k)
	if err != nil {
		return nil, false, err
	}
	// Cached and observed as one step: what the definitions know follows
	// the cache's order when two learns race. The caller reports what was
	// observed (flushDefinitions), once for all the kinds it learns.
	d := s.lockDefs()
	stored, changed, seq := s.putIf(gen, k, items)
	if stored {
		d.observeLocked(k, items, s.Config().Pin)
	}
	d.mu.Unlock()
	// A list refused for an older generation (the launch it came from
	// was relaunched meanwhile) is not this launch's: neither marked
	// saved nor persisted under its hash.
	if stored && (s.lists.saved(k) || changed) {
		s.persist(k, items, seq)
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
// c, a connection of the launch cfg, gave it at the lists' generation gen
// (launchNow).
func (s *Server) rememberInit(c Conn, cfg *config.Server, gen uint64) {
	if c.Init() == nil {
		return
	}
	raw := c.Init().Raw
	cur, ok := launchKeyOf(cfg)
	if !ok || s.lists.warmInit(raw, s.f.store, s.Name()) || !s.lists.putInit(raw, cur, gen) || s.f.store == nil {
		return
	}
	s.persistInit()
}

// eraLearned keeps the initialize result of c, a connection of the launch
// launched, once it records what c learned of the server's era after it
// connected (the first modern client's request to a server initialized
// probes it: dual.go in package backend), as a list fetch keeps it: the
// next start of any of its instances knows.
func (s *Server) eraLearned(launched *config.Server, c Conn) {
	gen, cur := s.launchNow()
	if launched != cur && launched.LaunchHash() != cur.LaunchHash() {
		return // of a launch relaunched since
	}
	s.rememberInit(c, cur, gen)
}

// persistInit writes the initialize result held to the store, under the
// current launch's hash, unless it is known to be there. Writes are one
// at a time (Fleet.initWrites), each of the result held when it begins:
// two instances remembering different results leave the store with the
// one held last, and the result is marked saved only if it is what was
// written (initSeq).
func (s *Server) persistInit() {
	s.f.initWrites.Lock()
	defer s.f.initWrites.Unlock()
	key, ok := s.launchKey()
	if !ok {
		return
	}
	raw, seq, ok := s.lists.initToWrite(key)
	if !ok {
		return
	}
	beforeInitWrite()
	if err := s.f.store.PutInit(s.Name(), hex.EncodeToString(key[:]), raw); err != nil {
		s.f.log.Warn("could not persist a server's initialize result", "server", s.Name(), "err", err)
		return
	}
	s.lists.initWritten(seq, key)
}

// beforeInitWrite is called by persistInit between taking the result to
// write and writing it; a test seam (a write held there while another
// instance remembers another result).
var beforeInitWrite = func() {}

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
func (s *Server) persist(k ListKind, items []json.RawMessage, seq uint16) {
	if s.f.store == nil {
		return
	}
	if err := s.f.store.PutList(s.Name(), s.Config().LaunchHash(), store.Kind(k.Member), items); err != nil {
		s.f.log.Warn("could not persist a server's list", "server", s.Name(), "list", k.Member, "err", err)
		return
	}
	s.lists.persisted(k, seq)
}

// listChanged handles a server's notifications/…/list_changed: the cached
// lists it names are dropped and fetched again in the background.
func (s *Server) listChanged(method string) {
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
	s.lists.mu.Lock()
	s.lists.gen++
	s.lists.mu.Unlock()
	s.requestRefresh(true, kinds...)
}

// requestRefresh asks for kinds to be fetched again from the running
// shared instance, told when the server said they changed; it does not
// wait. Requests coalesce: one refresher per server runs the refreshes one
// after the other, and whatever is asked while one runs — any number of
// notifications — makes exactly one more after it, of every kind asked
// meanwhile, so the last change is never lost and a storm of notifications
// costs two fetches of each list, not one each. The refresher ends when
// nothing is pending, or when the fleet closes (what is pending then is
// dropped); nothing starts once the fleet is closing.
func (s *Server) requestRefresh(told bool, kinds ...ListKind) {
	c := s.lists
	set := setOf(kinds...)
	c.mu.Lock()
	c.pending |= set
	if told {
		c.told |= set
	}
	if c.refreshing {
		c.mu.Unlock()
		return
	}
	c.refreshing = true
	c.mu.Unlock()
	if !s.f.spawn(s.refresher) {
		c.mu.Lock()
		c.refreshing = false
		c.pending, c.told = 0, 0
		c.mu.Unlock()
	}
}

// refresher runs the pending refreshes of the server until none is left or
// ctx (the fleet's) ends.
func (s *Server) refresher(ctx context.Context) {
	c := s.lists
	for {
		c.mu.Lock()
		kinds, told := c.pending, c.told
		c.pending, c.told = 0, 0
		if kinds == 0 || ctx.Err() != nil {
			c.refreshing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		s.refresh(ctx, kinds, told)
	}
}

// refresh fetches kinds again from the running shared instance (under a
// lease, so it is not put to sleep meanwhile; a server that is not running
// has nothing new to say), stores them, and reports the kinds that changed
// through Options.OnListsChanged. A kind in told is one the server said
// changed: when it cannot be fetched it is dropped and reported as
// changed, so that clients list again rather than keep a stale one — unless
// the fetch failed because ctx ended (the fleet is closing), which changes
// nothing. Each refresh is bounded by the server's request timeout plus its
// init timeout (none if either is 0) and by ctx.
func (s *Server) refresh(ctx context.Context, kinds, told kindSet) {
	l, ok := s.Peek("")
	if !ok {
		dropped := (kinds & told).kinds()
		for _, k := range dropped {
			s.lists.drop(k)
		}
		if len(dropped) > 0 {
			s.f.listsChanged(s, dropped)
		}
		return
	}
	defer l.Release()
	rctx, cancel := WithTimeout(ctx, PlusTimeouts(s.Config().RequestTimeout, s.Config().InitTimeout))
	defer cancel()
	gen, pinned := l.in.liveGen()
	var changed []ListKind
	for _, k := range kinds.kinds() {
		items, diff, err := s.learnFrom(rctx, l.in.cfg, l.Conn(), k)
		if err == nil && pinned && k == Tools {
			l.in.sawTools(l.Conn(), gen, items)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.f.log.Debug("list refresh failed", "server", s.Name(), "list", k.Member, "err", err)
			if told.has(k) {
				s.lists.drop(k)
				changed = append(changed, k)
			}
			continue
		}
		if diff {
			changed = append(changed, k)
		}
	}
	s.flushDefinitions()
	if len(changed) > 0 {
		s.f.listsChanged(s, changed)
	}
}

func (f *Fleet) listsChanged(s *Server, kinds []ListKind) {
	if f.opts.OnListsChanged != nil {
		f.opts.OnListsChanged(s, kinds)
	}
}

// SetStore attaches the persisted cache and loads what it holds for the
// configured servers (under their current launch hashes). Entries of
// servers no longer configured, or configured differently, are pruned.
// Call it before serving.
func (f *Fleet) SetStore(st *store.Store) {
	f.store = st
	for _, s := range f.Servers() {
		s.loadDefinitions()
	}
	// The lists stay on disk, read when asked for: only their
	// initialize results and which lists are known come into memory.
	for name, sum := range st.Index(f.launchHashes()) {
		s := f.Get(name)
		if s == nil {
			continue
		}
		hash, ok := s.launchKey()
		if !ok {
			continue
		}
		s.lists.coldFrom(sum.Lists, hash)
		if len(sum.Init) > 0 {
			s.lists.initFrom(sum.Init, hash)
		}
	}
	for _, s := range f.Servers() {
		s.spillDefs()
	}
	f.pruneStore()
	f.trimSoon(true) // what reading the store brought into memory: given back as a dormancy's
}

// loadDefinitions takes in the server's persisted definitions record, if
// the fleet has a store: left on disk, as for a dormant server (lockDefs
// reads it when something looks at the definitions), with only its held
// and lost counts read into memory. A record written before it kept the
// held count is read whole (and put out of memory by spillDefs).
func (s *Server) loadDefinitions() {
	if s.f.store == nil {
		return
	}
	raw := s.f.store.Definitions(s.Name())
	if raw == nil {
		return
	}
	var sum defsSummary
	if json.Unmarshal(raw, &sum) == nil && sum.V == 1 && sum.Held != nil {
		d := s.defs()
		d.mu.Lock()
		d.coldLocked(*sum.Held)
		d.lost = sum.Lost
		d.mu.Unlock()
		return
	}
	if err := s.defs().load(raw); err != nil {
		s.f.log.Warn("ignoring a server's unreadable definitions record", "server", s.Name(), "err", err)
	}
}

// definitionsGrace is how long the definitions record of a server no
// longer configured is kept: added again within it, the server has its
// approvals and its last known definitions back.
const definitionsGrace = 30 * 24 * time.Hour

// pruneDefinitions drops the definitions records of servers no longer
// configured for definitionsGrace.
func (f *Fleet) pruneDefinitions() {
	if f.store == nil {
		return
	}
	keep := map[string]bool{}
	for _, s := range f.Servers() {
		keep[s.Name()] = true
	}
	if _, err := f.store.PruneDefinitions(keep, time.Now(), definitionsGrace); err != nil {
		f.log.Warn("could not prune the persisted definitions", "err", err)
	}
}

// Learn starts, in the background and at most concurrency at a time, each
// server whose tools are not cached, fetches all its lists (persisting
// them), and puts it back to sleep unless a client used it meanwhile. It
// returns when every server was tried or ctx ended.
func (f *Fleet) Learn(ctx context.Context, concurrency int) {
	if concurrency <= 0 {
		concurrency = 2
	}
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, s := range f.Servers() {
		if s.Cached(Tools) || s.Config().Eager {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.learn(ctx)
		})
	}
	wg.Wait()
}

// learn starts the server under one lease, fetches every list, and lets
// it sleep again unless a client request came meanwhile. It reports
// whether every list was learned.
func (s *Server) learn(ctx context.Context) bool {
	cfg := s.Config()
	lctx, cancel := WithTimeout(ctx, PlusTimeouts(cfg.InitTimeout, cfg.RequestTimeout))
	defer cancel()
	l, err := s.Acquire(lctx, "")
	if err != nil {
		s.f.log.Warn("could not learn a server's lists", "server", s.Name(), "err", err)
		return false
	}
	ok := true
	before := s.Requests() // counted after ours: a later one is a client's
	var learned []ListKind
	for _, k := range allKinds {
		_, changed, err := s.learnFrom(lctx, l.in.cfg, l.Conn(), k)
		if err != nil {
			s.f.log.Warn("could not learn a server's lists", "server", s.Name(), "list", k.Member, "err", err)
			ok = false
			break
		}
		if changed {
			learned = append(learned, k)
		}
	}
	l.Release()
	s.flushDefinitions()
	if len(learned) > 0 {
		s.f.listsChanged(s, learned)
	}
	// The refresh that follows a first start may still hold the server:
	// it is waited for, as long as a refresh may take.
	rctx, cancel := WithTimeout(ctx, PlusTimeouts(cfg.RequestTimeout, cfg.InitTimeout))
	defer cancel()
	s.Rest(rctx, before)
	return ok
}
