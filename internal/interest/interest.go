// Package interest keeps what each client session asked of a server that
// the server must be told again after it restarts or wakes: the resources
// the session subscribed to and the log level it set — what a legacy
// session adds on top of its requests (DESIGN decision 11). It is recorded
// per (server, session) by the gateway, which serves those requests, and
// read by the fleet through a narrow seam: it replays it to every new
// process of an instance before the instance serves (Book.Replay, and
// Book.Gen to tell whether it changed meanwhile), and keeps an instance a
// session subscribed on awake (Book.Pinned).
package interest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Server is a server sessions ask things of. The book keys its records by
// the server's identity: one a reload removed and one added again under
// its name are two, and the removed one's records go with its sessions.
// Its config's sharing tells which sessions an instance of it serves
// (serves).
type Server interface {
	Name() string
	Config() *config.Server
}

// Conn is a new connection of an instance, to be told what its sessions
// asked (a fleet.Conn is one).
type Conn interface {
	Init() *backend.InitResult
	Call(ctx context.Context, method string, params json.RawMessage) (*rpc.Message, error)
}

// ResourceSubscriber is a connection that takes a modern server's resource
// subscriptions as one set (such a server has no resources/subscribe: they
// go in mcpvisor's subscriptions/listen). Modern reports whether the
// server is one.
type ResourceSubscriber interface {
	Modern() bool
	SetResourceSubscriptions(uris []string)
}

// logLevels are the MCP log levels, most verbose first.
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// LogSeverity ranks an MCP log level (debug 0 … emergency 7); -1 if it is
// not one.
func LogSeverity(level string) int {
	for i, l := range logLevels {
		if l == level {
			return i
		}
	}
	return -1
}

// endedMemory is how long an ended session is remembered, so that a
// request of it that raced its end records nothing.
const endedMemory = time.Minute

// Book holds what the sessions asked of every server. Its methods are safe
// for concurrent use.
type Book struct {
	log *slog.Logger

	mu      sync.Mutex         // guards servers, seq, ended and endedGC
	servers map[Server]*record // a server with none asked of it has none
	seq     uint64             // numbers the changes, of all servers (record.gen)
	ended   map[string]time.Time
	// endedGC is when ended was last swept: at most every endedMemory/4,
	// not at each end.
	endedGC time.Time

	// tellMu serializes telling modern servers their subscriptions
	// (Sync): each reads the set under the lock it tells it under, so
	// what a server is told last is the current set.
	tellMu sync.Mutex
}

// record is what the sessions asked of one server.
type record struct {
	sessions map[string]*asked
	// gen is the book's seq at the record's last change: never the same
	// for two states of one server, even across a record dropped (no
	// session asks anything) and made again.
	gen uint64
}

// asked is what one session asked of one server, and the instance it
// asked it of: the key of the instance that serves the session ("" for
// the shared one; the session's own key for a per-session server's; its
// identity's for a per-identity server's), as the caller that wrote it
// named it. An instance is told the union of what its sessions asked, and
// nothing another instance's did.
type asked struct {
	subs  map[string]bool
	level string
	inst  string
}

// New returns an empty book; the warnings of a replay go to log (nil:
// slog.Default).
func New(log *slog.Logger) *Book {
	if log == nil {
		log = slog.Default()
	}
	return &Book{log: log, servers: map[Server]*record{}}
}

// askedLocked is what session, served by the instance keyed inst, asked
// of s, made if need be; b.mu is held.
func (b *Book) askedLocked(s Server, session, inst string) *asked {
	r := b.servers[s]
	if r == nil {
		r = &record{sessions: map[string]*asked{}}
		b.servers[s] = r
	}
	a := r.sessions[session]
	if a == nil {
		a = &asked{subs: map[string]bool{}}
		r.sessions[session] = a
	}
	a.inst = inst
	return a
}

// changedLocked records a change of what sessions asked of s; b.mu is
// held. A record left with no session goes.
func (b *Book) changedLocked(s Server) {
	r := b.servers[s]
	if r == nil {
		return
	}
	b.seq++
	r.gen = b.seq
	if len(r.sessions) == 0 {
		delete(b.servers, s)
	}
}

// Subscribe records that session subscribed to uri on s (call it before
// the subscribe request is sent, and Unsubscribe if the server refuses
// it): the subscription is replayed to every new process, and while any
// session of an instance is subscribed the instance does not go dormant —
// a sleeping server cannot send the updates its subscribers wait for. A
// session that ended (End) records nothing. inst is the key of the
// instance of s that serves session (fleet.Server.InstanceKey, "" for a
// shared server's).
func (b *Book) Subscribe(s Server, session, inst, uri string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.endedLocked(session) {
		return // a late request of an ended session records nothing
	}
	b.askedLocked(s, session, inst).subs[uri] = true
	b.changedLocked(s)
}

// Unsubscribe forgets a subscription Subscribe recorded.
func (b *Book) Unsubscribe(s Server, session, uri string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.servers[s]
	if r == nil {
		return
	}
	if a := r.sessions[session]; a != nil {
		delete(a.subs, uri)
		if len(a.subs) == 0 && a.level == "" {
			delete(r.sessions, session)
		}
	}
	b.changedLocked(s)
}

// SetLogLevel records the log level session, served by the instance
// keyed inst, set on s ("" forgets it); it is replayed to every new
// process of that instance. A session that ended records nothing.
func (b *Book) SetLogLevel(s Server, session, inst, level string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.endedLocked(session) {
		return
	}
	a := b.askedLocked(s, session, inst)
	a.level = level
	if len(a.subs) == 0 && level == "" {
		delete(b.servers[s].sessions, session)
	}
	b.changedLocked(s)
}

// End forgets what session asked of every server, and records nothing it
// asks afterwards; it returns the servers the session had asked something
// of (nil for none). The fleet calls it as it detaches the session
// (fleet.Fleet.DetachSession), and tells those of the servers that are
// modern the set left. Asked under the lock that writes a record, whether
// the session ended holds until the write: a record is either written
// before End and forgotten with the rest, or not written at all.
func (b *Book) End(session string) (asked []Server) {
	if session == "" {
		return nil
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended == nil {
		b.ended = map[string]time.Time{}
	}
	if now.Sub(b.endedGC) > endedMemory/4 {
		b.endedGC = now
		for k, t := range b.ended {
			if now.Sub(t) > endedMemory {
				delete(b.ended, k)
			}
		}
	}
	b.ended[session] = now
	for s, r := range b.servers {
		if _, had := r.sessions[session]; had {
			delete(r.sessions, session)
			b.changedLocked(s) // a replay running now tells the server again
			asked = append(asked, s)
		}
	}
	return asked
}

// Sweep drops the records of the servers a reload removed — those whose
// Removed method (if they have one) reports true —, whatever sessions
// still live: a removed server is never started again, so nothing is to
// be replayed to it, and a record would keep the removed server (and all
// it holds) reachable for as long as one session that asked something of
// it lives. Call it once a reload is applied.
func (b *Book) Sweep() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.servers {
		if r, ok := s.(interface{ Removed() bool }); ok && r.Removed() {
			delete(b.servers, s)
		}
	}
}

// endedLocked reports whether session ended (End) lately; b.mu is held.
func (b *Book) endedLocked(session string) bool {
	_, ok := b.ended[session]
	return ok
}

// Gen counts the changes of what sessions asked of s: a replay that read
// it before telling is current as long as it has not changed.
func (b *Book) Gen(s Server) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.servers[s]; r != nil {
		return r.gen
	}
	return 0
}

// Subscribers lists the sessions subscribed to uri on s, sorted.
func (b *Book) Subscribers(s Server, uri string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	if r := b.servers[s]; r != nil {
		for sess, a := range r.sessions {
			if a.subs[uri] {
				out = append(out, sess)
			}
		}
	}
	sort.Strings(out)
	return out
}

// LogLevels maps each session that set a log level on s to that level.
func (b *Book) LogLevels(s Server) map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	if r := b.servers[s]; r != nil {
		for sess, a := range r.sessions {
			if a.level != "" {
				out[sess] = a.level
			}
		}
	}
	return out
}

// Pinned reports whether a session of the instance of s keyed key ("" for
// the shared one) holds a subscription: the instance must not go dormant.
func (b *Book) Pinned(s Server, key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.servers[s]; r != nil {
		for _, a := range r.sessions {
			if len(a.subs) > 0 && a.inst == key {
				return true
			}
		}
	}
	return false
}

// replay is what a new process of the instance of s keyed key must be
// told: the union of its sessions' subscriptions and the most verbose
// level any of them set; and gen, the generation (Gen) of that state,
// read with it under one hold of the lock: a Gen read apart could be
// that of another state (0 before a record is made, and again once it is
// dropped, with the state in between read).
func (b *Book) replay(s Server, key string) (uris []string, level string, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.servers[s]
	if r == nil {
		return nil, "", 0
	}
	gen = r.gen
	set := map[string]bool{}
	best := -1
	for _, a := range r.sessions {
		if a.inst != key {
			continue
		}
		for u := range a.subs {
			set[u] = true
		}
		if sev := LogSeverity(a.level); sev >= 0 && (best < 0 || sev < best) {
			best = sev
		}
	}
	for u := range set {
		uris = append(uris, u)
	}
	sort.Strings(uris)
	if best >= 0 {
		level = logLevels[best]
	}
	return uris, level, gen
}

// InstanceSubscriptions lists the resources subscribed to on the instance
// of s keyed inst, by any of its sessions, sorted.
func (b *Book) InstanceSubscriptions(s Server, inst string) []string {
	uris, _, _ := b.replay(s, inst)
	return uris
}

// EffectiveLogLevel is the level to set on the instance of s keyed inst:
// the most verbose level any session of that instance set ("" if none
// did).
func (b *Book) EffectiveLogLevel(s Server, inst string) string {
	_, level, _ := b.replay(s, inst)
	return level
}

// Sync tells rs — the connection of the instance of s keyed inst, to a
// modern server — the resources that instance's sessions subscribe to
// now. Calls are serialized, each reading the set under the same lock it
// is told under, so that what the server is told last is the current set
// (two changes at once cannot leave the older one).
func (b *Book) Sync(rs ResourceSubscriber, s Server, inst string) {
	b.sync(rs, s, inst)
}

// sync tells rs the resources the sessions of the instance of s keyed key
// subscribe to now (Sync), and returns the generation of that set.
func (b *Book) sync(rs ResourceSubscriber, s Server, key string) uint64 {
	b.tellMu.Lock()
	defer b.tellMu.Unlock()
	uris, _, gen := b.replay(s, key)
	rs.SetResourceSubscriptions(uris)
	return gen
}

// Replay tells c, a new connection of the instance of s keyed key ("" for
// the shared one), what that instance's sessions asked of s, within ctx
// (the connect's: a replay stops when it ends). It returns the generation
// (Gen) of what it told, read with it before telling: if Gen is still
// that, c was told the current state. A modern server gets its
// subscriptions as one set (Sync), and the log level in each request's
// _meta; a legacy one a logging/setLevel, if it logs, and a
// resources/subscribe per resource. What the server refuses is logged,
// not returned.
func (b *Book) Replay(ctx context.Context, s Server, key string, c Conn) uint64 {
	if rs, ok := c.(ResourceSubscriber); ok && rs.Modern() {
		return b.sync(rs, s, key)
	}
	uris, level, gen := b.replay(s, key)
	if len(uris) == 0 && level == "" {
		return gen
	}
	log := b.log.With("server", s.Name())
	if level != "" && c.Init().Has("logging") {
		params, _ := json.Marshal(map[string]string{"level": level})
		if resp, err := c.Call(ctx, "logging/setLevel", params); err != nil || resp.Error != nil {
			log.Warn("could not restore the log level after a restart", "level", level, "err", callErr(resp, err))
		}
	}
	for _, u := range uris {
		if ctx.Err() != nil {
			return gen
		}
		params, _ := json.Marshal(map[string]string{"uri": u})
		if resp, err := c.Call(ctx, "resources/subscribe", params); err != nil || resp.Error != nil {
			log.Warn("could not restore a resource subscription after a restart", "uri", u, "err", callErr(resp, err))
		}
	}
	return gen
}

func callErr(resp *rpc.Message, err error) error {
	if err != nil {
		return err
	}
	return errors.New(resp.Error.Message)
}
