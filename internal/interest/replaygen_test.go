package interest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// loggingInit is the initialize result of a server that logs.
var loggingInit = func() *backend.InitResult {
	in, err := backend.ParseInit(json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"logging":{},"resources":{"subscribe":true}},"serverInfo":{"name":"s","version":"1"}}`))
	if err != nil {
		panic(err)
	}
	return in
}()

// toldConn is a new connection a replay tells what its sessions asked: a
// legacy server's (resources/subscribe, logging/setLevel) or, modern, a
// modern one's (SetResourceSubscriptions; the level goes in each
// request). It keeps what it was told. beforeRead runs when Replay asks
// whether the server is modern — after Replay read Gen, before it reads
// what to tell —, afterRead with the first thing told (what to tell is
// read by then); each runs once, standing for whatever another goroutine
// does to the book at that moment.
type toldConn struct {
	modern                bool
	beforeRead, afterRead func()

	mu    sync.Mutex
	subs  map[string]bool
	level string
}

func newToldConn(modern bool) *toldConn { return &toldConn{modern: modern, subs: map[string]bool{}} }

func (c *toldConn) Init() *backend.InitResult { return loggingInit }

func (c *toldConn) Modern() bool {
	if f := c.beforeRead; f != nil {
		c.beforeRead = nil
		f()
	}
	return c.modern
}

func (c *toldConn) told() {
	if f := c.afterRead; f != nil {
		c.afterRead = nil
		f()
	}
}

func (c *toldConn) SetResourceSubscriptions(uris []string) {
	c.mu.Lock()
	c.subs = map[string]bool{}
	for _, u := range uris {
		c.subs[u] = true
	}
	c.mu.Unlock()
	c.told()
}

func (c *toldConn) Call(_ context.Context, method string, params json.RawMessage) (*rpc.Message, error) {
	var p struct{ URI, Level string }
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	c.mu.Lock()
	switch method {
	case "resources/subscribe":
		c.subs[p.URI] = true
	case "logging/setLevel":
		c.level = p.Level
	}
	c.mu.Unlock()
	c.told()
	return &rpc.Message{Result: json.RawMessage(`{}`)}, nil
}

// state is what the connection was told: its subscriptions, sorted, and
// its level (a modern server's is not told on the connection: "").
func (c *toldConn) state() ([]string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.subs)), c.level
}

// snapshot is what a new process of the instance of s keyed key is to
// be told now — the union of its sessions' subscriptions, sorted, and the
// most verbose level they set — and the generation of that state, all
// read under one hold of the book's lock, whatever runs meanwhile.
func (b *Book) snapshot(s Server, key string) (gen uint64, uris []string, level string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.servers[s]
	if r == nil {
		return 0, nil, ""
	}
	set := map[string]bool{}
	for _, a := range r.sessions {
		if a.inst != key {
			continue
		}
		for u := range a.subs {
			set[u] = true
		}
		if a.level != "" && (level == "" || LogSeverity(a.level) < LogSeverity(level)) {
			level = a.level
		}
	}
	return r.gen, slices.Sorted(maps.Keys(set)), level
}

// toldCurrent fails t (Errorf: any goroutine may call it) if Gen is
// still gen, what Replay returned, but c was not told the state the book
// holds now (the level is not told on a modern server's connection).
func toldCurrent(t testing.TB, b *Book, s Server, key string, c *toldConn, gen uint64) {
	t.Helper()
	now, uris, level := b.snapshot(s, key)
	if c.modern {
		level = ""
	}
	toldURIs, toldLevel := c.state()
	if now == gen && (!slices.Equal(toldURIs, uris) || toldLevel != level) {
		t.Errorf("Replay returned gen %d, which Gen still is, but told %v %q where the current state is %v %q: the connection is taken as current and is not",
			gen, toldURIs, toldLevel, uris, level)
	}
}

// Replay's generation is that of what it told: when Gen is still the
// generation Replay returned, the connection was told the current state
// (the contract the fleet's replay loop and its catch-up rely on: an
// equal Gen means nothing to tell again). Each case changes the book
// while Replay runs — after it read Gen, before it reads what to tell,
// and again once that is read —, the second change undoing the first:
// the record made by a subscription (or a log level) and dropped by its
// unsubscription (or its session's end) leaves Gen where an empty book
// has it, though the connection was told the state in between.
func TestReplayGenIsWhatItTold(t *testing.T) {
	const uri = "file:///x"
	for _, modern := range []bool{false, true} {
		for _, tc := range []struct {
			name          string
			first, second func(b *Book, s Server)
		}{
			{"subscribe then unsubscribe",
				func(b *Book, s Server) { b.Subscribe(s, "A", instOf(s, "A"), uri) },
				func(b *Book, s Server) { b.Unsubscribe(s, "A", uri) }},
			{"subscribe then end",
				func(b *Book, s Server) { b.Subscribe(s, "A", instOf(s, "A"), uri) },
				func(b *Book, s Server) { b.End("A") }},
			{"log level then end",
				func(b *Book, s Server) { b.SetLogLevel(s, "A", instOf(s, "A"), "debug") },
				func(b *Book, s Server) { b.End("A") }},
			{"subscribe then another",
				func(b *Book, s Server) { b.Subscribe(s, "A", instOf(s, "A"), uri) },
				func(b *Book, s Server) { b.Subscribe(s, "B", instOf(s, "B"), "file:///y") }},
		} {
			t.Run(fmt.Sprintf("%s/modern=%v", tc.name, modern), func(t *testing.T) {
				b := New(discard)
				s := &server{name: "s"}
				c := newToldConn(modern)
				c.beforeRead = func() { tc.first(b, s) }
				c.afterRead = func() { tc.second(b, s) }
				gen := b.Replay(t.Context(), s, "", c)
				if c.beforeRead != nil || c.afterRead != nil {
					t.Fatal("the book was not changed while Replay ran: the case tests nothing")
				}
				toldCurrent(t, b, s, "", c, gen)
			})
		}
	}
}
