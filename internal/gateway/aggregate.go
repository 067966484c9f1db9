package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/interest"
	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// fanOutTimeout bounds each server's answer to a request the aggregated
// endpoint sends to all of them.
const fanOutTimeout = 10 * time.Second

// Separator joins a server's prefix and a tool or prompt name on the
// aggregated endpoint: files__read_file.
const Separator = "__"

// aggregate is the endpoint that serves every server as one.
type aggregate struct {
	g *Gateway
	// sharedViews are the ui:// views that tools of two servers name,
	// each warned of once (they come only from servers' tool definitions
	// and results, so clients cannot grow the set).
	sharedViews sync.Map
	// resultViews are the views that tools/call results on /mcp named
	// (noteView), each by the server whose result named it (nil: two
	// did), at most maxResultViews, forgotten at a reload.
	viewsMu     sync.Mutex
	resultViews map[string]*fleet.Server

	mu     sync.Mutex
	routes map[string]*routeTable // by list member ("tools", "prompts", ...)
	gen    uint64                 // incremented by invalidate: a table built before is not kept
	// collGen is, per list, the generation whose build last set its
	// collisions: an older build finishing late does not overwrite them.
	collGen map[string]uint64
	// Collisions are names that two servers both export; the first server
	// in name order wins. Reported in logs and status.
	collisions []string
	// building is the build in progress of each list, shared by every
	// caller that needs the table meanwhile: after an invalidation the
	// table is rebuilt once, not once per caller.
	building map[string]*tableBuild
	// builds counts the table builds begun, for tests.
	builds atomic.Int64
	// missAt is when a missing name last caused a rebuild.
	missAt time.Time
	// omitted are the servers left out of a list's last table (failed):
	// when one is back, clients are told the list changed. omitGen is,
	// per list, the generation of the newest build that recorded there:
	// a build begun before an invalidation that finishes late does not
	// overwrite what a newer one found.
	omitted map[string]bool
	omitGen map[string]uint64
	// sweeping says a sweeper (sweepIdle) runs: at most one does, while
	// any table is kept.
	sweeping bool
	// idleGen is, per list, the generation of its table the sweeper last
	// dropped: a build of that generation again tries no server that
	// table left out whose list is still not cached (see build).
	idleGen map[string]uint64
}

// monoBase is what monoNow counts from.
var monoBase = time.Now()

// monoNow is the time in ns on the monotonic clock (since monoBase): a
// table's last use, unmoved by the wall clock being set back or forth.
func monoNow() int64 { return int64(time.Since(monoBase)) }

// TableIdle is how long a kept aggregated table may go unused before it
// is dropped: a fleet's aggregated lists hold every item of every server
// (a thousand servers of twenty tools: 15 MB), which their lists on disk
// describe as well; unused, they go, and the next request that needs one
// builds it again (from the lists cached on disk, starting nothing that
// was cached: about 0.1 ms a server).
const TableIdle = 5 * time.Minute

// tableBuild is one build of a list's table; done is closed when t is set.
type tableBuild struct {
	gen  uint64
	done chan struct{}
	t    *routeTable
}

// route says which server serves an aggregated name, and its own name.
type route struct {
	srv      *fleet.Server
	name     string
	nameJSON json.RawMessage // name as a JSON string, when it differs from the public one
	schema   json.RawMessage // a tool's inputSchema, if it has x-mcp-header annotations
	item     int             // its index in the table's items
}

type routeTable struct {
	gen    uint64       // the generation it was built for
	used   atomic.Int64 // when it was last used (monoNow): see TableIdle
	items  []json.RawMessage
	keys   []string // the public name (or URI, URI template) of each item
	byName map[string]route
	// held are the tools pinned servers hold back (fleet.Server.ToolHeld),
	// by public name: not listed, and a call gets an error naming the
	// approval.
	held map[string]route

	// vis keeps visibleOf's answers for this table, made under visFor's
	// policy and server scopes (a reload's first list empties it), by
	// identity: they die with the table (a list changed, a server came or
	// went).
	visMu   sync.Mutex
	visFor  visRules
	vis     map[visKey]visList
	visCost int // of every answer in vis (visList.cost), at most maxVisCost
}

// missRebuildEvery bounds how often names missing from a table rebuild it:
// a server that gained a tool without saying so is found within it, and a
// client calling unknown names cannot make mcpvisor rebuild (and start
// servers that are not cached) at its own rate. A server's list_changed
// rebuilds at once.
const missRebuildEvery = time.Second

// leftOut records whether server was left out of the table of kind k the
// build of generation gen makes, and reports whether it was left out of
// an earlier one. A build older than one that recorded before it records
// nothing and reports false: its table is not kept, and what the newer
// build found stands.
func (a *aggregate) leftOut(k catalog.ListKind, server string, out bool, gen uint64) (was bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if last, ok := a.omitGen[k.Member]; ok && gen < last {
		return false
	}
	if a.omitGen == nil {
		a.omitGen = map[string]uint64{}
	}
	a.omitGen[k.Member] = gen
	key := k.Member + "\x00" + server
	was = a.omitted[key]
	if out {
		if a.omitted == nil {
			a.omitted = map[string]bool{}
		}
		a.omitted[key] = true
	} else {
		delete(a.omitted, key)
	}
	return was
}

// invalidateOnMiss invalidates the tables after a name was missing from the
// table of generation gen, if that is still the current one and no miss
// caused a rebuild within missRebuildEvery: many callers that miss cause one
// rebuild, not one each.
func (a *aggregate) invalidateOnMiss(gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if a.gen != gen || now.Sub(a.missAt) < missRebuildEvery {
		return
	}
	a.missAt = now
	a.routes = nil
	a.gen++
}

func (a *aggregate) invalidate() {
	a.mu.Lock()
	a.routes = nil
	a.gen++
	a.mu.Unlock()
}

// Collisions lists the names that more than one server exports.
func (g *Gateway) Collisions() []string {
	g.agg.mu.Lock()
	defer g.agg.mu.Unlock()
	return append([]string(nil), g.agg.collisions...)
}

func (a *aggregate) Open(out Sink) *Session {
	s := NewSession(out)
	a.g.reg.open(s, nil)
	return s
}

func (a *aggregate) Close(s *Session) { a.g.closeSession(s) }

func (a *aggregate) Handle(ctx context.Context, s *Session, m *rpc.Message, related Sink) *rpc.Message {
	return a.g.answer(ctx, s, m, nil, related, a)
}

// handle serves m, from w: a legacy session's message, or a modern
// request (which serveStateless has checked is of its revision: no
// initialize, notification or response, logging/setLevel or
// resources/subscribe ever comes from one).
func (a *aggregate) handle(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	s := w.sess
	if s == nil {
		return a.request(ctx, w, m, related)
	}
	if a.g.clientMessage(s, m) {
		return nil
	}
	if m.IsNotification() {
		if m.Method == "notifications/roots/list_changed" {
			// Each running server that serves this session hears it:
			// the session's own instance of a per-session server, else
			// the shared one. A server that is not running asks for the
			// roots when it next needs them.
			for _, srv := range a.g.fleet.Servers() {
				a.g.notifyServer(srv, s, m)
			}
		}
		return nil
	}
	if m.IsResponse() {
		return nil
	}
	switch m.Method {
	case "initialize":
		return a.g.initialize(s, m, a.caps(ctx, false), mcpvisorInfo, "")
	case "resources/subscribe", "resources/unsubscribe":
		uri := stringField(m.Params, "uri")
		srv := a.resourceServer(ctx, uri)
		if srv == nil {
			return resourceNotFound(m.ID, uri)
		}
		return a.g.forwardSubscription(ctx, s, srv, m, uri, related)
	case "logging/setLevel":
		return a.g.setLevel(ctx, s, a.g.fleet.Servers(), m)
	}
	return a.request(ctx, w, m, related)
}

// request serves a request of either era (and ping, which only a
// legacy session sends: the 2026-07-28 revision has none).
func (a *aggregate) request(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	switch m.Method {
	case "ping":
		return resultResponse(m.ID, json.RawMessage(`{}`))
	case "tools/list":
		return a.list(ctx, w, m, kindTools)
	case "prompts/list":
		return a.list(ctx, w, m, kindPrompts)
	case "resources/list":
		return a.list(ctx, w, m, kindResources)
	case "resources/templates/list":
		return a.list(ctx, w, m, kindTemplates)
	case "tools/call":
		return a.byName(ctx, w, m, related, kindTools)
	case "prompts/get":
		return a.byName(ctx, w, m, related, kindPrompts)
	case "resources/read":
		uri := stringField(m.Params, "uri")
		srv := a.resourceServer(ctx, uri)
		if srv == nil {
			return resourceNotFound(m.ID, uri)
		}
		return a.g.forward(ctx, w, srv, m.Method, m.Params, m.ID, related)
	case "completion/complete":
		return a.complete(ctx, w, m, related)
	case "skills/list":
		return a.skillsList(ctx, w, m, related)
	case "skills/get", "resources/directory/read":
		return a.skillRequest(ctx, w, m, related)
	case "tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list":
		return a.g.taskRequest(ctx, w, m, related, nil)
	}
	return a.unknown(ctx, w, m, related)
}

// unknown serves a request of a method the aggregated endpoint does not
// know (an extension's, a later revision's) by what its params name: a
// resource by its uri, or a tool or a prompt by its aggregated name,
// renamed to the server's own as tools/call's is. A method under tools/
// or prompts/ names one of those; any other names a tool, else a prompt.
// What names none of them is refused: /mcp cannot tell which server it
// is for.
func (a *aggregate) unknown(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	if uri, _ := rpc.StringMember(m.Params, "uri"); uri != "" {
		srv := a.resourceServer(ctx, uri)
		if srv == nil {
			return resourceNotFound(m.ID, uri)
		}
		return a.g.forward(ctx, w, srv, m.Method, m.Params, m.ID, related)
	}
	if name, _ := rpc.StringMember(m.Params, "name"); name != "" {
		kinds := []catalog.ListKind{kindTools, kindPrompts}
		switch {
		case strings.HasPrefix(m.Method, "tools/"):
			kinds = kinds[:1]
		case strings.HasPrefix(m.Method, "prompts/"):
			kinds = kinds[1:]
		}
		for _, k := range kinds {
			// Listed only: what a pinned server holds back is called
			// by no method until it is approved.
			if r, ok := a.lookup(ctx, k, name, false); ok {
				return a.g.forward(ctx, w, r.srv, m.Method, a.rename(w, m, r), m.ID, related)
			}
		}
		if ctx.Err() != nil {
			return errorResponse(m.ID, rpc.BackendUnavailable, fmt.Sprintf("request cancelled while the aggregated list was built: %v", context.Cause(ctx)))
		}
		what := "tool or prompt"
		if len(kinds) == 1 {
			what = kindWord(kinds[0])
		}
		return errorResponse(m.ID, rpc.InvalidParams, fmt.Sprintf("%s: no %s is named %s", m.Method, what, name))
	}
	return errorResponse(m.ID, rpc.MethodNotFound, "method not found: "+m.Method+
		" (the aggregated endpoint routes a method it does not know by the tool, prompt or resource uri its params name, and these name none; /servers/NAME/mcp passes any method to its server)")
}

// resourceNotFound is the answer to a request for a resource no server
// has.
func resourceNotFound(id json.RawMessage, uri string) *rpc.Message {
	return &rpc.Message{ID: id, Error: &rpc.Error{Code: -32002, Message: "Resource not found", Data: mustJSON(map[string]string{"uri": uri})}}
}

func (a *aggregate) Stateless(ctx context.Context, m *rpc.Message, mo *Modern, related Sink) *rpc.Message {
	return a.g.answer(ctx, nil, m, mo, related, a)
}

func (a *aggregate) endpointServer() *fleet.Server { return nil }

func (a *aggregate) discoverModern(ctx context.Context, m *rpc.Message) *rpc.Message {
	return discover(m, a.caps(ctx, true), mcpvisorInfo, "", scopePublic)
}

// watched reports whether every server announces the changes of its lists
// of capability kind.
func (a *aggregate) watched(kind string) bool {
	for _, srv := range a.g.fleet.Servers() {
		if !srv.Catalog().AnnouncesChanges(kind) {
			return false
		}
	}
	return true
}

// scope is the cacheScope of the aggregated endpoint's results of method:
// private when something other than the servers' own lists shapes them —
// a prefix, a tool filter, a per-session server — and for resources/read,
// whose content may be anyone's; else public.
func (a *aggregate) scope(method string) string {
	if method == "resources/read" {
		return scopePrivate
	}
	for _, srv := range a.g.fleet.Servers() {
		cfg := srv.Config()
		if cfg.Prefix != "" || len(cfg.Tools.Allow) > 0 || len(cfg.Tools.Deny) > 0 || fleet.Private(cfg) {
			return scopePrivate
		}
	}
	if a.g.filtering() {
		return scopePrivate // each identity's lists are its own
	}
	return scopePublic
}

// toolSchema is the inputSchema of the aggregated tool name, or nil (the
// table's build bounds each server by its timeouts).
func (a *aggregate) toolSchema(ctx context.Context, name string) (json.RawMessage, error) {
	t := a.table(ctx, kindTools)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("the aggregated tool list was not built: %w", context.Cause(ctx))
	}
	return t.byName[name].schema, nil // nil without an annotation: nothing to check
}

// mcpvisorInfo is mcpvisor's serverInfo on the aggregated endpoint.
var mcpvisorInfo = json.RawMessage(`{"name":"mcpvisor","title":"mcpvisor gateway","version":"` + Version + `"}`)

var aggregateCaps = json.RawMessage(`{"tools":{"listChanged":true},"prompts":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true},"logging":{},"completions":{}}`)

// list answers a list request with every server's items, names prefixed
// (every page of every server). With a page size set, it answers one page
// and a nextCursor for the rest; otherwise the whole list in one page.
func (a *aggregate) list(ctx context.Context, w sender, m *rpc.Message, k catalog.ListKind) *rpc.Message {
	cursor := stringField(m.Params, "cursor")
	size := int(a.g.pageSize.Load())
	if cursor != "" && size == 0 {
		return errorResponse(m.ID, rpc.InvalidParams, "invalid cursor: the aggregated endpoint returns every item in one page")
	}
	t := a.table(ctx, k)
	items, keys, next := t.items, t.keys, ""
	if a.g.filtering() {
		// The policy's view of the list, before paging: a cursor
		// names an item of this identity's list.
		items, keys = a.g.visibleOf(requestIdentity(ctx, w), w, t, k)
	}
	if size > 0 {
		from := 0
		if cursor != "" {
			var ok bool
			if from, ok = resume(keys, cursor); !ok {
				return errorResponse(m.ID, rpc.InvalidParams, "invalid cursor: not one this endpoint issued, or its item is gone; list again without a cursor")
			}
		}
		to := min(from+size, len(items))
		if to < len(items) {
			next = pageCursor(to, keys[to-1])
		}
		items = items[from:to]
	}
	body := map[string]any{k.Member: nonNil(items)}
	if next != "" {
		body["nextCursor"] = next
	}
	return resultResponse(m.ID, mustJSON(body))
}

// pageCursor names the page that starts at index from, after the item
// whose key is last. The key lets a cursor survive the list changing
// underneath it (a server restarted, a list_changed): the next page then
// starts after that item wherever it now is.
func pageCursor(from int, last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("p1:" + strconv.Itoa(from) + ":" + last))
}

// resume is where the page of cursor starts in a list of keys; false if
// cursor is not one of pageCursor's or its item is no longer listed.
func resume(keys []string, cursor string) (int, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, false
	}
	rest, ok := strings.CutPrefix(string(raw), "p1:")
	if !ok {
		return 0, false
	}
	num, last, ok := strings.Cut(rest, ":")
	from, err := strconv.Atoi(num)
	if !ok || err != nil || from < 1 {
		return 0, false
	}
	if from <= len(keys) && keys[from-1] == last {
		return from, true
	}
	if i := slices.Index(keys, last); i >= 0 {
		return i + 1, true
	}
	return 0, false
}

func nonNil(items []json.RawMessage) []json.RawMessage {
	if items == nil {
		return []json.RawMessage{}
	}
	return items
}

// table builds (or returns the cached) aggregated list of kind k.
//
// Concurrent callers share one build per generation, which runs on its
// own goroutine, bounded by each server's timeouts; every caller, the one
// that began it included, waits for it within its own ctx, and one whose
// ctx ends first gets an empty table (its request then fails as an unknown
// name or lists nothing) — the build goes on for the others and is kept.
func (a *aggregate) table(ctx context.Context, k catalog.ListKind) *routeTable {
	a.mu.Lock()
	if t := a.routes[k.Member]; t != nil {
		a.mu.Unlock()
		// Marked used at most once a second: under load, every request
		// of every core would otherwise write the same cache line.
		if now := monoNow(); now-t.used.Load() >= int64(time.Second) {
			t.used.Store(now)
		}
		return t
	}
	gen := a.gen
	b := a.building[k.Member]
	if b == nil || b.gen != gen {
		b = &tableBuild{gen: gen, done: make(chan struct{})}
		if a.building == nil {
			a.building = map[string]*tableBuild{}
		}
		a.building[k.Member] = b
		bctx := context.WithoutCancel(ctx)
		go func() {
			b.t = a.build(bctx, k, gen)
			a.mu.Lock()
			if a.building[k.Member] == b {
				delete(a.building, k.Member)
			}
			a.mu.Unlock()
			close(b.done)
		}()
	}
	a.mu.Unlock()
	select {
	case <-b.done:
		return b.t
	case <-ctx.Done():
		return &routeTable{gen: gen, byName: map[string]route{}}
	}
}

// build fetches every server's list of kind k and builds the table of
// generation gen: it lists the servers, assembles their items under
// their public names, tells the clients of a server that is back in the
// list, and keeps the table and its collisions.
func (a *aggregate) build(ctx context.Context, k catalog.ListKind, gen uint64) *routeTable {
	a.builds.Add(1)
	servers := a.g.fleet.Servers()
	stillOut := a.stillOut(k, gen)
	per, back := a.fetch(ctx, k, gen, servers, stillOut)
	t, collisions := assemble(k, gen, servers, per)
	a.tellBack(k, servers, back)
	a.keep(k, gen, t, collisions)
	return t
}

// stillOut is, by name, the servers to leave out of the table of kind k
// that the build of generation gen makes, untried unless their list is
// cached: when that table was dropped idle, the servers it left out.
//
// A table dropped idle is built again as it was: the servers it left
// out stay out, untried, as they would in the table had it been kept.
// Trying them again would start them (nothing of theirs is cached),
// holding up the first request after every lull for their timeouts.
// One whose list is cached since is listed (and its clients told it
// is back): that starts nothing, and not every path that learns a
// list invalidates the tables (Server.List, as the per-server
// endpoint's check of a call's Mcp-Param headers uses it, does not).
func (a *aggregate) stillOut(k catalog.ListKind, gen uint64) map[string]bool {
	var stillOut map[string]bool
	a.mu.Lock()
	defer a.mu.Unlock()
	if dropped, ok := a.idleGen[k.Member]; ok && dropped == gen {
		for key := range a.omitted {
			if name, ok := strings.CutPrefix(key, k.Member+"\x00"); ok {
				if stillOut == nil {
					stillOut = map[string]bool{}
				}
				stillOut[name] = true
			}
		}
	}
	return stillOut
}

// fetch lists kind k of each of servers, in parallel, for the build of
// generation gen: per[i] is the items of servers[i] (nil when it is left
// out: in stillOut with its list not cached, or failed), back[i] whether
// it was left out of an earlier table and is in this one.
func (a *aggregate) fetch(ctx context.Context, k catalog.ListKind, gen uint64, servers []*fleet.Server, stillOut map[string]bool) (per [][]json.RawMessage, back []bool) {
	per = make([][]json.RawMessage, len(servers))
	back = make([]bool, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		if stillOut[srv.Name()] && !srv.Catalog().Cached(k) {
			continue
		}
		wg.Go(func() {
			per[i], back[i] = a.fetchOne(ctx, k, gen, srv)
		})
	}
	wg.Wait()
	return per, back
}

// fetchOne is srv's list of kind k, and whether srv was left out of an
// earlier table; a server that fails is logged, recorded as left out of
// the table of generation gen, and lists nothing.
func (a *aggregate) fetchOne(ctx context.Context, k catalog.ListKind, gen uint64, srv *fleet.Server) (items []json.RawMessage, back bool) {
	// A client waits for it: within the server's request timeout,
	// a start included (a start that takes longer goes on; the
	// server is listed once its lists are learned).
	lctx, cancel := fleet.WithTimeout(ctx, srv.Config().RequestTimeout)
	defer cancel()
	items, err := srv.Catalog().List(lctx, k)
	if err != nil {
		a.g.log.Warn("server left out of the aggregated list", "server", srv.Name(), "list", k.Member, "err", err)
		a.leftOut(k, srv.Name(), true, gen)
		return nil, false
	}
	return items, a.leftOut(k, srv.Name(), false, gen)
}

// assemble makes the table of kind k of generation gen from per, the
// items of each of servers in their order, and says the collisions it
// found: of two servers that export a name, the first one listed has it.
func assemble(k catalog.ListKind, gen uint64, servers []*fleet.Server, per [][]json.RawMessage) (*routeTable, []string) {
	t := &routeTable{gen: gen, byName: map[string]route{}}
	t.used.Store(monoNow())
	key := itemKey(k)
	var collisions []string
	for i, srv := range servers {
		cfg := srv.Config()
		for _, item := range per[i] {
			if c := t.add(k, key, srv, cfg, item); c != "" {
				collisions = append(collisions, c)
			}
		}
	}
	return t, collisions
}

// itemKey is the member that names an item of a list of kind k.
func itemKey(k catalog.ListKind) string {
	switch k {
	case kindResources:
		return "uri"
	case kindTemplates:
		return "uriTemplate"
	}
	return "name"
}

// add routes item, one of srv's (configured cfg) in its list of kind k,
// by its public name: listed, or held back if srv's pin holds it. It
// says the collision when another server has that name already; an item
// whose key (the member that names it) is no string, or a tool cfg does
// not allow, is left out.
func (t *routeTable) add(k catalog.ListKind, key string, srv *fleet.Server, cfg *config.Server, item json.RawMessage) (collision string) {
	// Scanned, not decoded: an item that is no object, or
	// whose key is no string, is left out.
	own, ok := rpc.StringMember(item, key)
	if !ok || own == "" {
		return ""
	}
	if k == kindTools && !cfg.Tools.Allowed(own) {
		return ""
	}
	held := k == kindTools && !srv.Catalog().ToolVisible(item) // as the server sent it
	public, item := prefixed(k, key, cfg.Prefix, own, item)
	if c := t.collision(k, public, srv); c != "" {
		return c
	}
	r := route{srv: srv, name: own}
	if own != public {
		r.nameJSON, _ = json.Marshal(own)
	}
	if held {
		if t.held == nil {
			t.held = map[string]route{}
		}
		t.held[public] = r
		return ""
	}
	r.item = len(t.items)
	if k == kindTools && bytes.Contains(item, mcpHeaderKey) {
		r.schema = rpc.Member(item, "inputSchema")
	}
	t.byName[public] = r
	t.items = append(t.items, item)
	t.keys = append(t.keys, public)
	return ""
}

// prefixed is the public name of the item named own, and the item as
// listed: a tool or prompt of a server with a prefix is named
// prefix__own, in place; any other item is listed as the server sent it.
func prefixed(k catalog.ListKind, key, prefix, own string, item json.RawMessage) (string, json.RawMessage) {
	if (k != kindTools && k != kindPrompts) || prefix == "" {
		return own, item
	}
	// The name replaced in place: every other byte of the
	// item is the server's, in its order.
	public := prefix + Separator + own
	name, _ := json.Marshal(public)
	item, _ = rpc.ReplaceMember(item, key, name)
	return public, item
}

// collision describes the collision of public, a name srv exports, with
// a server that has it in t already, listed or held back; "" when t has
// no such name.
func (t *routeTable) collision(k catalog.ListKind, public string, srv *fleet.Server) string {
	if prev, dup := t.byName[public]; dup {
		return fmt.Sprintf("%s %q: served by %s, also exported by %s (hidden)", k.Member, public, prev.srv.Name(), srv.Name())
	}
	if prev, dup := t.held[public]; dup {
		// The name stays the held tool's: holding it back does
		// not hand its calls to another server.
		return fmt.Sprintf("%s %q: served by %s (held back until approved), also exported by %s (hidden)", k.Member, public, prev.srv.Name(), srv.Name())
	}
	return ""
}

// tellBack tells the clients of each of servers that is back in the list
// of kind k (back[i]) that the list changed.
func (a *aggregate) tellBack(k catalog.ListKind, servers []*fleet.Server, back []bool) {
	for i, srv := range servers {
		if back[i] {
			// Clients listed while it was left out: tell them it is back
			// (this table has it; nothing to rebuild).
			a.g.tell(srv, []catalog.ListKind{k})
		}
	}
}

// keep keeps t as the table of kind k if gen is still the current
// generation, and makes collisions the list's reported ones unless a
// newer build's are; it logs the collisions that were not reported.
func (a *aggregate) keep(k catalog.ListKind, gen uint64, t *routeTable, collisions []string) {
	a.mu.Lock()
	// A table begun before an invalidation answers its own caller but is
	// not kept: a newer one may already describe the servers as they are.
	if a.gen == gen {
		if a.routes == nil {
			a.routes = map[string]*routeTable{}
		}
		a.routes[k.Member] = t
		a.sweepLocked()
	}
	found := a.collisionsLocked(k, gen, collisions)
	a.mu.Unlock()
	for _, c := range found {
		a.g.log.Warn("name collision on the aggregated endpoint", "detail", c)
	}
}

// collisionsLocked makes collisions, found by the build of generation
// gen, the reported ones of the list of kind k, unless a newer build's
// are, and says those of them that were not reported; a.mu is held.
//
// The collisions stay those of the newest build to finish, kept or
// not, so that status reports them even while no table is current. A
// collision is logged when it enters them — not at every build of a
// table that has it (an invalidation, a table rebuilt after it was
// dropped idle) —, decided under the lock that replaces them; a build
// that finishes after a newer one neither replaces nor logs them.
func (a *aggregate) collisionsLocked(k catalog.ListKind, gen uint64, collisions []string) (found []string) {
	if a.collGen == nil {
		a.collGen = map[string]uint64{}
	}
	if last, ok := a.collGen[k.Member]; ok && gen < last {
		return nil
	}
	a.collGen[k.Member] = gen
	for _, c := range collisions {
		if _, known := slices.BinarySearch(a.collisions, c); !known && !slices.Contains(found, c) {
			found = append(found, c)
		}
	}
	a.collisions = mergeCollisions(a.collisions, k.Member, collisions)
	return found
}

// sweepLocked starts the sweeper of idle tables unless one runs; a.mu is
// held.
func (a *aggregate) sweepLocked() {
	if a.sweeping || a.g.fleet == nil {
		return
	}
	a.sweeping = a.g.fleet.Go(a.sweepIdle)
}

// sweepIdle drops each kept table once it has gone unused for TableIdle,
// and asks the fleet for a trim after it dropped any, so that the memory
// goes back to the system. It returns when no table is kept, or with ctx
// (the fleet's: Close ends it).
func (a *aggregate) sweepIdle(ctx context.Context) {
	for {
		now := monoNow()
		dropped, kept := false, false
		var next int64 // when the next kept table turns idle
		a.mu.Lock()
		for member, t := range a.routes {
			idleAt := t.used.Load() + int64(TableIdle)
			if idleAt <= now {
				delete(a.routes, member)
				if a.idleGen == nil {
					a.idleGen = map[string]uint64{}
				}
				a.idleGen[member] = t.gen
				dropped = true
				continue
			}
			if !kept || idleAt < next {
				next = idleAt
			}
			kept = true
		}
		// Decided under a.mu with what it saw: a table kept after this
		// starts a sweeper of its own.
		a.sweeping = kept
		a.mu.Unlock()
		if dropped {
			a.g.fleet.TrimSoon()
		}
		if !kept {
			return
		}
		timer := time.NewTimer(time.Duration(next - now))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			a.mu.Lock()
			a.sweeping = false
			a.mu.Unlock()
			return
		}
	}
}

// mergeCollisions replaces the collisions of one list (entries start
// with its member name) by those of its rebuilt table: a collision that is
// gone is no longer reported.
func mergeCollisions(old []string, member string, add []string) []string {
	set := map[string]bool{}
	for _, c := range old {
		if !strings.HasPrefix(c, member+" ") {
			set[c] = true
		}
	}
	for _, c := range add {
		set[c] = true
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// needsLogin is the refusal of the server that a tool or prompt name not
// in the table names by its prefix, when that server needs a login (its
// lists could not be had): nil otherwise.
func (a *aggregate) needsLogin(name string) error {
	for _, srv := range a.g.fleet.Servers() {
		p := srv.Config().Prefix
		if p != "" && strings.HasPrefix(name, p+Separator) {
			return srv.LoginRefusal()
		}
	}
	return nil
}

// byName routes tools/call and prompts/get by the prefixed name.
func (a *aggregate) byName(ctx context.Context, w sender, m *rpc.Message, related Sink, k catalog.ListKind) *rpc.Message {
	var name string
	var ok bool
	if r := w.req; r != nil && r.msg == m && r.mo.Name != "" {
		name, ok = r.mo.Name, true // read with its _meta, from the same params
	} else {
		name, ok = rpc.StringMember(m.Params, "name")
	}
	if !ok || name == "" {
		return errorResponse(m.ID, rpc.InvalidParams, "params must be an object with a name")
	}
	r, ok := a.lookup(ctx, k, name, true)
	if ctx.Err() != nil {
		return errorResponse(m.ID, rpc.BackendUnavailable, fmt.Sprintf("request cancelled while the aggregated list was built: %v", context.Cause(ctx)))
	}
	if !ok {
		if err := a.needsLogin(name); err != nil {
			// Not listed because it needs a login: say so, not "unknown".
			return unavailable(m.ID, rpc.BackendUnavailable, err.Error(), err)
		}
		return errorResponse(m.ID, rpc.InvalidParams, fmt.Sprintf("unknown %s: %s", kindWord(k), name))
	}
	resp := a.g.forward(ctx, w, r.srv, m.Method, a.rename(w, m, r), m.ID, related)
	if k == kindTools && resp.Result != nil && bytes.Contains(resp.Result, uiScheme) {
		a.noteView(r.srv, resp.Result)
	}
	return resp
}

// uiScheme begins the URI of every MCP Apps view.
var uiScheme = []byte(`"ui://`)

// maxResultViews bounds the views tools/call results named that /mcp
// remembers.
const maxResultViews = 1000

// noteView remembers the view result, srv's answer to a tools/call,
// names in its _meta, if any: a server that names a view only in its
// results (not in its tool's definition) has it read through /mcp too.
func (a *aggregate) noteView(srv *fleet.Server, result json.RawMessage) {
	uri := viewOf(rpc.Member(result, "_meta"))
	if !strings.HasPrefix(uri, "ui://") {
		return
	}
	a.viewsMu.Lock()
	defer a.viewsMu.Unlock()
	old, known := a.resultViews[uri]
	switch {
	case known && old != srv && old != nil:
		a.resultViews[uri] = nil // two servers': nobody's
		if _, warned := a.sharedViews.LoadOrStore(uri, true); !warned {
			a.g.log.Warn("an MCP Apps view is named by tools of two servers: /mcp reads it from neither", "uri", uri, "servers", old.Name()+", "+srv.Name())
		}
	case known:
	case len(a.resultViews) >= maxResultViews:
		a.g.log.Debug("an MCP Apps view named in a result is not remembered: too many are", "uri", uri, "server", srv.Name())
	default:
		if a.resultViews == nil {
			a.resultViews = map[string]*fleet.Server{}
		}
		a.resultViews[uri] = srv
	}
}

// forgetViews forgets the views results named (a reload may have
// removed or changed their servers).
func (a *aggregate) forgetViews() {
	a.viewsMu.Lock()
	a.resultViews = nil
	a.viewsMu.Unlock()
}

// viewOf is the view a _meta names: ui.resourceUri, or the older
// "ui/resourceUri".
func viewOf(meta json.RawMessage) string {
	if len(meta) == 0 {
		return ""
	}
	if uri, _ := rpc.StringMember(rpc.Member(meta, "ui"), "resourceUri"); uri != "" {
		return uri
	}
	uri, _ := rpc.StringMember(meta, "ui/resourceUri")
	return uri
}

// rename is m's params with the name the route's server knows its tool or
// prompt by; for a modern request the name is set by begin, with its
// _meta edit, in one copy.
func (a *aggregate) rename(w sender, m *rpc.Message, r route) json.RawMessage {
	switch {
	case r.nameJSON == nil:
	case w.req != nil && w.req.msg == m:
		w.req.rename = r.nameJSON
	default:
		params, _ := rpc.ReplaceMember(m.Params, "name", r.nameJSON)
		return params
	}
	return m.Params
}

// kindWord is how an error names an entry of list kind k.
func kindWord(k catalog.ListKind) string {
	if k == kindPrompts {
		return "prompt"
	}
	return "tool"
}

// lookup finds the route of name in the aggregated list of kind k: a
// listed entry, or, withHeld, one held as its server was last learned (a
// call goes to it and is checked on the process that would serve it:
// begin).
func (a *aggregate) lookup(ctx context.Context, k catalog.ListKind, name string, withHeld bool) (route, bool) {
	t := a.table(ctx, k)
	if ctx.Err() != nil {
		return route{}, false
	}
	r, ok := t.byName[name]
	if h, held := t.held[name]; !ok && held && withHeld {
		r, ok = h, true
	}
	if !ok {
		// A server may have gained it since the table was built: build
		// it again, once for all the callers that missed in that table.
		a.invalidateOnMiss(t.gen)
		r, ok = a.table(ctx, k).byName[name]
	}
	return r, ok
}

// resourceServer finds the server that serves uri: by the listed
// resources, else by the skills listed (skillServer), else by the literal
// start of a resource template, else, for an MCP Apps view (ui://), by
// the tools whose definitions or results name it.
func (a *aggregate) resourceServer(ctx context.Context, uri string) *fleet.Server {
	if uri == "" {
		return nil
	}
	if r, ok := a.table(ctx, kindResources).byName[uri]; ok {
		return r.srv
	}
	if srv := a.skillServer(ctx, uri); srv != nil {
		// A file of a skill is the server's that listed the skill,
		// whatever another's template would match.
		return srv
	}
	var best *fleet.Server
	bestLen := -1
	for tmpl, r := range a.table(ctx, kindTemplates).byName {
		lit, _, _ := strings.Cut(tmpl, "{")
		if strings.HasPrefix(uri, lit) && len(lit) > bestLen {
			best, bestLen = r.srv, len(lit)
		}
	}
	if best == nil && strings.HasPrefix(uri, "ui://") {
		best = a.viewServer(ctx, uri)
	}
	return best
}

// viewServer is the server of the MCP Apps view uri: the one whose listed
// tools name it in _meta.ui.resourceUri (or the older _meta
// "ui/resourceUri"), as hosts find a view, which servers often leave out
// of resources/list; else the one whose tools/call result on /mcp named
// it (noteView). A view that tools of two servers name is nobody's on
// /mcp (each server's endpoint reads its own).
func (a *aggregate) viewServer(ctx context.Context, uri string) *fleet.Server {
	t := a.table(ctx, kindTools)
	var found *fleet.Server
	for i, item := range t.items {
		if viewOf(rpc.Member(item, "_meta")) != uri {
			continue
		}
		srv := t.byName[t.keys[i]].srv
		if found != nil && found != srv {
			if _, warned := a.sharedViews.LoadOrStore(uri, true); !warned {
				a.g.log.Warn("an MCP Apps view is named by tools of two servers: /mcp reads it from neither", "uri", uri, "servers", found.Name()+", "+srv.Name())
			}
			return nil
		}
		found = srv
	}
	if found == nil {
		// Named only in a result (noteView), by one server that is
		// still the fleet's.
		a.viewsMu.Lock()
		srv := a.resultViews[uri]
		a.viewsMu.Unlock()
		if srv != nil && a.g.fleet.Get(srv.Name()) == srv {
			found = srv
		}
	}
	return found
}

// complete routes completion/complete by its reference.
func (a *aggregate) complete(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	var params map[string]json.RawMessage
	if json.Unmarshal(m.Params, &params) != nil {
		return errorResponse(m.ID, rpc.InvalidParams, "params must be an object")
	}
	var ref map[string]json.RawMessage
	if json.Unmarshal(params["ref"], &ref) != nil {
		return errorResponse(m.ID, rpc.InvalidParams, "missing ref")
	}
	var typ, name, uri string
	_ = json.Unmarshal(ref["type"], &typ)
	_ = json.Unmarshal(ref["name"], &name)
	_ = json.Unmarshal(ref["uri"], &uri)
	switch typ {
	case "ref/prompt":
		r, ok := a.table(ctx, kindPrompts).byName[name]
		if !ok {
			return errorResponse(m.ID, rpc.InvalidParams, "unknown prompt: "+name)
		}
		ref["name"], _ = json.Marshal(r.name)
		params["ref"], _ = json.Marshal(ref)
		body, _ := json.Marshal(params)
		return a.g.forward(ctx, w, r.srv, m.Method, body, m.ID, related)
	case "ref/resource":
		srv := a.resourceServer(ctx, uri)
		if srv == nil {
			return errorResponse(m.ID, rpc.InvalidParams, "unknown resource: "+uri)
		}
		return a.g.forward(ctx, w, srv, m.Method, m.Params, m.ID, related)
	}
	return errorResponse(m.ID, rpc.InvalidParams, "unknown ref type: "+typ)
}

// forwardSubscription forwards resources/subscribe or unsubscribe and
// records it in the gateway's interest book, which the fleet replays to a
// restarted or woken server and which keeps a subscribed server awake,
// and which says who receives a resource's updates. A subscription is recorded before it is sent (so the
// server cannot sleep between its answer and the record) and forgotten if
// the server refuses it; an unsubscription is forgotten before it is sent.
func (g *Gateway) forwardSubscription(ctx context.Context, s *Session, srv *fleet.Server, m *rpc.Message, uri string, related Sink) *rpc.Message {
	if m.Method == "resources/subscribe" {
		g.interests.Subscribe(srv, s.Key(), bookInstance(srv, legacySender(s)), uri)
		resp := g.forward(ctx, legacySender(s), srv, m.Method, m.Params, m.ID, related)
		if resp.Error != nil {
			g.interests.Unsubscribe(srv, s.Key(), uri)
		}
		return resp
	}
	// Forgotten first: what the server is told next (a modern server's
	// listen names the subscriptions left) no longer has it.
	g.interests.Unsubscribe(srv, s.Key(), uri)
	return g.forward(ctx, legacySender(s), srv, m.Method, m.Params, m.ID, related)
}

// notifyServer passes a client notification to the running instance that
// serves s on srv (its own per-session instance, else the shared one),
// counted as that instance's activity; it starts nothing.
func (g *Gateway) notifyServer(srv *fleet.Server, s *Session, m *rpc.Message) {
	l, ok := srv.Peek(srv.InstanceKey(s.Key(), s.Identity()))
	if !ok {
		return
	}
	if l.Conn() == nil {
		l.Release()
		return
	}
	// The lease is held until the notification is written, keeping the
	// server awake; the write happens on the server's outbox, so a server
	// that stops reading holds up nothing else.
	if modernConn(l.Conn()) && !revision.Has(revision.Modern, m.Method) {
		// A notification the modern era has not (roots/list_changed: a
		// modern server asks for roots in each request's input).
		l.Release()
		g.log.Debug("client notification not passed to a modern server: the revision has no such method", "server", srv.Name(), "method", m.Method)
		return
	}
	if m.Method == "notifications/roots/list_changed" {
		if !srv.Config().Declares("roots") {
			// It was declared no roots: it has none to ask for again.
			l.Release()
			return
		}
		g.reg.rootsAsked(l.Conn())
	}
	posted := g.outbox.post(l.Conn(), func() {
		defer l.Release()
		if err := l.Conn().Notify(m.Method, m.Params); err != nil {
			g.log.Debug("client notification not delivered", "server", srv.Name(), "method", m.Method, "err", err)
		}
	})
	if !posted {
		l.Release()
		g.log.Warn("client notification dropped: the server is not reading its input", "server", srv.Name(), "method", m.Method)
	}
}

// setLevel records the log level s asks for on each of servers and applies
// it, in parallel and bounded, to the running instances that serve s and
// log. An instance shared by several sessions is set to the most verbose
// level any of them asked for; each session still receives only messages
// at or above its own level. A server that starts later is told at its
// start.
func (g *Gateway) setLevel(ctx context.Context, s *Session, servers []*fleet.Server, m *rpc.Message) *rpc.Message {
	level := stringField(m.Params, "level")
	if interest.LogSeverity(level) < 0 {
		return errorResponse(m.ID, rpc.InvalidParams, fmt.Sprintf("invalid log level %q: one of debug, info, notice, warning, error, critical, alert, emergency", level))
	}
	var wg sync.WaitGroup
	for _, srv := range servers {
		g.interests.SetLogLevel(srv, s.Key(), bookInstance(srv, legacySender(s)), level)
		l, ok := srv.Peek(srv.InstanceKey(s.Key(), s.Identity()))
		if !ok {
			continue
		}
		if l.Conn() == nil || !l.Conn().Init().Has("logging") {
			l.Release()
			continue
		}
		wg.Go(func() {
			defer l.Release()
			cctx, cancel := context.WithTimeout(ctx, fanOutTimeout)
			defer cancel()
			params := mustJSON(map[string]string{"level": g.interests.EffectiveLogLevel(srv, bookInstance(srv, legacySender(s)))})
			if resp, err := l.Conn().Call(cctx, m.Method, params); err != nil || resp.Error != nil {
				g.log.Debug("logging/setLevel not applied", "server", srv.Name(), "err", err)
			}
		})
	}
	wg.Wait()
	return resultResponse(m.ID, json.RawMessage(`{}`))
}

// declareCaps records the capabilities s's initialize m declares, before
// anything the initialize starts: a per-session instance it starts (the
// single endpoint's, for a server with no cached initialize result) is
// declared them (SessionCapabilities). initialize records them again.
func (g *Gateway) declareCaps(s *Session, m *rpc.Message) {
	var p struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return // initialize answers the error
	}
	g.reg.setCaps(s, p.Capabilities, "")
}

// initialize answers the client's initialize: the protocol version it asked
// for when mcpvisor speaks it, else the newest mcpvisor speaks.
func (g *Gateway) initialize(s *Session, m *rpc.Message, caps, serverInfo json.RawMessage, instructions string) *rpc.Message {
	var p struct {
		ProtocolVersion string                     `json:"protocolVersion"`
		Capabilities    map[string]json.RawMessage `json:"capabilities"`
		ClientInfo      json.RawMessage            `json:"clientInfo"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return errorResponse(m.ID, rpc.InvalidParams, "initialize: "+err.Error())
	}
	s.setClientInfo(p.ClientInfo)
	version := p.ProtocolVersion
	if !supported(version) {
		version = latestVersion
	}
	g.reg.setCaps(s, p.Capabilities, version)
	res := map[string]any{"protocolVersion": version, "capabilities": caps, "serverInfo": serverInfo}
	if instructions != "" {
		res["instructions"] = instructions
	}
	return resultResponse(m.ID, mustJSON(res))
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
