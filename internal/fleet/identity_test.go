package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

var (
	alice = (&identity.Identity{Kind: identity.Token, Issuer: "https://idp.example", Subject: "alice", UID: -1}).Finish()
	bob   = (&identity.Identity{Kind: identity.Token, Issuer: "https://idp.example", Subject: "bob", UID: -1}).Finish()
	carol = (&identity.Identity{Kind: identity.Token, Issuer: "https://idp.example", Subject: "carol", UID: -1}).Finish()
)

// heard records what servers send on their own, with its source.
type heard struct {
	mu  sync.Mutex
	got []heardMsg
}

type heardMsg struct {
	src Source
	m   *rpc.Message
}

func (h *heard) Notification(src Source, m *rpc.Message) {
	h.mu.Lock()
	h.got = append(h.got, heardMsg{src, m})
	h.mu.Unlock()
}

func (h *heard) Request(src Source, m *rpc.Message) {
	go func() { _ = src.Conn.ReplyError(m.ID, rpc.MethodNotFound, "no client") }()
}

func (h *heard) messages() []heardMsg {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]heardMsg(nil), h.got...)
}

// identityFleet runs servers (JSON of mcpServers' members, $FIXTURE the
// fixture server) for real, with store as its secret store; tweak, if
// any, changes the parsed configuration first.
func identityFleet(t *testing.T, servers string, store *memStore, hooks Hooks, tweak ...func(*config.Config)) (*Fleet, func(string) *config.Config) {
	t.Helper()
	fixture := testserver.Build(t)
	parse := func(servers string) *config.Config {
		servers = strings.ReplaceAll(servers, "$FIXTURE", fixture)
		cfg, err := config.Parse([]byte(`{"defaults":{"stop":{"stdinWait":"300ms","termWait":"300ms"}},"mcpServers":{`+servers+`}}`), "test.json",
			config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	rt, err := proc.Open(proc.Options{NoCgroup: true, NoPIDNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := parse(servers)
	for _, tw := range tweak {
		tw(cfg)
	}
	f, err := New(cfg, Options{Runtime: rt, Logger: discardLogger(), Secrets: store, Hooks: hooks,
		LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Close(ctx)
		_ = rt.Close(ctx)
	})
	return f, parse
}

// describe asks the instance s serves key from what FIXTURE_TAG it was
// started with, and which process it is.
func describe(t *testing.T, s *Server, key string) (tag string, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := s.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", key, err)
	}
	defer l.Release()
	m, err := l.Conn().Call(ctx, "x/describe", json.RawMessage(`{}`))
	if err != nil || m.Error != nil {
		t.Fatalf("describe: %v %+v", err, m)
	}
	var r struct{ Tag string }
	if err := json.Unmarshal(m.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r.Tag, pidOf(l.live)
}

// waitGoneProcess waits (bounded) for process pid to be gone.
func waitGoneProcess(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s: process %d still runs", what, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

const perIdentityServer = `"p":{"command":"$FIXTURE","sharing":"per-identity","idleTimeout":"0","maxInstances":3,
	"env":{"FIXTURE_TAG":"${identity.sub}|${identity.key}|${keyring:tok@identity}"}}`

// Each identity gets its own process, started with its own values —
// its subject, its key, its own credential —, shared by all its
// sessions; maxInstances refuses one more identity; the end of a
// session stops nothing; a request that names no identity's instance
// gets none; nothing the fleet shows holds a credential.
func TestPerIdentityInstances(t *testing.T) {
	store := &memStore{m: map[string]string{
		"tok/anonymous":      "anon-credential-000",
		"tok/" + alice.Key(): "alice-credential-111",
		"tok/" + bob.Key():   "bob-credential-222",
		"tok/" + carol.Key(): "carol-credential-333",
		"tok":                "shared-credential-999",
	}}
	f, _ := identityFleet(t, perIdentityServer, store, nil)
	p := f.Get("p")
	ka, ka2, kb := p.InstanceKey("s1", alice), p.InstanceKey("s2", alice), p.InstanceKey("s3", bob)
	if ka != ka2 || ka == kb || ka == "s1" {
		t.Fatalf("instance keys: alice %q and %q, bob %q", ka, ka2, kb)
	}
	tagA, pidA := describe(t, p, ka)
	tagA2, pidA2 := describe(t, p, ka2)
	tagB, pidB := describe(t, p, kb)
	if want := "alice|" + alice.Key() + "|alice-credential-111"; tagA != want || tagA2 != want {
		t.Errorf("alice's process has %q and %q, want %q", tagA, tagA2, want)
	}
	if want := "bob|" + bob.Key() + "|bob-credential-222"; tagB != want {
		t.Errorf("bob's process has %q, want %q", tagB, want)
	}
	if pidA == 0 || pidA != pidA2 || pidA == pidB {
		t.Errorf("processes: alice %d and %d, bob %d; want one for alice, another for bob", pidA, pidA2, pidB)
	}
	// The anonymous identity is one more, shared by every anonymous request.
	kn := p.InstanceKey("s4", nil)
	if kn != p.InstanceKey("s5", nil) || kn == ka {
		t.Fatalf("anonymous keys %q", kn)
	}
	if tag, _ := describe(t, p, kn); tag != "|anonymous|anon-credential-000" {
		t.Errorf("the anonymous process has %q", tag)
	}
	// At maxInstances (3), one more identity is refused.
	_, err := p.Acquire(t.Context(), p.InstanceKey("s6", carol))
	if !errors.Is(err, ErrInstanceLimit) || !strings.Contains(err.Error(), "one per identity") {
		t.Fatalf("a fourth identity at maxInstances 3: %v", err)
	}
	// A session's end stops nothing of its identity's.
	f.DetachSession("s1")(t.Context())
	f.EndSession(t.Context(), "s2")
	if _, pid := describe(t, p, p.InstanceKey("s7", alice)); pid != pidA || !alive(pidA) {
		t.Errorf("after alice's sessions ended her process is %d (was %d, alive %v)", pid, pidA, alive(pidA))
	}
	// A session's own key names no identity: nothing is leased under it.
	if _, err := p.Acquire(t.Context(), "s3"); err == nil || !strings.Contains(err.Error(), "serves each identity from its own instance") {
		t.Errorf("Acquire under a session key: %v", err)
	}
	if l, ok := p.TryAcquire("s3"); ok {
		l.Release()
		t.Error("TryAcquire under a session key leased an instance")
	}
	if l, ok := p.Peek("s3"); ok {
		l.Release()
		t.Error("Peek under a session key leased an instance")
	}
	// Status and inspect list each identity's instance by name.
	st := p.Status()
	var names []string
	for _, is := range st.Identities {
		names = append(names, is.Name+"="+is.State)
		if is.Name == "alice" && (is.Identity != alice.Key() || is.PID != pidA) {
			t.Errorf("alice's status: %+v", is)
		}
	}
	if got := strings.Join(names, ","); got != "alice=running,anonymous=running,bob=running" || st.Sessions != 0 {
		t.Errorf("status lists %s and %d sessions", got, st.Sessions)
	}
	byName := map[string]InstanceStatus{}
	for _, is := range p.Detail().Instances {
		byName[is.IdentityName] = is
	}
	if is := byName["bob"]; is.Identity != bob.Key() || is.PID != pidB || is.Shared {
		t.Errorf("inspect shows bob's instance as %+v", is)
	}
	shown, _ := json.Marshal([]any{st, p.Detail()})
	for _, v := range []string{"credential-111", "credential-222", "credential-000", "credential-999"} {
		if strings.Contains(string(shown), v) {
			t.Errorf("status shows %s: %s", v, shown)
		}
	}
}

// An identity without its own credential does not start with anyone
// else's: the start fails naming the reference.
func TestPerIdentityCredentialIsTheIdentitysOwn(t *testing.T) {
	store := &memStore{m: map[string]string{"tok": "shared-credential-999", "tok/" + alice.Key(): "alice-credential-111"}}
	f, _ := identityFleet(t, perIdentityServer, store, nil)
	p := f.Get("p")
	_, err := p.Acquire(t.Context(), p.InstanceKey("s1", bob))
	var se *SecretError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "${keyring:tok@identity}") || !strings.Contains(err.Error(), "tok/"+bob.Key()) {
		t.Fatalf("bob without a credential: %v", err)
	}
	if strings.Contains(err.Error(), "credential-") {
		t.Fatalf("the error holds a value: %v", err)
	}
	if tag, _ := describe(t, p, p.InstanceKey("s2", alice)); !strings.HasSuffix(tag, "|alice-credential-111") {
		t.Errorf("alice's process has %q", tag)
	}
}

// An identity's instance idle for the server's idle timeout stops and
// gives its place under maxInstances back: another identity starts; the
// first identity's next request starts a new process.
func TestPerIdentityIdleInstanceStops(t *testing.T) {
	store := &memStore{m: map[string]string{"tok/" + alice.Key(): "alice-credential-111", "tok/" + bob.Key(): "bob-credential-222"}}
	f, _ := identityFleet(t, `"p":{"command":"$FIXTURE","sharing":"per-identity","idleTimeout":"400ms","startGrace":"0s","maxInstances":1,
		"env":{"FIXTURE_TAG":"${identity.sub}|${keyring:tok@identity}"}}`, store, nil)
	p := f.Get("p")
	_, pidA := describe(t, p, p.InstanceKey("s1", alice))
	// Busy, alice holds the only place.
	if _, err := p.Acquire(t.Context(), p.InstanceKey("s2", bob)); !errors.Is(err, ErrInstanceLimit) {
		t.Fatalf("bob while alice's instance runs: %v", err)
	}
	waitGoneProcess(t, pidA, "alice's idle instance")
	deadline := time.Now().Add(10 * time.Second)
	for len(p.Status().Identities) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("alice's dormant instance is still listed: %+v", p.Status().Identities)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tag, pidB := describe(t, p, p.InstanceKey("s2", bob))
	if tag != "bob|bob-credential-222" || !alive(pidB) {
		t.Fatalf("bob after alice's instance stopped: %q, pid %d", tag, pidB)
	}
	waitGoneProcess(t, pidB, "bob's idle instance")
	if tag, pid := describe(t, p, p.InstanceKey("s1", alice)); tag != "alice|alice-credential-111" || pid == pidA {
		t.Errorf("alice again: %q in process %d (the first was %d)", tag, pid, pidA)
	}
}

// A request that found an identity's instance as it was released for
// idleness is sent on to the identity's new instance: none is left
// running outside the server's instances.
func TestPerIdentityReleaseRacesAcquire(t *testing.T) {
	store := &memStore{m: map[string]string{"tok/" + alice.Key(): "alice-credential-111"}}
	f, _ := identityFleet(t, `"p":{"command":"$FIXTURE","sharing":"per-identity","idleTimeout":"0","maxInstances":1,
		"env":{"FIXTURE_TAG":"${keyring:tok@identity}"}}`, store, nil)
	p := f.Get("p")
	key := p.InstanceKey("s1", alice)
	_, pid := describe(t, p, key)
	in := p.instanceOf(key)
	if err := p.Sleep(t.Context()); err == nil {
		t.Fatal("Sleep of a per-identity server put something to sleep")
	}
	// Dormant as idleness leaves it, then released.
	var done <-chan struct{}
	in.apply(in.update(func(st *instState) (fx effects) { done = in.sleepLocked(st, &fx, time.Now(), "", nil); return }))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the sleep did not end")
	}
	waitGoneProcess(t, pid, "the sleeping instance")
	if p.instanceOf(key) != nil {
		t.Fatal("a dormant identity's instance is still the server's")
	}
	// The old instance is out of service: a lease found on it goes on to
	// a new one, which is the server's.
	if _, _, err := in.acquire(t.Context()); !errors.Is(err, errRetired) {
		t.Fatalf("acquire on the released instance: %v", err)
	}
	if _, pid2 := describe(t, p, key); pid2 == pid || p.instanceOf(key) == nil || p.instanceOf(key) == in {
		t.Fatalf("after release: process %d, instance %p (old %p)", pid2, p.instanceOf(key), in)
	}
}

// A reload that removes a per-identity server, or changes its launch,
// stops every identity's instance; so does a restart.
func TestPerIdentityInstancesStopWithTheServer(t *testing.T) {
	store := &memStore{m: map[string]string{"tok/" + alice.Key(): "alice-credential-111", "tok/" + bob.Key(): "bob-credential-222"}}
	f, parse := identityFleet(t, perIdentityServer, store, nil)
	p := f.Get("p")
	_, pidA := describe(t, p, p.InstanceKey("s1", alice))
	_, pidB := describe(t, p, p.InstanceKey("s2", bob))
	if _, err := p.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitGoneProcess(t, pidA, "alice's instance after a restart")
	waitGoneProcess(t, pidB, "bob's instance after a restart")
	_, pidA = describe(t, p, p.InstanceKey("s1", alice))
	if _, err := f.Reload(t.Context(), parse(`"q":{"command":"$FIXTURE"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	waitGoneProcess(t, pidA, "alice's instance after its server was removed")
	if _, err := p.Acquire(t.Context(), p.InstanceKey("s1", alice)); !errors.Is(err, ErrRemoved) {
		t.Errorf("a removed server's identity instance: %v", err)
	}
}

// What an identity's instance sends on its own — a log message, a list
// change — is tagged with that identity, so that it reaches that
// identity's sessions only (Source.Reaches): alice's messages never reach
// bob's session, nor bob's alice's.
func TestPerIdentityNotificationsStayWithTheirIdentity(t *testing.T) {
	store := &memStore{m: map[string]string{"tok/" + alice.Key(): "alice-credential-111", "tok/" + bob.Key(): "bob-credential-222"}}
	h := &heard{}
	f, _ := identityFleet(t, perIdentityServer, store, h)
	p := f.Get("p")
	call := func(who *identity.Identity, session, text string) {
		l, err := p.Acquire(t.Context(), p.InstanceKey(session, who))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release()
		_, err = l.Conn().Call(t.Context(), "tools/call", json.RawMessage(`{"name":"log","arguments":{"text":"`+text+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
	}
	call(alice, "s-alice", "from-alice")
	call(bob, "s-bob", "from-bob")
	// The sessions a gateway would deliver each message to, of those
	// open: alice's and bob's.
	sessions := map[string]*identity.Identity{"s-alice": alice, "s-bob": bob, "s-anon": nil}
	delivered := map[string][]string{}
	var logs int
	for _, hm := range h.messages() {
		if hm.m.Method != "notifications/message" {
			continue
		}
		logs++
		for s, who := range sessions {
			if hm.src.Reaches(who) {
				delivered[s] = append(delivered[s], string(hm.m.Params))
			}
		}
		from := alice
		if strings.Contains(string(hm.m.Params), "from-bob") {
			from = bob
		}
		if hm.src.Identity != from.Key() || hm.src.Session != p.InstanceKey("", from) {
			t.Errorf("%s came tagged %q (session %q), want %s's", hm.m.Params, hm.src.Identity, hm.src.Session, from.Subject)
		}
	}
	if logs != 2 {
		t.Fatalf("%d log messages heard, want 2", logs)
	}
	for s, got := range delivered {
		for _, params := range got {
			if !strings.Contains(params, "from-"+strings.TrimPrefix(s, "s-")) {
				t.Errorf("session %s would get %s", s, params)
			}
		}
	}
	if len(delivered["s-alice"]) != 1 || len(delivered["s-bob"]) != 1 || len(delivered["s-anon"]) != 0 {
		t.Errorf("delivered %v", delivered)
	}
	// Messages of every other instance reach anyone Source.Session lets.
	if !(Source{}).Reaches(bob) || !(Source{Session: "s1"}).Reaches(nil) {
		t.Error("Reaches refuses a message of an instance that is no identity's")
	}
}

// InstanceKey leaves every key of a server that is not per-identity as it
// is; ${identity.*} in such a server (which the config refuses) fails its
// start naming it.
func TestInstanceKeyOfOtherServers(t *testing.T) {
	f, _ := identityFleet(t, `"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE","sharing":"per-session"},
		"c":{"command":"$FIXTURE","sharing":"per-identity","env":{"FIXTURE_TAG":"${identity.sub}"}}`, &memStore{m: map[string]string{}}, nil,
		func(cfg *config.Config) { cfg.Server("c").Sharing = config.SharingShared })
	for _, name := range []string{"a", "b"} {
		s := f.Get(name)
		if k := s.InstanceKey("s1", alice); k != "s1" {
			t.Errorf("%s: InstanceKey = %q", name, k)
		}
		if s.PerIdentity() || s.Private() != (name == "b") {
			t.Errorf("%s: PerIdentity %v, Private %v", name, s.PerIdentity(), s.Private())
		}
	}
	if _, err := f.Get("b").Acquire(t.Context(), "identity/"+alice.Key()); err == nil {
		t.Error("a per-session server leased an identity's instance")
	}
	_, err := f.Get("c").Acquire(t.Context(), "")
	if err == nil || !strings.Contains(err.Error(), "${identity.sub}") || !strings.Contains(err.Error(), "per-identity") {
		t.Errorf("${identity.sub} in a shared server: %v", err)
	}
}

// At maxInstances, a new identity waits for an identity's instance that
// is going to sleep for idleness, and takes its place once it is gone.
func TestPerIdentityWaitsForASleepingInstance(t *testing.T) {
	store := &memStore{m: map[string]string{"tok/" + alice.Key(): "alice-credential-111", "tok/" + bob.Key(): "bob-credential-222"}}
	f, _ := identityFleet(t, `"p":{"command":"$FIXTURE","sharing":"per-identity","idleTimeout":"0","maxInstances":1,
		"env":{"FIXTURE_TAG":"${identity.sub}"}}`, store, nil)
	p := f.Get("p")
	ka := p.InstanceKey("s1", alice)
	_, pidA := describe(t, p, ka)
	in := p.instanceOf(ka)
	// Going to sleep: the stop is held back until bob waits.
	var fx effects
	in.do(func(st *instState) (_ effects) { in.sleepLocked(st, &fx, time.Now(), "", nil); return })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := p.Acquire(ctx, p.InstanceKey("s2", bob))
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			select {
			case err := <-got:
				t.Fatalf("bob's Acquire returned %v while %s", err, what)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	until("bob waits for a place", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.freed != nil
	})
	in.apply(fx) // alice's instance stops, and is released
	if err := <-got; err != nil {
		t.Fatalf("bob after alice's instance went to sleep: %v", err)
	}
	waitGoneProcess(t, pidA, "alice's sleeping instance")
	if ids := p.Status().Identities; len(ids) != 1 || ids[0].Name != "bob" {
		t.Errorf("instances: %+v", ids)
	}
}
