package catalog

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Instances that remember different results at once leave the store with
// the one held last: here the write of the first is held after it took
// its result while the second remembers another and writes; the result
// marked saved is then the one on disk, and a cold read gives what the
// summary was derived from.
func TestConcurrentInitWritesLeaveTheOneHeld(t *testing.T) {
	s, _ := newTestCatalog(t, openStore(t))
	a := json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"A"}}`)
	b := json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"B"}}`)
	key, _ := s.launchKey()
	held, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	s.env().beforeInitWrite = func() {
		if calls.Add(1) == 1 { // the first write only
			close(held)
			<-release
		}
	}
	first := make(chan struct{})
	go func() {
		defer close(first)
		if s.lists.putInit(a, key, 0) {
			s.persistInit() // holds in beforeInitWrite, with a taken
		}
	}()
	<-held
	// Deterministic, where the window below is not: the first write
	// holds the lock that serializes them.
	if s.env().initWrites.TryLock() {
		s.env().initWrites.Unlock()
		close(release)
		<-first
		t.Fatal("a write of an initialize result does not hold the lock that serializes them")
	}
	second := make(chan struct{})
	go func() {
		defer close(second)
		if s.lists.putInit(b, key, 0) {
			s.persistInit()
		}
	}()
	// The second either waits for the first's write (serialized) or
	// writes b now; let it get that far, then let the first write.
	select {
	case <-second:
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-first
	<-second
	s.spillLists()
	if got := s.CachedInit(); string(got) != string(b) {
		t.Fatalf("after the writes, the result held is b and it reads back as %s", got)
	}
	if s.Era() != "2025-06-18" || s.AnnouncesChanges("tools") {
		t.Fatalf("era %q, announces tools %v: not b's", s.Era(), s.AnnouncesChanges("tools"))
	}
}

// launchNow sees a relaunch whole: the generation and the configuration
// it gives are of the same launch, however the two interleave with
// relaunches (here: launches a and b in turn, odd generations b's).
func TestLaunchNowSeesARelaunchWhole(t *testing.T) {
	s, h := newTestCatalog(t, nil)
	a := h.Config()
	b := serverConfig(t, "fake2")
	stop := make(chan struct{})
	var bad atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			gen, cfg := s.launchNow()
			if (gen%2 == 1) != (cfg == b) {
				bad.Add(1)
			}
		}
	}()
	for i := range 20000 {
		next := a
		if i%2 == 0 {
			next = b
		}
		s.lists.relaunched(func() { h.cfg.Swap(next) })
	}
	close(stop)
	<-done
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d reads saw the generation of one launch with the configuration of another", n)
	}
}

// dormantServer is the catalog of server "s" (idle timeout 10m) on st,
// whose server srv (nil: newTestServer's) serves echoV1: learned and
// put to sleep.
func dormantServer(t *testing.T, srv *testServer, st *store.Store) (*Catalog, *testHost) {
	t.Helper()
	if srv == nil {
		srv = newTestServer(t, "")
	}
	c, h := newTestCatalogOf(t, st, serverConfig(t, "fake"), srv)
	srv.setItems(echoV1)
	learnTools(t, c)
	sleepNow(h)
	return c, h
}

// serverS is the catalog of server "s" (idle timeout 10m) on st, its
// server serving echoV1, not started.
func serverS(t *testing.T, st *store.Store) (*Catalog, *testHost) {
	t.Helper()
	c, h := newTestCatalog(t, st)
	h.srv.setItems(echoV1)
	return c, h
}

// relaunchS reloads server "s" with the launch command (idle timeout
// 10m), without learning, and waits for the reload to settle (in a
// synctest bubble).
func relaunchS(t *testing.T, h *testHost, command string) {
	t.Helper()
	h.relaunch(serverConfig(t, command))
	synctest.Wait()
}

// A dormant server's initialize result leaves memory once it is on disk,
// and reads back as it was; its version and the list changes it
// announces are still known without reading it. A wake that finds the
// same result takes it back into memory without writing it again; one
// that finds another writes it. After a restart it is cold from the
// start; gone from the store, it is unknown. One of a version not in
// knownVersions stays in memory.
func TestADormantServersInitLeavesMemory(t *testing.T) {
	const first = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"prompts":{}}}`
	const second = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"b"}}`
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		srv := newTestServer(t, first)
		s, h := newTestCatalogOf(t, st, serverConfig(t, "fake"), srv)
		srv.setItems(echoV1)
		learnTools(t, s)
		if raw, cold, saved := initState(s); raw != first || cold || !saved {
			t.Fatalf("a running server's init: %s, cold %v, saved %v", raw, cold, saved)
		}
		sleepNow(h)
		if raw, cold, _ := initState(s); raw != "" || !cold {
			t.Fatalf("a dormant server's init still in memory: %s (cold %v)", raw, cold)
		}
		check := func(when, raw, era string, tools, prompts bool) {
			t.Helper()
			if got := string(s.CachedInit()); got != raw {
				t.Errorf("%s: CachedInit %s, want %s", when, got, raw)
			}
			if got := s.Era(); got != era {
				t.Errorf("%s: Era %q, want %q", when, got, era)
			}
			if got := s.AnnouncesChanges("tools"); got != tools {
				t.Errorf("%s: announces tools changes %v, want %v", when, got, tools)
			}
			if got := s.AnnouncesChanges("prompts"); got != prompts {
				t.Errorf("%s: announces prompts changes %v, want %v", when, got, prompts)
			}
			if got := s.AnnouncesChanges("resources"); got != (raw != "") {
				t.Errorf("%s: announces resources changes %v (it has none)", when, got)
			}
		}
		check("dormant", first, "2025-11-25", true, false)

		// A wake with the same result: in memory again, not written. (The
		// first wake learns the other lists; the second writes nothing.)
		wake(t, h)
		sleepNow(h)
		hash := s.host.Config().LaunchHash()
		before, _ := st.Lists("s", hash)
		time.Sleep(time.Second)
		wake(t, h)
		if raw, cold, saved := initState(s); raw != first || cold || !saved {
			t.Fatalf("after a wake: init %s, cold %v, saved %v", raw, cold, saved)
		}
		if after, _ := st.Lists("s", hash); !after.Fetched.Equal(before.Fetched) {
			t.Errorf("a wake that found the same init wrote the entry (fetched %v, was %v)", after.Fetched, before.Fetched)
		}

		// A wake with another result writes it, and it goes cold again.
		sleepNow(h)
		srv.setInit(t, second)
		wake(t, h)
		if raw, ok, err := st.Init("s", hash); err != nil || !ok || string(raw) != second {
			t.Fatalf("the changed init on disk: %s (%v, %v)", raw, ok, err)
		}
		sleepNow(h)
		check("dormant with the second init", second, "2025-06-18", false, true)
		if got := string(s.ServerInfo()); got != `{"name":"b"}` {
			t.Errorf("serverInfo of the cold init: %s", got)
		}
		h.close()

		// After a restart: cold from the start.
		s, _ = h.restart(t)
		if raw, cold, _ := initState(s); raw != "" || !cold {
			t.Fatalf("after a restart, the init is in memory: %s (cold %v)", raw, cold)
		}
		check("after a restart", second, "2025-06-18", false, true)

		// Gone from the store: unknown.
		if err := st.Forget("s"); err != nil {
			t.Fatal(err)
		}
		check("gone from the store", "", "", false, false)
	})
}

// An initialize result whose protocol version is not one of
// knownVersions stays in memory when its server goes dormant: its version
// could not be kept otherwise.
func TestAnInitOfAnUnknownVersionStaysInMemory(t *testing.T) {
	const odd = `{"protocolVersion":"2099-01-01","capabilities":{}}`
	synctest.Test(t, func(t *testing.T) {
		s, _ := dormantServer(t, newTestServer(t, odd), openStore(t))
		if raw, cold, _ := initState(s); raw != odd || cold {
			t.Fatalf("the init of an unknown version: %s, cold %v", raw, cold)
		}
		if got := s.Era(); got != "2099-01-01" {
			t.Fatalf("Era %q", got)
		}
	})
}

// A reload that relaunches a dormant server, without learning it again,
// keeps its initialize result: read back into memory before the store
// entry it was under is pruned.
func TestARelaunchKeepsAColdInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := dormantServer(t, nil, openStore(t))
		if _, cold, _ := initState(s); !cold {
			t.Fatal("the dormant server's init is not cold")
		}
		relaunchS(t, h, "fake2")
		if n := h.startCount(); n != 1 {
			t.Fatalf("%d starts: the reload started the server", n)
		}
		wantInitKnown(t, s, "after the relaunch")
	})
}

// A write of the initialize result that finishes after a reload
// relaunched the server does not mark it saved: it is under the earlier
// launch's hash, whose entry the reload pruned. The new launch writes it
// under its own, and it reads back once cold.
func TestAnInitWrittenAcrossARelaunchIsWrittenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		s, h := serverS(t, st)
		raw := json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}}}`)
		// persistInit of an instance of the old launch, step by step:
		old, _ := s.launchKey()
		if !s.lists.putInit(raw, old, s.lists.generation()) {
			t.Fatal("a first result is not to be written")
		}
		held, seq, ok := s.lists.initToWrite(old)
		if !ok {
			t.Fatal("nothing to write")
		}
		if err := st.PutInit("s", s.host.Config().LaunchHash(), held); err != nil {
			t.Fatal(err)
		}
		// ... and a reload relaunches the server before it is marked.
		relaunchS(t, h, "fake2")
		s.lists.initWritten(seq, old)
		if _, _, saved := initState(s); saved {
			t.Fatal("a result written under the earlier launch's hash is taken to be on disk under the new one's")
		}
		learnTools(t, s) // the new launch, same result
		sleepNow(h)
		if _, ok, _ := st.Init("s", s.host.Config().LaunchHash()); !ok {
			t.Error("the new launch's result was never written under its hash")
		}
		wantInitKnown(t, s, "the new launch's, dormant")
	})
}

// The result goes cold only once it is on disk: one whose write failed
// stays in memory when its server goes dormant. A cold one that cannot be
// read (the store closed) reads as nil, but its version and the changes
// it announces stay known, and it is still cold: it is there to read
// once the store can be. A capability that announces no list is no.
func TestAnUnwrittenInitStaysAndAnUnreadableOneStaysKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		s, _ := dormantServer(t, nil, st)
		if _, cold, _ := initState(s); !cold {
			t.Fatal("a written result did not go cold")
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if raw := s.CachedInit(); raw != nil {
			t.Fatalf("a cold result read from a closed store: %s", raw)
		}
		if _, cold, _ := initState(s); !cold || s.Era() != "2025-11-25" || !s.AnnouncesChanges("tools") {
			t.Fatalf("after a failed read: cold %v, era %q, announces tools %v", cold, s.Era(), s.AnnouncesChanges("tools"))
		}
		if s.AnnouncesChanges("logging") {
			t.Fatal("announces changes of a capability with no list")
		}

		// A fresh catalog whose store refuses the write: the result stays.
		st2 := openStore(t)
		s2, h2 := newTestCatalog(t, st2)
		h2.srv.setItems(echoV1)
		if err := st2.Close(); err != nil {
			t.Fatal(err)
		}
		learnTools(t, s2)
		sleepNow(h2)
		if raw, cold, saved := initState(s2); raw == "" || cold || saved {
			t.Fatalf("a result the store refused: %s, cold %v, saved %v", raw, cold, saved)
		}
		if s2.CachedInit() == nil {
			t.Fatal("a result the store refused is lost")
		}
	})
}

// A relaunch whose read of the store fails loses the earlier launch's
// result itself, not its version nor the changes it announces; one whose
// read succeeds keeps the result in bytes of its own, not in the buffer
// of every list read with it.
func TestARelaunchThatCannotReadKeepsWhatIsKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		s, h := dormantServer(t, nil, st)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		relaunchS(t, h, "fake2")
		if s.Era() != "2025-11-25" || !s.AnnouncesChanges("tools") {
			t.Fatalf("after a relaunch whose read failed: era %q, announces tools %v", s.Era(), s.AnnouncesChanges("tools"))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s, h := newTestCatalog(t, openStore(t))
		var tools []string
		for i := range 4000 {
			tools = append(tools, fmt.Sprintf(`{"name":"t%04d","description":%q}`, i, strings.Repeat("x", 240)))
		}
		h.srv.setItems(tools...)
		learnTools(t, s)
		sleepNow(h)
		before := testserver.LiveHeap()
		relaunchS(t, h, "fake2")
		l := &s.lists
		l.mu.Lock()
		n, init := len(l.items), l.init
		l.mu.Unlock()
		grown := testserver.LiveHeap() - before
		if n == 0 && grown > 256<<10 {
			t.Fatalf("no list held after the relaunch, yet the live heap grew by %d bytes: the %d-byte result keeps the buffer of the lists read with it", grown, len(init))
		}
	})
}

// A server going dormant while a reload relaunches it spills nothing of
// the earlier launch: its initialize result stays in memory, not cold
// under a hash it is not stored under or under the entry the reload
// prunes. (The reload's locked section, step by step, with a spill — the
// dormant stop's, which runs without the fleet's operator lock — before,
// between and after its steps.)
func TestASpillDuringARelaunchKeepsTheInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := serverS(t, openStore(t))
		learnTools(t, s) // running: the result in memory, on disk
		sc2 := serverConfig(t, "fake2")
		s.spillLists() // just before: the result stays on disk as it is
		s.lists.relaunched(func() { h.cfg.Store(sc2) })
		s.spillLists()
		s.warmLists()
		s.spillLists()
		h.prune() // as the reload does next
		if raw, cold, _ := initState(s); raw == "" || cold {
			t.Fatalf("the result went cold during the relaunch (cold %v)", cold)
		}
		wantInitKnown(t, s, "after the relaunch and its prune")
	})
}

// What an instance of an earlier launch lists after a relaunch (a learn
// still holding a lease on it) is served, but neither its initialize
// result nor its list replaces the new launch's, in memory or on disk.
func TestAnOldLaunchsLearnKeepsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		s, h := serverS(t, st)
		learnTools(t, s)
		oldCfg := s.host.Config()
		old := &testServer{init: h.srv.init}
		relaunchS(t, h, "fake2")
		const b = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"B"}}`
		h.srv.setInit(t, b)
		h.srv.setItems(echoV2)
		learnTools(t, s) // the new launch's result and list
		old.setItems(echoV1, pidTool)
		items, changed, err := s.learnFrom(t.Context(), oldCfg, old.connect(), Tools)
		if err != nil || len(items) != 2 || changed {
			t.Fatalf("the old launch's list: %d items, changed %v, %v", len(items), changed, err)
		}
		if got := s.CachedInit(); string(got) != b {
			t.Errorf("the new launch's result replaced by the old one's: %s", got)
		}
		if raw, _, _ := st.Init("s", s.host.Config().LaunchHash()); string(raw) != b {
			t.Errorf("on disk under the new launch's hash: %s", raw)
		}
		if cached, _ := s.CachedList(Tools); len(cached) != 1 || string(cached[0]) != echoV2 {
			t.Errorf("the new launch's tools replaced by the old one's: %q", cached)
		}
	})
}

// A learn of the earlier launch's instance that began before a relaunch
// and lists after it keeps nothing: its list is served, not cached, and
// the kind is still to be learned from the new launch.
func TestALearnAcrossARelaunchKeepsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := dormantServer(t, nil, openStore(t))
		oldCfg := s.host.Config()
		old := &testServer{init: h.srv.init, gate: make(chan struct{})}
		old.setItems(echoV1, pidTool)
		done := make(chan error, 1)
		go func() {
			_, _, err := s.learnFrom(t.Context(), oldCfg, old.connect(), Tools)
			done <- err
		}()
		synctest.Wait() // held in its tools/list, the launch looked at
		sc2 := serverConfig(t, "fake2")
		s.lists.relaunched(func() { h.cfg.Store(sc2) })
		s.warmLists()
		close(old.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		s.lists.mu.Lock()
		pending := s.lists.unsaved.has(Tools)
		s.lists.mu.Unlock()
		if cached, _ := s.CachedList(Tools); !pending || len(cached) != 1 {
			t.Fatalf("the earlier launch's tools (%d) kept as the new launch's; still to learn: %v", len(cached), pending)
		}
	})
}
