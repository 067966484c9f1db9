package launch

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// The Flattener's promises of concurrency: a start never waits for a
// resolution, no lock is held while the store is written or a
// resolution runs, each server's record has a lock of its own, and at
// most ResolveConcurrency resolutions run at once. The tests hold a
// resolution, or a read or write of the store, on a channel, and check
// that what must not wait for it returns. What waits on a lock the held
// work keeps is blocked for good, which testing/synctest does not take
// for a deadlock (a mutex is no durable block): those tests run on the
// real clock and report, after returnBound, what did not return. A
// passing test waits for nothing but what it checks returned.

// returnBound is how long what must not wait is given to return: far
// more than any of it takes (microseconds), reached only when it waits
// for what is held.
const returnBound = 5 * time.Second

// heldStore is a Store whose reads and writes of a server's record wait
// while the server's hold is on.
type heldStore struct {
	mu      sync.Mutex
	recs    map[string]json.RawMessage // by server and key
	holds   map[string]chan struct{}   // by "read "+server and "write "+server: closed to let them go
	entered chan string                // "read s", "write s": each read or write as it begins
}

func newHeldStore() *heldStore {
	return &heldStore{recs: map[string]json.RawMessage{}, holds: map[string]chan struct{}{}, entered: make(chan string, entries)}
}

// entries bounds what a test's resolutions and store reads and writes
// begin (their entered channels never block before): a few per start,
// status, refresh or Forget, of which TestFlattenerConcurrentUse makes
// 600.
const entries = 4096

// hold makes what ("read s", "write s") wait until the function returned
// is called.
func (st *heldStore) hold(what string) (release func()) {
	ch := make(chan struct{})
	st.mu.Lock()
	st.holds[what] = ch
	st.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (st *heldStore) wait(what string) {
	st.entered <- what
	st.mu.Lock()
	ch := st.holds[what]
	st.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (st *heldStore) Launch(server, key string) json.RawMessage {
	st.wait("read " + server)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.recs[server+"\x00"+key]
}

func (st *heldStore) PutLaunch(server, key string, rec json.RawMessage) error {
	st.wait("write " + server)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.recs[server+"\x00"+key] = rec
	return nil
}

// heldResolver resolves each package to its own fake install; a
// resolution of a package held waits until released (or its context
// ends). It counts the resolutions running, and the most at once.
type heldResolver struct {
	mu            sync.Mutex
	installs      map[string]*Resolution   // by package (Form.Target)
	holds         map[string]chan struct{} // by package
	entered       chan string              // each resolution's package, as it begins
	running, most int
}

func newHeldResolver() *heldResolver {
	return &heldResolver{installs: map[string]*Resolution{}, holds: map[string]chan struct{}{}, entered: make(chan string, entries)}
}

func (r *heldResolver) hold(pkg string) (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.holds[pkg] = ch
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (r *heldResolver) Resolve(ctx context.Context, f *Form, _ string, _ []string, _ string) (*Resolution, error) {
	r.mu.Lock()
	r.running++
	r.most = max(r.most, r.running)
	ch, res := r.holds[f.Target], r.installs[f.Target]
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running--
		r.mu.Unlock()
	}()
	r.entered <- f.Target
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, &Error{Reason: "timed out", Retry: true}
		}
	}
	return res, nil
}

// counts are the resolutions running now and the most that ran at once.
func (r *heldResolver) counts() (running, most int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running, r.most
}

// heldFlat is a Flattener over a heldResolver and a heldStore, whose
// starts spawn nothing and succeed; its background work ends with the
// test, every hold released first.
type heldFlat struct {
	fl    *Flattener
	cfg   *config.Config
	res   *heldResolver
	store *heldStore
}

// threeServers are three servers of three packages, run through npx.
const threeServers = `{"mcpServers":{
	"s":{"command":"npx","args":["-y","@fx/s"]},
	"u":{"command":"npx","args":["-y","@fx/u"]},
	"v":{"command":"npx","args":["-y","@fx/v"]}}}`

func newHeldFlat(t *testing.T) *heldFlat {
	t.Helper()
	h := &heldFlat{cfg: parseDoc(t, threeServers), res: newHeldResolver(), store: newHeldStore()}
	for _, pkg := range []string{"@fx/s", "@fx/u", "@fx/v"} {
		h.res.installs[pkg] = fakeInstall(t, t.TempDir(), "1.0.0")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		bgMu   sync.Mutex
		closed bool // no background work from then on
	)
	goFn := func(fn func(context.Context)) bool {
		bgMu.Lock()
		defer bgMu.Unlock()
		if closed {
			return false
		}
		wg.Go(func() { fn(ctx) })
		return true
	}
	fl, err := NewFlattener(Options{Resolver: h.res, Store: h.store, Logger: discardLogger(), Environ: proc.Environ, Go: goFn})
	if err != nil {
		t.Fatal(err)
	}
	h.fl = fl
	t.Cleanup(func() {
		h.res.mu.Lock()
		for pkg, ch := range h.res.holds {
			select {
			case <-ch:
			default:
				close(ch)
			}
			delete(h.res.holds, pkg)
		}
		h.res.mu.Unlock()
		h.store.mu.Lock()
		for what, ch := range h.store.holds {
			select {
			case <-ch:
			default:
				close(ch)
			}
			delete(h.store.holds, what)
		}
		h.store.mu.Unlock()
		bgMu.Lock()
		closed = true
		bgMu.Unlock()
		cancel()
		wg.Wait()
	})
	return h
}

// start starts the server as its connector would, the start succeeding
// at once, and returns the command line it ran.
func (h *heldFlat) start(name string) []string {
	sc := h.cfg.Server(name)
	spec := Spawn{Command: sc.Command, Args: sc.Args, Dir: sc.Cwd}
	if hook := h.fl.Hook(sc, func() *config.Server { return sc }); hook != nil {
		if started := hook(&spec); started != nil {
			started(nil)
		}
	}
	return append([]string{spec.Command}, spec.Args...)
}

func (h *heldFlat) refresh(name string) (*Status, error) {
	return h.fl.Refresh(context.Background(), func() *config.Server { return h.cfg.Server(name) })
}

// returns runs f, and fails t unless it returns within returnBound:
// what is held while it runs must not hold it up.
func returns[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(returnBound):
		t.Fatalf("%s waited for what is held", what)
		var zero T
		return zero
	}
}

// await fails t unless want comes on ch within returnBound (what else
// comes first is skipped).
func await(t *testing.T, ch chan string, want string) {
	t.Helper()
	timeout := time.After(returnBound)
	for {
		select {
		case got := <-ch:
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("%s never began: it waits for what is held", want)
		}
	}
}

// A start never waits for a resolution — its own server's, begun by its
// last start as written, nor another's —, nor does a status: while s's
// resolution is held, s starts again (as written: nothing is known yet)
// and says it resolves, and u starts, is resolved and written, and its
// next start is flattened.
func TestAStartNeverWaitsForAHeldResolution(t *testing.T) {
	h := newHeldFlat(t)
	h.res.hold("@fx/s")
	if got := returns(t, "the first start of s", func() []string { return h.start("s") }); got[0] != "npx" {
		t.Fatalf("the first start of s ran %q, want npx as written", got)
	}
	await(t, h.res.entered, "@fx/s")
	if got := returns(t, "a start of s while it resolves", func() []string { return h.start("s") }); got[0] != "npx" {
		t.Fatalf("a start of s while it resolves ran %q, want npx as written", got)
	}
	if ls := returns(t, "the status of s while it resolves", func() *Status { return h.fl.Status(h.cfg.Server("s")) }); !ls.Resolving {
		t.Fatalf("the status of s while it resolves: %+v", ls)
	}
	returns(t, "a start of u while s resolves", func() []string { return h.start("u") })
	await(t, h.store.entered, "write u")
	if got := returns(t, "u's next start", func() []string { return h.start("u") }); got[0] != h.res.installs["@fx/u"].Command {
		t.Fatalf("u's start after its resolution ran %q: not flattened", got)
	}
}

// A start never waits for the store's write of what a resolution found,
// which is used at once: while s's write is held, s starts flattened and
// its status says so; and the writes of different servers do not queue
// on one another: u's resolution and write go on meanwhile.
func TestAStartNeverWaitsForAHeldStoreWrite(t *testing.T) {
	h := newHeldFlat(t)
	h.store.hold("write s")
	returns(t, "the first start of s", func() []string { return h.start("s") })
	await(t, h.store.entered, "write s")
	flat := h.res.installs["@fx/s"].Command
	if got := returns(t, "a start of s while its record is written", func() []string { return h.start("s") }); got[0] != flat {
		t.Fatalf("a start of s while its record is written ran %q, want it flattened", got)
	}
	if ls := returns(t, "the status of s while its record is written", func() *Status { return h.fl.Status(h.cfg.Server("s")) }); !ls.Flattened {
		t.Fatalf("the status of s while its record is written: %+v", ls)
	}
	returns(t, "a start of u while s's record is written", func() []string { return h.start("u") })
	await(t, h.store.entered, "write u")
	if got := returns(t, "u's next start", func() []string { return h.start("u") }); got[0] != h.res.installs["@fx/u"].Command {
		t.Fatalf("u's start after its resolution ran %q: not flattened", got)
	}
}

// Refresh holds no lock while it writes the store or resolves: a start of
// the server it refreshes, and its status, return meanwhile — as written
// while it forgets the record (its first write) and while it resolves,
// flattened once the resolution is known, while it is written.
func TestRefreshHoldsNoLockWhileItResolvesOrWrites(t *testing.T) {
	h := newHeldFlat(t)
	flat := h.res.installs["@fx/s"].Command
	check := func(when, want string, resolving bool) {
		t.Helper()
		if got := returns(t, "a start of s while Refresh "+when, func() []string { return h.start("s") }); got[0] != want {
			t.Fatalf("a start of s while Refresh %s ran %q, want %s", when, got, want)
		}
		if ls := returns(t, "the status of s while Refresh "+when, func() *Status { return h.fl.Status(h.cfg.Server("s")) }); ls.Resolving != resolving {
			t.Fatalf("the status of s while Refresh %s: %+v", when, ls)
		}
	}
	releaseForget := h.store.hold("write s")
	refreshed := make(chan error, 1)
	go func() {
		_, err := h.refresh("s")
		refreshed <- err
	}()
	await(t, h.store.entered, "write s")
	check("forgets the record", "npx", true)
	releaseResolve := h.res.hold("@fx/s")
	releaseForget()
	await(t, h.res.entered, "@fx/s")
	check("resolves", "npx", true)
	releaseWrite := h.store.hold("write s")
	releaseResolve()
	await(t, h.store.entered, "write s")
	check("writes the resolution", flat, false)
	releaseWrite()
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
}

// Each server's record has a lock of its own: a start of s that reads its
// record from the store (its first: the launch's key is new) holds s's
// lock alone, and a start of u, and u's status, return meanwhile.
func TestEachServerHasItsOwnLock(t *testing.T) {
	h := newHeldFlat(t)
	release := h.store.hold("read s")
	started := make(chan struct{})
	go func() {
		h.start("s")
		close(started)
	}()
	await(t, h.store.entered, "read s")
	returns(t, "a start of u while s's record is read", func() []string { return h.start("u") })
	returns(t, "the status of u while s's record is read", func() *Status { return h.fl.Status(h.cfg.Server("u")) })
	release()
	<-started
}

// At most ResolveConcurrency resolutions run at once, and the starts
// that begin more return all the same: the others wait for a place, and
// take it when one ends.
func TestResolutionsRunBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHeldFlat(t)
		releases := map[string]func(){}
		for _, pkg := range []string{"@fx/s", "@fx/u", "@fx/v"} {
			releases[pkg] = h.res.hold(pkg)
		}
		for _, name := range []string{"s", "u", "v"} {
			h.start(name)
		}
		synctest.Wait()
		if running, most := h.res.counts(); running != ResolveConcurrency || most != ResolveConcurrency {
			t.Fatalf("%d resolutions running (at most %d at once) after three starts, want %d", running, most, ResolveConcurrency)
		}
		for _, release := range releases {
			release()
			synctest.Wait()
			if _, most := h.res.counts(); most > ResolveConcurrency {
				t.Fatalf("%d resolutions ran at once, want at most %d", most, ResolveConcurrency)
			}
		}
		if running, _ := h.res.counts(); running != 0 || len(h.res.entered) != 3 {
			t.Fatalf("%d resolutions still running, %d begun; want 0 and 3", running, len(h.res.entered))
		}
	})
}

// All the Flattener's methods are safe to call concurrently: starts,
// statuses, refreshes and Forget of three servers at once, their
// resolutions and writes in the background, race with nothing (the race
// detector's word), and every start runs either the command as written
// or the server's own resolution.
func TestFlattenerConcurrentUse(t *testing.T) {
	h := newHeldFlat(t)
	var wg sync.WaitGroup
	for _, name := range []string{"s", "u", "v"} {
		flat := h.res.installs["@fx/"+name].Command
		for job := range 4 {
			wg.Go(func() {
				for n := range 50 {
					switch (job + n) % 4 {
					case 0, 1:
						if got := h.start(name); got[0] != "npx" && got[0] != flat {
							t.Errorf("a start of %s ran %q", name, got)
						}
					case 2:
						h.fl.Status(h.cfg.Server(name))
					case 3:
						if n%8 == 3 {
							if _, err := h.refresh(name); err != nil {
								t.Errorf("refresh of %s: %v", name, err)
							}
						} else {
							h.fl.Forget(func(string) bool { return n%2 == 0 })
						}
					}
				}
			})
		}
	}
	wg.Wait()
}
