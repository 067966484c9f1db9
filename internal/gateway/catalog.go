package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/store"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A kind of list a server serves: its list method, the member of the
// result that holds the items, and the capability that announces it.
type listKind struct {
	method, member, capability string
}

var (
	kindTools     = listKind{"tools/list", "tools", "tools"}
	kindPrompts   = listKind{"prompts/list", "prompts", "prompts"}
	kindResources = listKind{"resources/list", "resources", "resources"}
	kindTemplates = listKind{"resources/templates/list", "resourceTemplates", "resources"}
)

// catalog caches one server's lists, as the server sent their items, and
// its initialize result, so that a dormant or never-started server still
// lists its tools. It is written through to the persisted store, keyed by
// the server's launch hash (a config change starts afresh), and refreshed
// when the server says a list changed or reconnects.
type catalog struct {
	mu    sync.Mutex
	lists map[string][]json.RawMessage
	init  json.RawMessage
}

func (c *catalog) getInit() json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.init
}

func (c *catalog) putInit(raw json.RawMessage) (changed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed = string(c.init) != string(raw)
	c.init = raw
	return changed
}

func (c *catalog) get(k listKind) ([]json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	items, ok := c.lists[k.member]
	return items, ok
}

// put stores a list and reports whether it differs from what was there.
func (c *catalog) put(k listKind, items []json.RawMessage) (changed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists == nil {
		c.lists = map[string][]json.RawMessage{}
	}
	old, had := c.lists[k.member]
	c.lists[k.member] = items
	return !had || !sameItems(old, items)
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

func (c *catalog) drop(members ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range members {
		delete(c.lists, m)
	}
}

// invalidate refreshes a server's list after its list_changed
// notification: the cached list is dropped, and fetched again in the
// background so that the persisted copy stays current.
func (g *Gateway) invalidate(server, method string) {
	cat := g.catalogs[server]
	if cat == nil {
		return
	}
	var kinds []listKind
	switch method {
	case "notifications/tools/list_changed":
		kinds = []listKind{kindTools}
	case "notifications/prompts/list_changed":
		kinds = []listKind{kindPrompts}
	case "notifications/resources/list_changed":
		kinds = []listKind{kindResources, kindTemplates}
	}
	for _, k := range kinds {
		cat.drop(k.member)
	}
	g.agg.invalidate()
	if srv := g.fleet.Get(server); srv != nil {
		go g.refresh(srv, kinds...)
	}
}

// Reconnected refreshes everything cached about a server that restarted or
// woke up, and tells the sessions that see it about the lists that changed
// (the fleet calls it).
func (g *Gateway) Reconnected(s *fleet.Server) {
	go g.refresh(s, kindTools, kindPrompts, kindResources, kindTemplates)
}

// refresh fetches kinds from a running server, stores them, and notifies
// sessions of the lists that changed.
func (g *Gateway) refresh(s *fleet.Server, kinds ...listKind) {
	// A lease, so the server is not put to sleep in the middle; a server
	// that is not running has nothing new to say.
	l, ok := s.Peek("")
	if !ok {
		return
	}
	defer l.Release()
	c := l.Conn()
	cat := g.catalogs[s.Name()]
	ctx, cancel := context.WithTimeout(context.Background(), s.Config().RequestTimeout+time.Second)
	defer cancel()
	g.rememberInit(s, c)
	notified := map[string]bool{}
	for _, k := range kinds {
		items, err := g.fetchFrom(ctx, s, c, k)
		if err != nil {
			g.log.Debug("list refresh failed", "server", s.Name(), "list", k.member, "err", err)
			continue
		}
		if !cat.put(k, items) {
			continue
		}
		g.persist(s, k, items)
		g.agg.invalidate()
		n := listChangedFor(k)
		if notified[n] {
			continue
		}
		notified[n] = true
		for _, sess := range g.sessionsFor(s.Name()) {
			_ = sess.Out().Send(&rpc.Message{Method: n})
		}
	}
}

func listChangedFor(k listKind) string {
	switch k {
	case kindTools:
		return "notifications/tools/list_changed"
	case kindPrompts:
		return "notifications/prompts/list_changed"
	}
	return "notifications/resources/list_changed"
}

// SetStore attaches the persisted cache and loads what it holds for the
// configured servers (under their current launch hashes). Entries of
// servers no longer configured, or configured differently, are pruned.
func (g *Gateway) SetStore(st *store.Store) {
	g.store = st
	want := map[string]string{}
	for _, s := range g.fleet.Servers() {
		want[s.Name()] = s.Config().LaunchHash()
	}
	for name, l := range st.Load(want) {
		cat := g.catalogs[name]
		if cat == nil {
			continue
		}
		if len(l.Init) > 0 {
			cat.putInit(l.Init)
		}
		for _, k := range []listKind{kindTools, kindPrompts, kindResources, kindTemplates} {
			if items, ok := l.Get(store.Kind(k.member)); ok {
				cat.put(k, items)
			}
		}
	}
	if n, err := st.Prune(want); err == nil && n > 0 {
		g.log.Info("dropped cached lists of servers no longer configured as they were", "count", n)
	}
}

// Cached reports whether the server's tools are known without starting it.
func (g *Gateway) Cached(name string) bool {
	cat := g.catalogs[name]
	if cat == nil {
		return false
	}
	_, ok := cat.get(kindTools)
	return ok
}

func (g *Gateway) persist(s *fleet.Server, k listKind, items []json.RawMessage) {
	if g.store == nil {
		return
	}
	if err := g.store.PutList(s.Name(), s.Config().LaunchHash(), store.Kind(k.member), nonNil(items)); err != nil {
		g.log.Warn("could not persist a server's list", "server", s.Name(), "list", k.member, "err", err)
	}
}

// rememberInit caches (and persists) a server's initialize result.
func (g *Gateway) rememberInit(s *fleet.Server, c fleet.Conn) {
	cat := g.catalogs[s.Name()]
	if cat == nil || c.Init() == nil {
		return
	}
	if cat.putInit(c.Init().Raw) && g.store != nil {
		if err := g.store.PutInit(s.Name(), s.Config().LaunchHash(), c.Init().Raw); err != nil {
			g.log.Warn("could not persist a server's initialize result", "server", s.Name(), "err", err)
		}
	}
}

// fetch returns a server's whole list (every page), from the cache when it
// is there — a dormant server is not woken for it. A server without the
// capability has an empty list.
func (g *Gateway) fetch(ctx context.Context, srv *fleet.Server, k listKind) ([]json.RawMessage, error) {
	cat := g.catalogs[srv.Name()]
	if items, ok := cat.get(k); ok {
		return items, nil
	}
	l, err := srv.Acquire(ctx, "")
	if err != nil {
		return nil, err
	}
	defer l.Release()
	return g.learnFrom(ctx, srv, l.Conn(), k)
}

// learnFrom fetches kind k from conn and caches and persists it.
func (g *Gateway) learnFrom(ctx context.Context, srv *fleet.Server, conn fleet.Conn, k listKind) ([]json.RawMessage, error) {
	g.rememberInit(srv, conn)
	items, err := g.fetchFrom(ctx, srv, conn, k)
	if err != nil {
		return nil, err
	}
	g.catalogs[srv.Name()].put(k, items)
	g.persist(srv, k, items)
	return items, nil
}

// fetchFrom lists every page of kind k from conn.
func (g *Gateway) fetchFrom(ctx context.Context, srv *fleet.Server, conn fleet.Conn, k listKind) ([]json.RawMessage, error) {
	if !conn.Init().Has(k.capability) {
		return nil, nil
	}
	var items []json.RawMessage
	cursor := ""
	for page := 0; ; page++ {
		if page > 1000 {
			return nil, fmt.Errorf("server %s: %s: more than 1000 pages", srv.Name(), k.method)
		}
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		resp, err := conn.Call(ctx, k.method, params)
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("server %s: %s: %s", srv.Name(), k.method, resp.Error.Message)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(resp.Result, &body); err != nil {
			return nil, fmt.Errorf("server %s: %s: malformed result: %v", srv.Name(), k.method, err)
		}
		var pageItems []json.RawMessage
		if raw := body[k.member]; len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &pageItems); err != nil {
				return nil, fmt.Errorf("server %s: %s: malformed %s: %v", srv.Name(), k.method, k.member, err)
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
	return items, nil
}

// Learn starts, in the background and at most concurrency at a time, each
// server whose tools are not cached, fetches all its lists (persisting
// them), and puts it back to sleep unless a client used it meanwhile. It
// returns when every server was tried or ctx ended.
func (g *Gateway) Learn(ctx context.Context, concurrency int) {
	if concurrency <= 0 {
		concurrency = 2
	}
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, s := range g.fleet.Servers() {
		if g.Cached(s.Name()) || s.Config().Eager {
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
			cfg := s.Config()
			lctx, cancel := context.WithTimeout(ctx, cfg.InitTimeout+cfg.RequestTimeout)
			defer cancel()
			// One lease for the whole lesson; a client request that comes
			// meanwhile (counted after ours) keeps the server awake after.
			l, err := s.Acquire(lctx, "")
			if err != nil {
				g.log.Warn("could not learn a server's lists", "server", s.Name(), "err", err)
				return
			}
			before := s.Requests()
			for _, k := range []listKind{kindTools, kindPrompts, kindResources, kindTemplates} {
				if _, err := g.learnFrom(lctx, s, l.Conn(), k); err != nil {
					g.log.Warn("could not learn a server's lists", "server", s.Name(), "list", k.member, "err", err)
					break
				}
			}
			l.Release()
			g.agg.invalidate()
			s.Rest(before)
		})
	}
	wg.Wait()
}
