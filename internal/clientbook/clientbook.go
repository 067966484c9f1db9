// Package clientbook keeps which MCP clients used which server: per
// server, each client's name, the requests it sent the server and when it
// last did. The gateway writes it as each request ends; the status API
// reads it.
//
// The name is what the client says it is — clientInfo.name at initialize,
// or a modern request's io.modelcontextprotocol/clientInfo — normalized by
// the gateway, which also falls back to a hint or to Unknown. It is
// client-controlled: a server keeps at most MaxNames names, and counts
// every other under Other, so a client that renames itself at every
// request costs a bounded table and a bounded number of metric series.
package clientbook

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MaxNames is how many distinct client names one server keeps; requests
// of any further name are counted under Other.
const MaxNames = 32

// MaxNameLen bounds a client name, and MaxVersionLen a client version, in
// bytes: Note cuts longer ones (the gateway normalizes them within these
// bounds first).
const (
	MaxNameLen    = 64
	MaxVersionLen = 32
)

// Other is the name the requests of the names beyond a server's MaxNames
// are counted under; Unknown is the name of a client that gave none (and
// had no hint).
const (
	Other   = "other"
	Unknown = "unknown"
)

// Use is what one client did with one server.
type Use struct {
	// Name is the client's normalized name (Unknown when it gave none,
	// Other for the names beyond the server's MaxNames).
	Name string `json:"name"`
	// Version is the version the client last gave with this name (not
	// for Other).
	Version string `json:"version,omitempty"`
	// Requests counts the client's requests that reached the server, by
	// whatever end (as mcpvisor_server_calls_total counts them).
	Requests uint64 `json:"requests"`
	// LastUsed is when the last of them ended.
	LastUsed time.Time `json:"lastUsed"`
}

// Server is a server the book keeps a table for, by identity: a server a
// reload removed and one added again under its name are two. Removed
// reports whether a reload removed it (for good): it counts nothing more.
type Server interface {
	Removed() bool
}

// Book holds, per server, the table of its clients: made at the first
// request a client sends it, so a server no client used costs nothing.
// The zero Book is empty and ready; it is safe for concurrent use.
type Book struct {
	mu     sync.Mutex // serializes making a table with dropping one (Sweep)
	tables sync.Map   // Server → *table
}

// table is one server's clients. A request of a client it knows, at the
// version it knows, is counted under the read lock (atomics): every
// request served counts, and they must not queue on one mutex.
type table struct {
	mu     sync.RWMutex    // guards byName: written to add a name, read to count one
	byName map[string]*use // at most MaxNames names, and Other
}

type use struct {
	version  string // written under the table's write lock
	requests atomic.Uint64
	last     atomic.Int64 // Unix ns
}

// count counts one request of u ended at (Unix ns).
func (u *use) count(at int64) {
	u.requests.Add(1)
	for {
		old := u.last.Load()
		if at <= old || u.last.CompareAndSwap(old, at) {
			return
		}
	}
}

// Note counts one request of the client named name (version version) to
// s, ended at at. name and version are normalized by the caller (the
// gateway); longer than MaxNameLen or MaxVersionLen they are cut, empty
// name is Unknown. Neither is kept: what is kept is copied. It allocates
// nothing once the client has an entry (a new version is copied). A
// server a reload removed counts nothing more.
func (b *Book) Note(s Server, name, version []byte, at time.Time) {
	t := b.table(s, true)
	if t == nil {
		return // removed
	}
	if len(name) == 0 {
		name = unknown
	}
	name = name[:min(len(name), MaxNameLen)]
	version = version[:min(len(version), MaxVersionLen)]
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
		if len(t.byName) >= MaxNames {
			if u = t.byName[Other]; u == nil {
				u = &use{}
				t.byName[Other] = u
			}
			version = nil
		} else {
			u = &use{}
			t.byName[string(name)] = u
		}
	}
	u.count(at.UnixNano())
	if string(version) != u.version {
		u.version = string(version)
	}
}

var unknown = []byte(Unknown)

// Of lists the clients that used s, by name (Other last); nil when none
// did.
func (b *Book) Of(s Server) []Use {
	t := b.table(s, false)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	out := make([]Use, 0, len(t.byName))
	for name, u := range t.byName {
		out = append(out, Use{Name: name, Version: u.version, Requests: u.requests.Load(), LastUsed: time.Unix(0, u.last.Load())})
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Use) int {
		if (a.Name == Other) != (b.Name == Other) {
			if a.Name == Other {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}

// Sweep drops the tables of the servers a reload removed: call it once a
// reload is applied (their removal is set by then, so no request makes
// their tables again).
func (b *Book) Sweep() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tables.Range(func(k, _ any) bool {
		if k.(Server).Removed() {
			b.tables.Delete(k)
		}
		return true
	})
}

// table is s's table, made if create is set and s is not removed; nil if
// there is none.
func (b *Book) table(s Server, create bool) *table {
	if t, ok := b.tables.Load(s); ok {
		return t.(*table)
	}
	if !create {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.Removed() {
		// Its table is gone (Sweep), or never was: a request that
		// ends after the removal must not make one again, which would
		// keep the server in the book for good.
		return nil
	}
	t, _ := b.tables.LoadOrStore(s, &table{byName: map[string]*use{}})
	return t.(*table)
}
