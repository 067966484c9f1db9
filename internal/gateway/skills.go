package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// The skills extension (SEP-2640) on the aggregated endpoint.
//
// A skill is a directory of files a server serves under a URI,
// skill://<skill-path>/SKILL.md and the files beside it, read with
// resources/read; skills/list enumerates a server's skills (each entry
// naming every file with its digest and size), skills/get returns one,
// and resources/directory/read lists a directory of one.
//
// /mcp declares the extension when a server does (skillsCap), and serves
// it without rewriting anything: a skill's URIs are its server's, as a
// resource's are on /mcp, so that an entry's digests, its SKILL.md's
// frontmatter name and what resources/list says of the SKILL.md all stay
// the server's own, and a client can give /mcp a URI it learned from a
// server's endpoint. SEP-2640 lets a host insert a per-server segment
// instead; mcpvisor does not, because the resources /mcp lists (a skill's
// SKILL.md among them) and reads are routed by their URI unchanged, and a
// skill whose SKILL.md had one URI in resources/list and another in
// skills/list would be two things to a client.
//
// skills/list fans out to every server that declares the extension (no
// other is sent it), in parallel, each bounded by fanOutTimeout over all
// its pages (and each page by the server's request timeout), as the
// client's own request (its era, its instance of a per-session server);
// every page of each is followed (at most skillsMaxPages). A server that
// fails is left out and the others answered (with every one failing, the
// client is told each one's failure). Entries pass through byte for byte, in
// the servers' name order. A skill two servers list (the same skill
// directory) is the first one's, as resources/list gives the first the
// SKILL.md both list: the other's entry is left out, the collision is
// reported in status (Collisions) and warned of once. The listing is
// paged as the aggregated lists are: whole, or with a page size
// (SetPageSize) in pages of mcpvisor's own cursors, each resuming after
// the entry the last page ended with; each page is listed anew from the
// servers (nothing of a listing is kept but the routes it shows). Its ttlMs is the least any server
// gave (0 for a server that gives none: a 2025 server of the extension's
// first drafts), its cacheScope private when any server's, or the
// endpoint's (aggregate.scope), is.
//
// A URI is routed to a server by the skills it listed (skillIndex): the
// server that listed the skill whose directory holds it (the longest
// listed skill directory the URI is in). skills/get, resources/read of a
// file resources/list does not name, resources/directory/read and any
// other method whose params carry such a uri reach that server
// (aggregate.unknown and resourceServer route them here). What is known
// comes from skills/list: the clients' on /mcp, and mcpvisor's own,
// made when a URI is in no known skill — at most once per
// missRebuildEvery, shared by the callers that miss meanwhile, bounded by
// fanOutTimeout per server. What a server listed is kept skillsIndexTTL
// from its listing, at most skillsMaxIndexed skills a server. When one
// server only declares the extension, any skill:// URI not otherwise
// routed is its (a server serves skills/get for skills it does not list,
// and its error is the extension's for one it does not have); with
// several, a URI in no skill any lists is nobody's on /mcp (each server's
// endpoint serves it).

// skillsExtension is the skills extension's identifier (SEP-2640).
const skillsExtension = "io.modelcontextprotocol/skills"

const (
	// skillsMaxPages bounds the pages of one server's skills/list that
	// are followed.
	skillsMaxPages = 100
	// skillsMaxIndexed bounds the skills of one server that the index
	// routes by (the listing has them all).
	skillsMaxIndexed = 10_000
	// skillsIndexTTL is how long what a server listed routes its skills'
	// URIs: the kept aggregated tables' idle bound.
	skillsIndexTTL = TableIdle
)

// skillsCap is the skills extension's settings on the aggregated
// endpoint, merged from the servers' (inits), or nil when none offers it:
// {"directoryRead":true} when a server that offers it does directory
// reads, else {}. A directory read /mcp gets for the skill of a server
// that did not declare directoryRead is refused there (skillRequest):
// the server never gets a method its client must not send it.
func skillsCap(inits []*fleet.InitResult) json.RawMessage {
	declared, dirs := false, false
	for _, in := range inits {
		ext := serverExtension(in, skillsExtension)
		if !declaresSkills(ext) {
			continue
		}
		declared = true
		var s struct {
			DirectoryRead bool `json:"directoryRead"`
		}
		if json.Unmarshal(ext, &s) == nil && s.DirectoryRead {
			dirs = true
		}
	}
	switch {
	case !declared:
		return nil
	case dirs:
		return json.RawMessage(`{"directoryRead":true}`)
	}
	return json.RawMessage(`{}`)
}

// declaresSkills reports whether ext, a server's settings of the
// extension, declares it.
func declaresSkills(ext json.RawMessage) bool { return len(ext) > 0 && string(ext) != "null" }

// skillServers are the servers that declare the skills extension, in the
// fleet's order (a server whose initialize result is not known is learned
// first: eachInit).
func (a *aggregate) skillServers(ctx context.Context) []*fleet.Server {
	var out []*fleet.Server
	a.eachInit(ctx, func(srv *fleet.Server, in *fleet.InitResult) {
		if declaresSkills(serverExtension(in, skillsExtension)) {
			out = append(out, srv)
		}
	})
	return out
}

// skillRoot is the skill directory of a skills/list entry's uri: the
// uri without its /SKILL.md (or whatever last segment it names).
func skillRoot(uri string) string {
	if root, ok := strings.CutSuffix(uri, "/SKILL.md"); ok {
		return root
	}
	if i := strings.LastIndexByte(uri, '/'); i > strings.Index(uri, "://")+3 {
		return uri[:i]
	}
	return uri
}

// skillsOf is one server's listing: its entries, and its caching hints.
type skillsOf struct {
	entries []json.RawMessage
	uris    []string // each entry's uri
	ttl     int64    // the least ttlMs of its pages; 0 when a page had none
	private bool     // a page's cacheScope was private
}

// roots are the skill directories of the listing, at most
// skillsMaxIndexed.
func (l *skillsOf) roots() []string {
	out := make([]string, 0, min(len(l.uris), skillsMaxIndexed))
	for _, uri := range l.uris[:min(len(l.uris), skillsMaxIndexed)] {
		out = append(out, skillRoot(uri))
	}
	return out
}

// addPage adds a page of skills/list (its result) to l, and returns its
// nextCursor.
func (l *skillsOf) addPage(result json.RawMessage) (string, error) {
	var page struct {
		ResultType string            `json:"resultType"`
		Skills     []json.RawMessage `json:"skills"`
		NextCursor string            `json:"nextCursor"`
		TTLMs      *int64            `json:"ttlMs"`
		CacheScope string            `json:"cacheScope"`
	}
	if err := json.Unmarshal(result, &page); err != nil {
		return "", fmt.Errorf("malformed skills/list result: %v", err)
	}
	if page.ResultType != "" && page.ResultType != "complete" {
		return "", fmt.Errorf("skills/list answered with a result of type %q", page.ResultType)
	}
	for _, e := range page.Skills {
		// Scanned, not decoded: an entry that is no object, or has no
		// uri, names nothing to read.
		if uri, ok := rpc.StringMember(e, "uri"); ok && uri != "" {
			l.entries = append(l.entries, e)
			l.uris = append(l.uris, uri)
		}
	}
	ttl := int64(0) // a page without one may not be kept
	if page.TTLMs != nil {
		ttl = max(*page.TTLMs, 0)
	}
	if l.ttl < 0 || ttl < l.ttl {
		l.ttl = ttl
	}
	if page.CacheScope == "private" {
		l.private = true
	}
	return page.NextCursor, nil
}

// skillsList answers skills/list on the aggregated endpoint: every
// server's skills, as the package comment says.
func (a *aggregate) skillsList(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	params := m.Params
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{}`)
	}
	var p struct {
		Cursor json.RawMessage `json:"cursor"`
	}
	if json.Unmarshal(params, &p) != nil {
		return errorResponse(m.ID, rpc.InvalidParams, "skills/list: params must be an object")
	}
	cursor := ""
	if len(p.Cursor) > 0 && string(p.Cursor) != "null" {
		var ok bool
		if cursor, ok = rpc.String(p.Cursor); !ok {
			return errorResponse(m.ID, rpc.InvalidParams, "skills/list: the cursor must be a string")
		}
	}
	size := int(a.g.pageSize.Load())
	if cursor != "" && size == 0 {
		return errorResponse(m.ID, rpc.InvalidParams, "invalid cursor: the aggregated endpoint returns every skill in one page")
	}
	if raw, err := base64.RawURLEncoding.DecodeString(cursor); cursor != "" && (err != nil || !strings.HasPrefix(string(raw), "p1:")) {
		// Refused before any server is asked (or woken).
		return errorResponse(m.ID, rpc.InvalidParams, "invalid cursor: not one this endpoint issued; list again without a cursor")
	}
	servers := a.skillServers(ctx)
	if len(servers) == 0 {
		return errorResponse(m.ID, rpc.MethodNotFound, "method not found: skills/list (no server of the aggregated endpoint declares the skills extension)")
	}
	// Each server is asked as the client asked, without the client's
	// cursor (mcpvisor's, not the server's).
	base := rpc.DropMembers(params, []string{"cursor"}, nil)
	lists := make([]*skillsOf, len(servers))
	errs := make([]error, len(servers))
	relay := a.fanOutSink(related)
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			fctx, cancel := context.WithTimeout(ctx, fanOutTimeout)
			defer cancel()
			sw := w
			if w.req != nil {
				// A request of its own for each server: forward edits
				// a modern request's params as its one goroutine, and
				// a per-session server's instance serves it alone.
				sub := a.g.newModernReq(nil, w.req.msg, w.req.mo, w.req.user)
				defer a.g.endModernReq(sub)
				sw = sender{req: sub}
			}
			lists[i], errs[i] = a.listSkills(fctx, srv, func(params json.RawMessage) *rpc.Message {
				return a.g.forward(fctx, sw, srv, m.Method, params, m.ID, relay)
			}, base)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return errorResponse(m.ID, rpc.BackendUnavailable, fmt.Sprintf("request cancelled while the servers listed their skills: %v", context.Cause(ctx)))
	}
	answered := false
	ttl, private := int64(-1), string(a.scope(m.Method)) == scopePrivate || a.g.filtering()
	var entries []json.RawMessage
	var keys []string
	var failed []string
	now := time.Now()
	for i, srv := range servers {
		a.g.skills.leftOut(a.g, srv, errs[i])
		if errs[i] != nil {
			failed = append(failed, errs[i].Error())
			continue
		}
		answered = true
		a.g.skills.put(srv, lists[i].roots(), now)
		if ttl < 0 || lists[i].ttl < ttl {
			ttl = lists[i].ttl
		}
		private = private || lists[i].private
	}
	if !answered {
		return errorResponse(m.ID, rpc.BackendUnavailable, "no server answered skills/list: "+strings.Join(failed, "; "))
	}
	// Each skill is the first server's in name order, of those that
	// listed it this time (a server that failed now does not hide
	// another's copy); the shared index, which routes, only reports
	// the collisions.
	a.skillOwners(servers)
	firstOf := map[string]*fleet.Server{}
	pol, who := a.g.policy.Load(), requestIdentity(ctx, w)
	for i, srv := range servers {
		if errs[i] != nil {
			continue
		}
		for j, e := range lists[i].entries {
			root := skillRoot(lists[i].uris[j])
			if first, ok := firstOf[root]; ok && first != srv {
				continue
			}
			firstOf[root] = srv
			if !visible(pol, who, srv, policy.KindResource, lists[i].uris[j]) {
				continue // a skill is its server's resource: listed as one would be
			}
			entries = append(entries, e)
			keys = append(keys, lists[i].uris[j])
		}
	}
	next := ""
	if size > 0 {
		from := 0
		if cursor != "" {
			var ok bool
			if from, ok = resume(keys, cursor); !ok {
				return errorResponse(m.ID, rpc.InvalidParams, "invalid cursor: not one this endpoint issued, or its skill is gone; list again without a cursor")
			}
		}
		to := min(from+size, len(entries))
		if to < len(entries) {
			next = pageCursor(to, keys[to-1])
		}
		entries = entries[from:to]
	}
	scope := json.RawMessage(scopePublic)
	if private {
		scope = json.RawMessage(scopePrivate)
	}
	body := map[string]any{"skills": nonNil(entries), "ttlMs": ttl, "cacheScope": scope}
	if next != "" {
		body["nextCursor"] = next
	}
	return resultResponse(m.ID, mustJSON(body))
}

// fanOutSink is related as the forwards of a fan-out share it: marked
// forwarded once, here (a marker is its request's goroutine's alone), and
// sent to by one of them at a time.
func (a *aggregate) fanOutSink(related Sink) Sink {
	if fm, ok := related.(forwardMarker); ok {
		fm.markForwarded()
	}
	if related == nil {
		return nil
	}
	var mu sync.Mutex
	return SinkFunc(func(m *rpc.Message) error {
		mu.Lock()
		defer mu.Unlock()
		return related.Send(m)
	})
}

// listSkills lists srv's skills, every page (at most skillsMaxPages), each
// asked by call with base and the server's cursor.
func (a *aggregate) listSkills(ctx context.Context, srv *fleet.Server, call func(json.RawMessage) *rpc.Message, base json.RawMessage) (*skillsOf, error) {
	l := &skillsOf{ttl: -1}
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page == skillsMaxPages {
			a.g.log.Warn("server's skills listed in part: it has more pages than are followed", "server", srv.Name(), "pages", skillsMaxPages)
			break
		}
		params := base
		if cursor != "" {
			params = rpc.SetMember(base, "cursor", json.RawMessage(strconv.Quote(cursor)))
		}
		resp := call(params)
		if resp.Error != nil {
			return nil, fmt.Errorf("server %s: %s", srv.Name(), resp.Error.Message)
		}
		next, err := l.addPage(resp.Result)
		if err != nil {
			return nil, fmt.Errorf("server %s: %v", srv.Name(), err)
		}
		if next == "" || seen[next] {
			break
		}
		seen[next] = true
		cursor = next
	}
	l.ttl = max(l.ttl, 0)
	return l, nil
}

// skillServer is the server that serves the skill file or directory uri,
// or nil: see the package comment.
func (a *aggregate) skillServer(ctx context.Context, uri string) *fleet.Server {
	servers := a.skillServers(ctx)
	switch {
	case len(servers) == 0:
		return nil
	case len(servers) == 1 && strings.HasPrefix(uri, "skill://"):
		return servers[0]
	}
	ix := &a.g.skills
	srv, known := ix.lookup(a, servers, uri)
	if srv != nil {
		return srv
	}
	// A skill listed since, or a server not yet listed: mcpvisor lists
	// them again, at a bounded rate — for a skill:// URI, or one of a
	// scheme a listed skill has (not for every URI no resource has: an
	// MCP Apps view's, say).
	if !known || !ix.rebuild(ctx, a, servers) {
		return nil
	}
	srv, _ = ix.lookup(a, servers, uri)
	return srv
}

// skillOwners are the servers of the skill directories servers listed
// (skillIndex.owners).
func (a *aggregate) skillOwners(servers []*fleet.Server) map[string]*fleet.Server {
	ix := &a.g.skills
	ix.mu.Lock()
	owners, found := ix.ownersLocked(servers, time.Now())
	ix.mu.Unlock()
	a.reportSkillCollisions(found)
	return owners
}

// reportSkillCollisions makes found, when not nil, the reported
// collisions of skills, warning of each that was not.
func (a *aggregate) reportSkillCollisions(found []string) {
	if found == nil {
		return
	}
	a.mu.Lock()
	var fresh []string
	for _, c := range found {
		if _, known := slices.BinarySearch(a.collisions, c); !known {
			fresh = append(fresh, c)
		}
	}
	a.collisions = mergeCollisions(a.collisions, "skills", found)
	a.mu.Unlock()
	for _, c := range fresh {
		a.g.log.Warn("a skill two servers serve: /mcp serves the first's", "detail", c)
	}
}

// skillIndex is what the servers of the aggregated endpoint listed of
// their skills, by which a URI is routed to the server of its skill.
type skillIndex struct {
	mu  sync.Mutex
	per map[*fleet.Server]listedSkills
	// owners is the server of each listed skill directory, made from per
	// for the servers of.
	owners map[string]*fleet.Server
	of     []*fleet.Server
	// schemes are the URI schemes of the skills in owners.
	schemes map[string]bool
	dirty   bool      // per changed since owners was made
	expiry  time.Time // when the oldest of per that owners has expires
	// missAt is when a URI in no known skill last made mcpvisor list the
	// skills; building, the listing in progress (closed when done).
	missAt   time.Time
	building chan struct{}
	// out are the servers the last listing left out, by name.
	out map[string]bool
}

// listedSkills are a server's skill directories as it last listed them.
type listedSkills struct {
	roots []string
	at    time.Time
}

// put records the skill directories srv listed at now.
func (ix *skillIndex) put(srv *fleet.Server, roots []string, now time.Time) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.per == nil {
		ix.per = map[*fleet.Server]listedSkills{}
	}
	ix.per[srv] = listedSkills{roots: roots, at: now}
	ix.dirty = true
}

// reset forgets every server's skills (a reload may have changed which
// servers there are, and in which order).
func (ix *skillIndex) reset() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.per, ix.owners, ix.of, ix.schemes, ix.dirty = nil, nil, nil, nil, false
}

// leftOut records whether the listing left srv out (err), logging a
// server's leaving (with why) and its return.
func (ix *skillIndex) leftOut(g *Gateway, srv *fleet.Server, err error) {
	ix.mu.Lock()
	was := ix.out[srv.Name()]
	if err != nil {
		if ix.out == nil {
			ix.out = map[string]bool{}
		}
		ix.out[srv.Name()] = true
	} else {
		delete(ix.out, srv.Name())
	}
	ix.mu.Unlock()
	switch {
	case err != nil && !was:
		g.log.Warn("server left out of the aggregated skills list", "server", srv.Name(), "err", err)
	case err != nil:
		g.log.Debug("server still left out of the aggregated skills list", "server", srv.Name(), "err", err)
	case was:
		g.log.Info("server back in the aggregated skills list", "server", srv.Name())
	}
}

// ownersLocked is the server of each skill directory that servers (in
// their order) listed within skillsIndexTTL of now: the first that listed
// it. found are the collisions when owners was made anew (nil when it was
// not); ix.mu is held.
func (ix *skillIndex) ownersLocked(servers []*fleet.Server, now time.Time) (owners map[string]*fleet.Server, found []string) {
	if !ix.dirty && slices.Equal(ix.of, servers) && now.Before(ix.expiry) {
		return ix.owners, nil
	}
	owners = map[string]*fleet.Server{}
	found = []string{}
	ix.expiry = now.Add(skillsIndexTTL)
	for srv, l := range ix.per {
		if now.Sub(l.at) >= skillsIndexTTL || !slices.Contains(servers, srv) {
			delete(ix.per, srv) // stale, or no longer a server of the extension
		}
	}
	for _, srv := range servers {
		l, ok := ix.per[srv]
		if !ok {
			continue
		}
		ix.expiry = minTime(ix.expiry, l.at.Add(skillsIndexTTL))
		for _, root := range l.roots {
			prev, dup := owners[root]
			switch {
			case !dup:
				owners[root] = srv
			case prev != srv:
				found = append(found, fmt.Sprintf("skills %q: served by %s, also listed by %s (hidden)", root, prev.Name(), srv.Name()))
			}
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	ix.schemes = map[string]bool{}
	for root := range owners {
		if name, _, ok := strings.Cut(root, "://"); ok {
			ix.schemes[name] = true
		}
	}
	ix.owners, ix.of, ix.dirty = owners, slices.Clone(servers), false
	return owners, found
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lookup is the server of the listed skill whose directory holds uri (the
// longest such directory), or nil; scheme reports whether uri's scheme is
// one skills have: skill, or one a listed skill's URI has.
func (ix *skillIndex) lookup(a *aggregate, servers []*fleet.Server, uri string) (srv *fleet.Server, scheme bool) {
	ix.mu.Lock()
	owners, found := ix.ownersLocked(servers, time.Now())
	name, _, ok := strings.Cut(uri, "://")
	scheme = ok && (name == "skill" || ix.schemes[name])
	srv = owners[uri]
	for u, floor := uri, len(name)+3; srv == nil && ok; { // a directory is more than the scheme
		i := strings.LastIndexByte(u, '/')
		if i <= floor {
			break
		}
		u = u[:i]
		srv = owners[u]
	}
	ix.mu.Unlock()
	a.reportSkillCollisions(found)
	return srv, scheme
}

// rebuild lists the skills of servers (mcpvisor's own skills/list, on
// each server's shared instance, started if need be) unless a URI in no
// known skill made it do so within missRebuildEvery; a listing in
// progress is waited for instead, within ctx. It reports whether a
// listing ended that the caller may look in again.
func (ix *skillIndex) rebuild(ctx context.Context, a *aggregate, servers []*fleet.Server) bool {
	ix.mu.Lock()
	done := ix.building
	if done == nil {
		now := time.Now()
		if now.Sub(ix.missAt) < missRebuildEvery {
			ix.mu.Unlock()
			return false
		}
		ix.missAt = now
		done = make(chan struct{})
		ix.building = done
		bctx := context.WithoutCancel(ctx)
		go func() {
			a.indexSkills(bctx, servers)
			ix.mu.Lock()
			ix.building = nil
			ix.mu.Unlock()
			close(done)
		}()
	}
	ix.mu.Unlock()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// indexSkills lists the skills of each of servers, in parallel, each
// bounded by fanOutTimeout, into the index; a server that fails keeps
// what it listed before.
func (a *aggregate) indexSkills(ctx context.Context, servers []*fleet.Server) {
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, fanOutTimeout)
			defer cancel()
			lease, err := srv.Acquire(lctx, "")
			if err != nil {
				a.g.log.Debug("skills not listed for routing", "server", srv.Name(), "err", err)
				return
			}
			defer lease.Release()
			conn := lease.Conn()
			if conn == nil {
				return
			}
			l, err := a.listSkills(lctx, srv, func(params json.RawMessage) *rpc.Message {
				resp, err := conn.Call(lctx, "skills/list", params)
				if err != nil {
					return errorResponse(nil, rpc.BackendUnavailable, err.Error())
				}
				return resp
			}, json.RawMessage(`{}`))
			if err != nil {
				a.g.log.Debug("skills not listed for routing", "server", srv.Name(), "err", err)
				return
			}
			a.g.skills.put(srv, l.roots(), time.Now())
		})
	}
	wg.Wait()
}

// skillRequest serves skills/get and resources/directory/read on /mcp:
// at the server of the skill the uri is in. A uri that is missing, in no
// server's skill, or (a directory read) of a server that does not offer
// directory reads gets the extension's -32602, and reaches no server.
func (a *aggregate) skillRequest(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	uri, _ := rpc.StringMember(m.Params, "uri")
	if uri == "" {
		return errorResponse(m.ID, rpc.InvalidParams, m.Method+": params.uri (a string) is required")
	}
	srv := a.resourceServer(ctx, uri)
	if ctx.Err() != nil {
		return errorResponse(m.ID, rpc.BackendUnavailable, fmt.Sprintf("request cancelled while the skills were listed: %v", context.Cause(ctx)))
	}
	if srv == nil {
		return errorResponse(m.ID, rpc.InvalidParams, m.Method+": "+uri+" is in no skill of the servers of /mcp (a server's own endpoint, /servers/NAME/mcp, reaches the skills it does not list)")
	}
	if m.Method == "resources/directory/read" && !directoryRead(srv) {
		return errorResponse(m.ID, rpc.InvalidParams, m.Method+": server "+srv.Name()+", whose skill "+uri+" is, does not offer directory reads (its skills extension does not declare directoryRead)")
	}
	return a.g.forward(ctx, w, srv, m.Method, m.Params, m.ID, related)
}

// directoryRead reports whether srv's skills extension, as its known
// initialize result declares it, offers resources/directory/read.
func directoryRead(srv *fleet.Server) bool {
	in := srv.Catalog().KnownInit()
	if in == nil {
		return false
	}
	var s struct {
		DirectoryRead bool `json:"directoryRead"`
	}
	return json.Unmarshal(serverExtension(in, skillsExtension), &s) == nil && s.DirectoryRead
}
