// Package catalog keeps what is known of each configured server's lists
// and definitions, whether or not the server runs: its tools, prompts,
// resources and resource templates as it last listed them, its initialize
// result, the definitions the operator approved when the server is pinned,
// and, for a pinned server, what each of its running processes lists now.
//
// A Catalog is one server's. It owns its list cache and that cache's
// persistence: lists are held in memory and written through to the state
// file (internal/store) under the server's launch hash, and when the
// server goes dormant (Spill) every list and the initialize result that
// are on disk as they are leave memory, read back from the store when
// asked for. It refreshes the lists when the server says one changed, with
// at most one refresher per server. It owns the server's definitions —
// drift between learns, reported as events, and the approvals of a pinned
// server's tools — persisted by server name alone. And it decides, for a
// pinned server, whether a call of a tool may go to a process (CheckTool),
// on what that very process lists.
//
// The catalog starts nothing. What it needs of the server's lifecycle — a
// lease on a running connection to fetch a list from, the server's
// configuration, work in the background bounded by the fleet's lifetime,
// events and the state file — comes through Host, Lease and Env, which
// the fleet provides: the seam goes one way, from the fleet to the
// catalog.
//
// Its bounds, none of them configurable: a list is fetched in at most
// 1,000 pages; a refresh is bounded by the server's request timeout plus
// its init timeout (none if either is 0), a learn for CheckTool by its
// request timeout (none if 0), each also by the fleet's lifetime; the
// definitions record of a server no longer configured is kept for 30
// days (definitionsGrace), so that one configured again within them has
// its approvals back.
//
// Every method of a Catalog is safe to call concurrently. A Catalog is
// kept in its server's own allocation: a never-learned server costs no
// allocation more; a dormant learned one keeps its sets of kinds, change
// counts and version in a few bytes (packing.go), its lists and
// definitions on disk.
package catalog

import (
	"context"
	"encoding/json"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"log/slog"
	"sync"
	"sync/atomic"

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

// The lists a catalog keeps for every server.
var (
	Tools     = ListKind{"tools/list", "tools", "tools"}
	Prompts   = ListKind{"prompts/list", "prompts", "prompts"}
	Resources = ListKind{"resources/list", "resources", "resources"}
	Templates = ListKind{"resources/templates/list", "resourceTemplates", "resources"}

	allKindsArray = [...]ListKind{Tools, Prompts, Resources, Templates}
	allKinds      = allKindsArray[:]
)

// AllKinds lists every kind a catalog keeps, in a fixed order: tools,
// prompts, resources, resource templates. The slice is the caller's to
// read, never to change.
func AllKinds() []ListKind { return allKinds }

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

// Conn is a live, initialized connection to one of the server's
// processes, as the catalog lists from it. *backend.Conn is one.
type Conn interface {
	// Init is what the server answered to initialize.
	Init() *backend.InitResult
	// Call sends a request and waits for its response, bounded by ctx.
	Call(ctx context.Context, method string, params json.RawMessage) (*rpc.Message, error)
}

// Process is one running process of the server, as a lease on it shows
// it to the catalog.
type Process struct {
	// Conn is its connection; nil when it is not an MCP connection.
	Conn Conn
	// Launched is the configuration its instance was made under: a
	// process of a launch the server was relaunched from since lists
	// nothing into the catalog.
	Launched *config.Server
	// Session is the client session whose own process it is; "" for the
	// shared instance's, the only one whose lists are the server's.
	Session string
	// Tools is its instance's record of what its process lists, for
	// CheckTool: one per instance, kept by the instance.
	Tools *LiveTools
}

// Lease is a hold on a running process of the server: while it is held
// the process does not go to sleep. Release ends it; more calls do
// nothing.
type Lease interface {
	Process() Process
	Release()
}

// Host is what a Catalog needs of its server's lifecycle. The fleet's
// server provides it.
type Host interface {
	// Config is the server's configuration in force.
	Config() *config.Server
	// Init is the initialize result of the shared instance's live
	// connection, or nil when it is not running.
	Init() *backend.InitResult
	// Acquire leases the shared instance's process, starting it if need
	// be; ctx bounds the wait.
	Acquire(ctx context.Context) (Lease, error)
	// Peek leases the shared instance's process if it runs, without
	// starting it or counting as a client's request.
	Peek() (Lease, bool)
	// ListsChanged reports that the kinds of the server's lists changed
	// (Options.OnListsChanged of the fleet).
	ListsChanged(kinds []ListKind)
	// Env is what the catalogs of the server's fleet share. The same
	// for every call.
	Env() *Env
}

// Env is what every catalog of a fleet shares: one per fleet.
type Env struct {
	// Store is the state file the lists and definitions are persisted
	// in; nil persists nothing. Set it before serving (Fleet.SetStore),
	// never after.
	Store *store.Store
	// Log receives the catalog's warnings; it must be set.
	Log *slog.Logger
	// Emit reports an event of the server (definitions_changed,
	// definitions_approved, tools_lost, tools_restored,
	// tools_lost_accepted); it must not block. nil reports none.
	Emit func(Event)
	// Spawn runs fn on a goroutine of its own with the fleet's context,
	// unless the fleet is closing; it reports whether fn runs. The
	// catalog's refreshers and its learns for CheckTool run so. It must
	// be set.
	Spawn func(fn func(ctx context.Context)) bool
	// Closed wraps the error of a learn that could not start because the
	// fleet is closing (Spawn refused it).
	Closed error

	// initWrites serializes the writes of initialize results to the
	// store (persistInit): each writes the result held when it writes,
	// so the last write is of the one held last.
	initWrites sync.Mutex

	// Test seams, set by the package's own tests on the Env they make;
	// nil in production, where the default runs. putDefs writes a
	// definitions record in place of Store.PutDefinitions (a write held
	// while readers go on); beforeInitWrite runs in persistInit between
	// taking the result to write and writing it (a write held there
	// while another instance remembers another result).
	putDefs         func(st *store.Store, server string, rec json.RawMessage) error
	beforeInitWrite func()
}

// Event is one event a catalog reports of its server.
type Event struct {
	Server  string
	Session string
	Type    event.Kind
	Details map[string]any
}

// Catalog is what is known of one server's lists and definitions (see
// the package comment). It is kept in place (the fleet's Server holds
// one), never copied, and bound to its server (Bind) before any other
// call.
type Catalog struct {
	host Host
	// lists is its list cache; dp its definitions, for drift and pinning
	// (made on first use: a never-learned server costs no more). Lists
	// are cached under the definitions' mu (learnFrom).
	lists lists
	dp    atomic.Pointer[defs]
}

// Bind makes c the catalog of the server host is, with nothing known.
// Call it once, before anything else.
func (c *Catalog) Bind(host Host) { c.host = host }

// env is what c shares with the catalogs of its fleet.
func (c *Catalog) env() *Env { return c.host.Env() }

// defs is the server's definitions, made on first use.
func (c *Catalog) defs() *defs {
	if d := c.dp.Load(); d != nil {
		return d
	}
	c.dp.CompareAndSwap(nil, &defs{defsMem: &defsMem{}})
	return c.dp.Load()
}

// name is the server's configured name.
func (c *Catalog) name() string { return c.host.Config().Name }

// emit reports an event of the server (in session, if set) with details
// d, if anyone listens.
func (c *Catalog) emit(session string, d event.Details) {
	if emit := c.env().Emit; emit != nil {
		emit(Event{Server: c.name(), Session: session, Type: d.Kind(), Details: event.Fields(d)})
	}
}
