package fleet

import (
	"context"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// The fleet's side of the seam with package catalog: each Server holds
// its catalog (lists, definitions, pinning) and calls it where the
// lifecycle needs it — a server going dormant spills it, a start, a wake
// or a list_changed refreshes it, a reload relaunches it — and the
// catalog reaches back only through catalog.Host (serverHost) and the
// fleet's catalog.Env.

// allKinds is every list kind a catalog keeps.
var allKinds = catalog.AllKinds()

// Catalog is what is known of the server's lists and definitions, whether
// or not it runs: the gateway lists from it, the admin API reads and
// approves its definitions there.
func (s *Server) Catalog() *catalog.Catalog { return &s.cat }

// serverHost is a Server as its catalog sees it (catalog.Host): a
// conversion, not a copy, whose methods are not the Server's own.
type serverHost Server

func (h *serverHost) server() *Server { return (*Server)(h) }

func (h *serverHost) Config() *config.Server { return h.server().Config() }

func (h *serverHost) Init() *InitResult { return h.server().liveInit() }

func (h *serverHost) Acquire(ctx context.Context) (catalog.Lease, error) {
	l, err := h.server().Acquire(ctx, "")
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (h *serverHost) Peek() (catalog.Lease, bool) {
	l, ok := h.server().Peek("")
	if !ok {
		return nil, false
	}
	return l, true
}

func (h *serverHost) Env() *catalog.Env { return &h.f.catEnv }

func (h *serverHost) ListsChanged(kinds []catalog.ListKind) {
	h.server().f.listsChanged(h.server(), kinds)
}

// Process is the leased process as the catalog sees it: its connection,
// the launch its instance was made under, the session it is private to,
// and what it lists, for catalog.Catalog.CheckTool.
func (l *Lease) Process() catalog.Process {
	p := catalog.Process{Launched: l.in.cfg, Session: l.in.key, Tools: &l.in.tools}
	if l.conn != nil {
		p.Conn = l.conn
	}
	return p
}

// initCatalogEnv makes f.catEnv what every catalog of f shares; its
// store is set by SetStore.
func (f *Fleet) initCatalogEnv() {
	f.catEnv.Log = f.log
	f.catEnv.Spawn = f.spawn
	f.catEnv.Closed = ErrFleetClosed
	f.catEnv.Emit = func(e catalog.Event) {
		f.emit(Event{Server: e.Server, Session: e.Session, Type: e.Type, Details: e.Details})
	}
}

func (f *Fleet) listsChanged(s *Server, kinds []catalog.ListKind) {
	if f.opts.OnListsChanged != nil {
		f.opts.OnListsChanged(s, kinds)
	}
}

// requestRefresh asks the server's catalog to fetch kinds again from the
// running shared instance, in the background.
func (s *Server) requestRefresh(kinds ...catalog.ListKind) { s.cat.Refresh(kinds...) }

// listChanged hands a list_changed of the shared instance to the catalog.
func (s *Server) listChanged(method string) { s.cat.ListChanged(method) }

// cachedVersion is the protocol version the server spoke when its lists
// were last learned, or "".
func (s *Server) cachedVersion() string { return s.cat.CachedVersion() }

// toolsChanged records that the instance's process said its tools list
// changed (catalog.LiveTools.Changed).
func (in *instance) toolsChanged() { in.tools.Changed(in.srv.Config().Pin) }

// pinChanged follows a reload's change of the pin setting: what CheckTool
// learned of each instance's process counts no more, and the catalog's
// approvals follow (catalog.Catalog.PinChanged). It reports whether
// clients see other tools now.
func (s *Server) pinChanged(was, now bool) bool {
	if was == now {
		return false
	}
	for _, in := range s.instances() {
		in.tools.Forget()
	}
	return s.cat.PinChanged(was, now)
}

// SetStore attaches the persisted cache and loads what it holds for the
// configured servers (under their current launch hashes). Entries of
// servers no longer configured, or configured differently, are pruned.
// Call it before serving.
func (f *Fleet) SetStore(st *store.Store) {
	f.store = st
	f.catEnv.Store = st
	// The lists stay on disk, read when asked for: only their
	// initialize results and which lists are known come into memory.
	index := st.Index(f.launchHashes())
	for _, s := range f.Servers() {
		if sum, ok := index[s.Name()]; ok {
			s.cat.Load(&sum)
		} else {
			s.cat.Load(nil)
		}
	}
	f.pruneStore()
	f.trimSoon(true) // what reading the store brought into memory: given back as a dormancy's
}

// pruneDefinitions drops the definitions records of servers no longer
// configured, once their grace is over.
func (f *Fleet) pruneDefinitions() {
	keep := map[string]bool{}
	for _, s := range f.Servers() {
		keep[s.Name()] = true
	}
	f.catEnv.PruneDefinitions(keep)
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
		if s.cat.Cached(catalog.Tools) || s.Config().Eager {
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

// learn starts the server under one lease, has its catalog fetch every
// list, and lets it sleep again unless a client request came meanwhile.
// It reports whether every list was learned.
func (s *Server) learn(ctx context.Context) bool {
	cfg := s.Config()
	lctx, cancel := WithTimeout(ctx, PlusTimeouts(cfg.InitTimeout, cfg.RequestTimeout))
	defer cancel()
	l, err := s.Acquire(lctx, "")
	if err != nil {
		s.f.log.Warn("could not learn a server's lists", "server", s.Name(), "err", err)
		return false
	}
	before := s.requests() // counted after ours: a later one is a client's
	ok := s.cat.Learn(lctx, l)
	// The refresh that follows a first start may still hold the server:
	// it is waited for, as long as a refresh may take.
	rctx, cancel := WithTimeout(ctx, PlusTimeouts(cfg.RequestTimeout, cfg.InitTimeout))
	defer cancel()
	s.rest(rctx, before)
	return ok
}
