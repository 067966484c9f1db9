package fleet

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Which clients use which server: per server, each client's name, the
// requests it sent the server and when it last did. The name is what the
// client says it is — clientInfo.name at initialize, or a modern
// request's io.modelcontextprotocol/clientInfo — normalized by the
// gateway, which also falls back to a hint or to UnknownClient. It is
// client-controlled: a server keeps at most MaxClientNames names, and
// counts every other under OtherClients, so a client that renames itself
// at every request costs a bounded table and a bounded number of metric
// series.

// MaxClientNames is how many distinct client names one server keeps;
// requests of any further name are counted under OtherClients.
const MaxClientNames = 32

// MaxClientNameLen bounds a client name, and MaxClientVersionLen a
// client version, in bytes: NoteClient cuts longer ones (the gateway
// normalizes them within these bounds first).
const (
	MaxClientNameLen    = 64
	MaxClientVersionLen = 32
)

// OtherClients is the name the requests of the names beyond a server's
// MaxClientNames are counted under; UnknownClient is the name of a client
// that gave none (and had no hint).
const (
	OtherClients  = "other"
	UnknownClient = "unknown"
)

// ClientUse is what one client did with one server.
type ClientUse struct {
	// Name is the client's normalized name (UnknownClient when it gave
	// none, OtherClients for the names beyond the server's
	// MaxClientNames).
	Name string `json:"name"`
	// Version is the version the client last gave with this name (not
	// for OtherClients).
	Version string `json:"version,omitempty"`
	// Requests counts the client's requests that reached the server, by
	// whatever end (as mcpvisor_server_calls_total counts them).
	Requests uint64 `json:"requests"`
	// LastUsed is when the last of them ended.
	LastUsed time.Time `json:"lastUsed"`
}

// clientBook holds, per server, the table of its clients: made at the
// first request a client sends it, so a server no client used costs
// nothing. It is the fleet's, not the server's, for that reason: a
// field in every Server would cost every server.
type clientBook struct {
	mu     sync.Mutex // serializes making a table with dropping one (forget)
	tables sync.Map   // *Server → *clientTable
}

// clientTable is one server's clients. A request of a client it knows, at
// the version it knows, is counted under the read lock (atomics): every
// request served counts, and they must not queue on one mutex.
type clientTable struct {
	mu     sync.RWMutex
	byName map[string]*clientUse // at most MaxClientNames names, and OtherClients
}

type clientUse struct {
	version  string // written under the table's write lock
	requests atomic.Uint64
	last     atomic.Int64 // Unix ns
}

// count counts one request of u ended at (Unix ns).
func (u *clientUse) count(at int64) {
	u.requests.Add(1)
	for {
		old := u.last.Load()
		if at <= old || u.last.CompareAndSwap(old, at) {
			return
		}
	}
}

// NoteClient counts one request of the client named name (version
// version) to s, ended at at. name and version are normalized by the
// caller (the gateway); longer than MaxClientNameLen or
// MaxClientVersionLen they are cut, empty name is UnknownClient. Neither
// is kept: what is kept is copied. It allocates nothing once the client
// has an entry (a new version is copied), and is safe for concurrent
// use. A server a reload removed counts nothing more.
func (s *Server) NoteClient(name, version []byte, at time.Time) {
	t := s.f.clients.table(s, true)
	if t == nil {
		return // removed
	}
	if len(name) == 0 {
		name = unknownClient
	}
	name = name[:min(len(name), MaxClientNameLen)]
	version = version[:min(len(version), MaxClientVersionLen)]
	t.mu.RLock()
	u := t.byName[string(name)] // looked up without a copy
	if u != nil && u.version == string(version) {
		u.count(at.UnixNano())
		t.mu.RUnlock()
		return
	}
	t.mu.RUnlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	u = t.byName[string(name)]
	if u == nil {
		if len(t.byName) >= MaxClientNames {
			if u = t.byName[OtherClients]; u == nil {
				u = &clientUse{}
				t.byName[OtherClients] = u
			}
			version = nil
		} else {
			u = &clientUse{}
			t.byName[string(name)] = u
		}
	}
	u.count(at.UnixNano())
	if string(version) != u.version {
		u.version = string(version)
	}
}

var unknownClient = []byte(UnknownClient)

// Clients lists the clients that used s, by name (OtherClients last);
// nil when none did.
func (s *Server) Clients() []ClientUse {
	t := s.f.clients.table(s, false)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	out := make([]ClientUse, 0, len(t.byName))
	for name, u := range t.byName {
		out = append(out, ClientUse{Name: name, Version: u.version, Requests: u.requests.Load(), LastUsed: time.Unix(0, u.last.Load())})
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b ClientUse) int {
		if (a.Name == OtherClients) != (b.Name == OtherClients) {
			if a.Name == OtherClients {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}

// table is s's table, made if create is set and s is not removed; nil if
// there is none.
func (b *clientBook) table(s *Server, create bool) *clientTable {
	if t, ok := b.tables.Load(s); ok {
		return t.(*clientTable)
	}
	if !create {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(s.refused(), ErrRemoved) {
		// Its table is gone (forget), or never was: a request that
		// ends after the removal must not make one again, which would
		// keep the server in the book for good.
		return nil
	}
	t, _ := b.tables.LoadOrStore(s, &clientTable{byName: map[string]*clientUse{}})
	return t.(*clientTable)
}

// forget drops s's table: s was removed (its refusal, ErrRemoved, is set
// before, so no request makes it again).
func (b *clientBook) forget(s *Server) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tables.Delete(s)
}
