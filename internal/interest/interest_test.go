package interest

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// server is a server of the book's.
type server struct {
	name       string
	perSession bool
}

func (s *server) Name() string { return s.name }
func (s *server) Config() *config.Server {
	sc := &config.Server{Name: s.name, Sharing: config.SharingShared}
	if s.perSession {
		sc.Sharing = config.SharingPerSession
	}
	return sc
}

// What a session asks of a server while it ends is either forgotten with
// it or never recorded: no subscription or log level of an ended session
// stays to be replayed to every new process. Each round races a session's
// Subscribe and SetLogLevel, called over and over, with its end (End).
func TestInterestRacingSessionEndIsNotKept(t *testing.T) {
	b := New(discard)
	s := &server{name: "s"}
	// More threads than cores: the scheduler of the system preempts them
	// at any instruction, which is what opens the window on a single core.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const rounds, spins = 500, 1 << 12
	for i := range rounds {
		session := fmt.Sprintf("S%d", i)
		var stop atomic.Bool
		var wg sync.WaitGroup
		started := make(chan struct{}, 2)
		wg.Go(func() {
			started <- struct{}{}
			for n := 0; n < spins && !stop.Load(); n++ {
				b.Subscribe(s, session, instOf(s, session), "file:///x")
			}
		})
		wg.Go(func() {
			started <- struct{}{}
			for n := 0; n < spins && !stop.Load(); n++ {
				b.SetLogLevel(s, session, instOf(s, session), "debug")
			}
		})
		<-started
		<-started
		b.End(session)
		stop.Store(true)
		wg.Wait()
		b.mu.Lock()
		r := b.servers[s]
		kept := r != nil && r.sessions[session] != nil
		b.mu.Unlock()
		if kept {
			t.Fatalf("round %d: an interest of session %s outlived its end", i, session)
		}
	}
}

// heldSubscriber is a modern server's connection whose first
// SetResourceSubscriptions is held until release is closed.
type heldSubscriber struct {
	entered, release chan struct{}
	mu               sync.Mutex
	calls            int
	subs             []string
}

func (r *heldSubscriber) Modern() bool { return true }
func (r *heldSubscriber) SetResourceSubscriptions(uris []string) {
	r.mu.Lock()
	r.calls++
	first := r.calls == 1
	r.mu.Unlock()
	if first {
		close(r.entered)
		<-r.release
	}
	r.mu.Lock()
	r.subs = uris
	r.mu.Unlock()
}

// Two subscription changes told at once leave the server with the newer
// set: Sync reads and tells under one lock, so an older set
// slow to be told cannot land after the newer.
func TestSyncLastToldIsCurrent(t *testing.T) {
	b := New(discard)
	s := &server{name: "s"}
	rs := &heldSubscriber{entered: make(chan struct{}), release: make(chan struct{})}
	b.Subscribe(s, "A", instOf(s, "A"), "file:///a")
	first := make(chan struct{})
	go func() { b.Sync(rs, s, ""); close(first) }()
	<-rs.entered // the older set is being told
	b.Subscribe(s, "B", instOf(s, "B"), "file:///b")
	second := make(chan struct{})
	go func() { b.Sync(rs, s, ""); close(second) }()
	select {
	case <-second: // told at once: the older may land after it
	case <-time.After(100 * time.Millisecond): // (or waiting its turn)
	}
	close(rs.release)
	<-first
	<-second
	rs.mu.Lock()
	got := rs.subs
	rs.mu.Unlock()
	if !slices.Equal(got, []string{"file:///a", "file:///b"}) {
		t.Fatalf("the server was left with %v, want both subscriptions", got)
	}
}

// Gen changes at every change of what sessions asked of a server, and
// never comes back to a value it had: a record dropped (no session asks
// anything) and made again does not start over, so a replay that read
// the old value is not taken for current. Another server's changes leave
// it as it is.
func TestGenNeverRepeats(t *testing.T) {
	b := New(discard)
	s, other := &server{name: "s"}, &server{name: "o"}
	seen := map[uint64]bool{b.Gen(s): true}
	step := func(what string, f func()) {
		t.Helper()
		before := b.Gen(s)
		f()
		g := b.Gen(s)
		if g == before || seen[g] && g != 0 {
			t.Fatalf("%s: gen %d after %d (seen %v)", what, g, before, seen)
		}
		seen[g] = true
	}
	step("subscribe", func() { b.Subscribe(s, "A", instOf(s, "A"), "file:///x") })
	step("level", func() { b.SetLogLevel(s, "A", instOf(s, "A"), "debug") })
	step("unsubscribe", func() { b.Unsubscribe(s, "A", "file:///x") })
	step("level forgotten", func() { b.SetLogLevel(s, "A", instOf(s, "A"), "") })
	step("subscribe again", func() { b.Subscribe(s, "B", instOf(s, "B"), "file:///x") })
	g := b.Gen(s)
	b.Subscribe(other, "A", instOf(other, "A"), "file:///y")
	if b.Gen(s) != g {
		t.Fatal("another server's change moved the gen")
	}
	step("end", func() { b.End("B") })
}

// A shared server's subscription pins its shared instance; a per-session
// server's pins the subscribed session's own instance alone. What an
// instance is told is its sessions' subscriptions and the most verbose
// level among them.
func TestPinnedAndReplayedByInstance(t *testing.T) {
	b := New(discard)
	shared, per := &server{name: "s"}, &server{name: "p", perSession: true}
	b.Subscribe(shared, "A", instOf(shared, "A"), "file:///a")
	b.SetLogLevel(shared, "B", instOf(shared, "B"), "error")
	b.SetLogLevel(shared, "A", instOf(shared, "A"), "info")
	b.Subscribe(per, "A", instOf(per, "A"), "file:///a")
	if !b.Pinned(shared, "") || b.Pinned(shared, "A") {
		t.Fatal("a shared server's subscription pins its shared instance alone")
	}
	if !b.Pinned(per, "A") || b.Pinned(per, "") || b.Pinned(per, "B") {
		t.Fatal("a per-session server's subscription pins its session's instance alone")
	}
	if uris, level := b.InstanceSubscriptions(shared, instOf(shared, "B")), b.EffectiveLogLevel(shared, instOf(shared, "B")); !slices.Equal(uris, []string{"file:///a"}) || level != "info" {
		t.Fatalf("shared instance told %v %q", uris, level)
	}
	if uris := b.InstanceSubscriptions(per, instOf(per, "B")); len(uris) != 0 {
		t.Fatalf("session B's own instance told %v", uris)
	}
	b.End("A")
	if b.Pinned(shared, "") || b.Pinned(per, "A") || b.EffectiveLogLevel(shared, instOf(shared, "B")) != "error" {
		t.Fatal("what A asked outlived its end")
	}
	b.Subscribe(shared, "A", instOf(shared, "A"), "file:///a")
	if b.Pinned(shared, "") {
		t.Fatal("a request of an ended session was recorded")
	}
}

// removable is a server a reload can remove.
type removable struct {
	server
	removed atomic.Bool
}

func (s *removable) Removed() bool { return s.removed.Load() }

// A removed server's records go at the sweep after its reload, though the
// session that subscribed lives on: the book does not keep the server
// reachable. A kept server's records stay.
func TestSweepDropsRemovedServers(t *testing.T) {
	b := New(discard)
	gone, kept := &removable{server: server{name: "gone"}}, &removable{server: server{name: "kept"}}
	for _, s := range []*removable{gone, kept} {
		b.Subscribe(s, "s1", instOf(s, "s1"), "test://x")
	}
	b.Sweep()
	if len(b.Subscribers(gone, "test://x")) != 1 || len(b.Subscribers(kept, "test://x")) != 1 {
		t.Fatal("a sweep with nothing removed dropped a record")
	}
	gone.removed.Store(true)
	b.Sweep()
	b.mu.Lock()
	_, held := b.servers[gone]
	_, keptHeld := b.servers[kept]
	b.mu.Unlock()
	if held {
		t.Fatal("the removed server is still held by the book after the sweep")
	}
	if !keptHeld || !slices.Equal(b.Subscribers(kept, "test://x"), []string{"s1"}) {
		t.Fatal("the sweep dropped a kept server's record")
	}
}

// instOf is the key of the instance of s serving session, as the gateway
// names it to the book: the session's own for a per-session server, ""
// for a shared one.
func instOf(s Server, session string) string {
	if s.Config().PerSession() {
		return session
	}
	return ""
}

// A per-identity server's instances are each told, and pinned by, only
// their own identity's sessions' subscriptions and levels: one person's
// subscription URIs never reach another's process, and a session's end
// takes only its own.
func TestPerIdentityInstancesKeepTheirOwn(t *testing.T) {
	b := New(discard)
	s := &server{name: "pi"}
	const alice, bob = "identity/alice", "identity/bob"
	b.Subscribe(s, "a1", alice, "file:///alice-1")
	b.Subscribe(s, "a2", alice, "file:///alice-2")
	b.SetLogLevel(s, "a2", alice, "debug")
	b.Subscribe(s, "b1", bob, "file:///bob")
	if got := b.InstanceSubscriptions(s, alice); !slices.Equal(got, []string{"file:///alice-1", "file:///alice-2"}) {
		t.Errorf("alice's instance told %v", got)
	}
	if got, level := b.InstanceSubscriptions(s, bob), b.EffectiveLogLevel(s, bob); !slices.Equal(got, []string{"file:///bob"}) || level != "" {
		t.Errorf("bob's instance told %v %q", got, level)
	}
	if !b.Pinned(s, alice) || !b.Pinned(s, bob) || b.Pinned(s, "") {
		t.Error("pins: each identity's instance by its own sessions, the shared one by none")
	}
	rs := newToldConn(true)
	b.Sync(rs, s, bob)
	if got, _ := rs.state(); !slices.Equal(got, []string{"file:///bob"}) {
		t.Errorf("bob's modern process was told %v", got)
	}
	b.End("b1")
	if b.Pinned(s, bob) || len(b.InstanceSubscriptions(s, bob)) != 0 || !b.Pinned(s, alice) {
		t.Error("bob's session's end took more, or less, than its own")
	}
}
