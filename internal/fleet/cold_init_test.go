package fleet

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// initState is what the server's lists hold of its initialize result:
// the bytes in memory, whether it is cold, and whether it is known to be
// on disk under the server's current launch hash.
func initState(s *Server) (raw string, cold, saved bool) {
	return catalog.ProbeOf(&s.cat).InitState()
}

// dormantFleet is a fleet of one server "s", idle timeout 10m, on st,
// whose server srv (nil: newDriftFleet's) serves echoV1: learned and put
// to sleep. The caller closes it.
func dormantFleet(t *testing.T, srv *listServer, st *store.Store) (*driftFleet, *Server) {
	t.Helper()
	df := newDriftFleet(t, `,"idleTimeout":"10m"`, srv, st)
	df.srv.setItems(echoV1)
	s := df.f.Get("s")
	learnTools(t, s)
	sleepNow(t, s)
	return df, s
}

// serverS is a fleet of one server "s" (newDriftFleet's, idle timeout
// 10m) on st, serving echoV1, not started. The caller closes it.
func serverS(t *testing.T, st *store.Store) (*driftFleet, *Server) {
	t.Helper()
	df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st)
	df.srv.setItems(echoV1)
	return df, df.f.Get("s")
}

// wantInitKnown fails the test unless s's initialize result (the one
// newDriftFleet's server gives) is known: readable, with its version and
// the changes it announces.
func wantInitKnown(t *testing.T, s *Server, what string) {
	t.Helper()
	if s.Catalog().CachedInit() == nil || s.Catalog().Era() != "2025-11-25" || !s.Catalog().AnnouncesChanges("tools") {
		t.Fatalf("%s: the initialize result is lost: %s, era %q, announces tools %v", what, s.Catalog().CachedInit(), s.Catalog().Era(), s.Catalog().AnnouncesChanges("tools"))
	}
}

// relaunchS reloads df's fleet with server "s" launched as command
// (idle timeout 10m), without learning, and waits for the reload to
// settle (in a synctest bubble).
func relaunchS(t *testing.T, df *driftFleet, command string) {
	t.Helper()
	if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"`+command+`","idleTimeout":"10m"}`), false, nil); err != nil {
		t.Fatal(err)
	}
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
		in, err := ParseInit(json.RawMessage(first))
		if err != nil {
			t.Fatal(err)
		}
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, &listServer{init: in}, st)
		df.srv.setItems(echoV1)
		s := df.f.Get("s")
		learnTools(t, s)
		if raw, cold, saved := initState(s); raw != first || cold || !saved {
			t.Fatalf("a running server's init: %s, cold %v, saved %v", raw, cold, saved)
		}
		sleepNow(t, s)
		if raw, cold, _ := initState(s); raw != "" || !cold {
			t.Fatalf("a dormant server's init still in memory: %s (cold %v)", raw, cold)
		}
		check := func(when, raw, era string, tools, prompts bool) {
			t.Helper()
			if got := string(s.Catalog().CachedInit()); got != raw {
				t.Errorf("%s: CachedInit %s, want %s", when, got, raw)
			}
			if got := s.Catalog().Era(); got != era {
				t.Errorf("%s: Era %q, want %q", when, got, era)
			}
			if got := s.Catalog().AnnouncesChanges("tools"); got != tools {
				t.Errorf("%s: announces tools changes %v, want %v", when, got, tools)
			}
			if got := s.Catalog().AnnouncesChanges("prompts"); got != prompts {
				t.Errorf("%s: announces prompts changes %v, want %v", when, got, prompts)
			}
			if got := s.Catalog().AnnouncesChanges("resources"); got != (raw != "") {
				t.Errorf("%s: announces resources changes %v (it has none)", when, got)
			}
		}
		check("dormant", first, "2025-11-25", true, false)

		// A wake with the same result: in memory again, not written. (The
		// first wake learns the other lists; the second writes nothing.)
		wake := func() {
			t.Helper()
			if _, err := use(s.Acquire(t.Context(), "")); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		wake()
		sleepNow(t, s)
		hash := s.Config().LaunchHash()
		before, _ := st.Lists("s", hash)
		time.Sleep(time.Second)
		wake()
		if raw, cold, saved := initState(s); raw != first || cold || !saved {
			t.Fatalf("after a wake: init %s, cold %v, saved %v", raw, cold, saved)
		}
		if after, _ := st.Lists("s", hash); !after.Fetched.Equal(before.Fetched) {
			t.Errorf("a wake that found the same init wrote the entry (fetched %v, was %v)", after.Fetched, before.Fetched)
		}

		// A wake with another result writes it, and it goes cold again.
		sleepNow(t, s)
		in2, err := ParseInit(json.RawMessage(second))
		if err != nil {
			t.Fatal(err)
		}
		df.srv.mu.Lock()
		df.srv.init = in2
		df.srv.mu.Unlock()
		wake()
		if raw, ok, err := st.Init("s", hash); err != nil || !ok || string(raw) != second {
			t.Fatalf("the changed init on disk: %s (%v, %v)", raw, ok, err)
		}
		sleepNow(t, s)
		check("dormant with the second init", second, "2025-06-18", false, true)
		if got := string(s.Catalog().ServerInfo()); got != `{"name":"b"}` {
			t.Errorf("serverInfo of the cold init: %s", got)
		}
		df.close(t)

		// After a restart: cold from the start.
		df2 := newDriftFleet(t, `,"idleTimeout":"10m"`, &listServer{init: in2}, st)
		defer df2.close(t)
		s = df2.f.Get("s")
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
		in, err := ParseInit(json.RawMessage(odd))
		if err != nil {
			t.Fatal(err)
		}
		df, s := dormantFleet(t, &listServer{init: in}, openStore(t))
		defer df.close(t)
		if raw, cold, _ := initState(s); raw != odd || cold {
			t.Fatalf("the init of an unknown version: %s, cold %v", raw, cold)
		}
		if got := s.Catalog().Era(); got != "2099-01-01" {
			t.Fatalf("Era %q", got)
		}
	})
}

// A reload that relaunches a dormant server, without learning it again,
// keeps its initialize result: read back into memory before the store
// entry it was under is pruned.
func TestARelaunchKeepsAColdInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := dormantFleet(t, nil, openStore(t))
		defer df.close(t)
		if _, cold, _ := initState(s); !cold {
			t.Fatal("the dormant server's init is not cold")
		}
		relaunchS(t, df, "fake2")
		if n := df.connects; n != 1 {
			t.Fatalf("%d connects: the reload started the server", n)
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
		df, s := serverS(t, st)
		defer df.close(t)
		raw := json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}}}`)
		// persistInit of an instance of the old launch, step by step:
		p := catalog.ProbeOf(&s.cat)
		old, _ := p.LaunchKey()
		if !p.PutInit(raw, old, p.Generation()) {
			t.Fatal("a first result is not to be written")
		}
		held, seq, ok := p.InitToWrite(old)
		if !ok {
			t.Fatal("nothing to write")
		}
		if err := st.PutInit("s", s.Config().LaunchHash(), held); err != nil {
			t.Fatal(err)
		}
		// ... and a reload relaunches the server before it is marked.
		relaunchS(t, df, "fake2")
		p.InitWritten(seq, old)
		if _, _, saved := initState(s); saved {
			t.Fatal("a result written under the earlier launch's hash is taken to be on disk under the new one's")
		}
		learnTools(t, s) // the new launch, same result
		sleepNow(t, s)
		if _, ok, _ := st.Init("s", s.Config().LaunchHash()); !ok {
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
		df, s := dormantFleet(t, nil, st)
		defer df.close(t)
		if _, cold, _ := initState(s); !cold {
			t.Fatal("a written result did not go cold")
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if raw := s.Catalog().CachedInit(); raw != nil {
			t.Fatalf("a cold result read from a closed store: %s", raw)
		}
		if _, cold, _ := initState(s); !cold || s.Catalog().Era() != "2025-11-25" || !s.Catalog().AnnouncesChanges("tools") {
			t.Fatalf("after a failed read: cold %v, era %q, announces tools %v", cold, s.Catalog().Era(), s.Catalog().AnnouncesChanges("tools"))
		}
		if s.Catalog().AnnouncesChanges("logging") {
			t.Fatal("announces changes of a capability with no list")
		}

		// A fresh fleet whose store refuses the write: the result stays.
		st2 := openStore(t)
		df2 := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st2)
		defer df2.close(t)
		df2.srv.setItems(echoV1)
		if err := st2.Close(); err != nil {
			t.Fatal(err)
		}
		s2 := df2.f.Get("s")
		learnTools(t, s2)
		sleepNow(t, s2)
		if raw, cold, saved := initState(s2); raw == "" || cold || saved {
			t.Fatalf("a result the store refused: %s, cold %v, saved %v", raw, cold, saved)
		}
		if s2.Catalog().CachedInit() == nil {
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
		df, s := dormantFleet(t, nil, st)
		defer df.close(t)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		relaunchS(t, df, "fake2")
		if s.Catalog().Era() != "2025-11-25" || !s.Catalog().AnnouncesChanges("tools") {
			t.Fatalf("after a relaunch whose read failed: era %q, announces tools %v", s.Catalog().Era(), s.Catalog().AnnouncesChanges("tools"))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, openStore(t))
		defer df.close(t)
		var tools []string
		for i := range 4000 {
			tools = append(tools, fmt.Sprintf(`{"name":"t%04d","description":%q}`, i, strings.Repeat("x", 240)))
		}
		df.srv.setItems(tools...)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		before := testserver.LiveHeap()
		relaunchS(t, df, "fake2")
		n, init := catalog.ProbeOf(&s.cat).Held()
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
// dormant stop's, which runs without opMu — before, between and after
// its steps.)
func TestASpillDuringARelaunchKeepsTheInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := serverS(t, openStore(t))
		defer df.close(t)
		learnTools(t, s) // running: the result in memory, on disk
		sc2 := parseCfg(t, `"s":{"command":"fake2","idleTimeout":"10m"}`).Server("s")
		p := catalog.ProbeOf(&s.cat)
		s.opMu.Lock()
		p.SpillLists() // just before: the result stays on disk as it is
		p.Relaunched(func() { s.cfg.Swap(sc2) })
		p.SpillLists()
		p.WarmLists()
		p.SpillLists()
		s.opMu.Unlock()
		df.f.pruneStore() // as the reload does next
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
		df, s := serverS(t, st)
		defer df.close(t)
		learnTools(t, s)
		oldCfg, oldInit := s.Config(), df.srv.init
		relaunchS(t, df, "fake2")
		b, err := ParseInit(json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"B"}}`))
		if err != nil {
			t.Fatal(err)
		}
		df.srv.mu.Lock()
		df.srv.init = b
		df.srv.mu.Unlock()
		df.srv.setItems(echoV2)
		learnTools(t, s) // the new launch's result and list
		old := &listServer{init: oldInit}
		old.setItems(echoV1, pidTool)
		items, changed, err := catalog.ProbeOf(&s.cat).LearnFrom(t.Context(), oldCfg, listConn{&fakeLive{done: make(chan struct{})}, old}, catalog.Tools)
		if err != nil || len(items) != 2 || changed {
			t.Fatalf("the old launch's list: %d items, changed %v, %v", len(items), changed, err)
		}
		if got := s.Catalog().CachedInit(); string(got) != string(b.Raw) {
			t.Errorf("the new launch's result replaced by the old one's: %s", got)
		}
		if raw, _, _ := st.Init("s", s.Config().LaunchHash()); string(raw) != string(b.Raw) {
			t.Errorf("on disk under the new launch's hash: %s", raw)
		}
		if cached, _ := s.Catalog().CachedList(catalog.Tools); len(cached) != 1 || string(cached[0]) != echoV2 {
			t.Errorf("the new launch's tools replaced by the old one's: %q", cached)
		}
	})
}

// A relaunch and back, before the new launch remembered its result: the
// reload's prune dropped the entry the result was under, so back at the
// first launch it is written again, and once dormant it reads back.
func TestARelaunchAndBackWritesTheInitAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df, s := serverS(t, st)
		defer df.close(t)
		learnTools(t, s) // running: the result on disk under launch a
		a := s.Config().LaunchHash()
		relaunchS(t, df, "fake2")
		relaunchS(t, df, "fake")
		if s.Config().LaunchHash() != a {
			t.Fatal("not back at the first launch")
		}
		learnTools(t, s) // a again, the same result
		sleepNow(t, s)
		if _, ok, _ := st.Init("s", a); !ok {
			t.Error("the result was not written again under the launch's hash")
		}
		if s.Catalog().CachedInit() == nil || s.Catalog().Era() != "2025-11-25" {
			t.Fatalf("the result is lost: %s, era %q", s.Catalog().CachedInit(), s.Catalog().Era())
		}
	})
}

// A learn of the earlier launch's instance that began before a relaunch
// and lists after it keeps nothing: its list is served, not cached, and
// the kind is still to be learned from the new launch.
func TestALearnAcrossARelaunchKeepsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := dormantFleet(t, nil, openStore(t))
		defer df.close(t)
		oldCfg := s.Config()
		old := &listServer{init: df.srv.init, gate: make(chan struct{})}
		old.setItems(echoV1, pidTool)
		done := make(chan error, 1)
		go func() {
			_, _, err := catalog.ProbeOf(&s.cat).LearnFrom(t.Context(), oldCfg, listConn{&fakeLive{done: make(chan struct{})}, old}, catalog.Tools)
			done <- err
		}()
		synctest.Wait() // held in its tools/list, the launch looked at
		sc2 := parseCfg(t, `"s":{"command":"fake2","idleTimeout":"10m"}`).Server("s")
		s.opMu.Lock()
		catalog.ProbeOf(&s.cat).Relaunched(func() { s.cfg.Swap(sc2) })
		catalog.ProbeOf(&s.cat).WarmLists()
		s.opMu.Unlock()
		close(old.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		pending := catalog.ProbeOf(&s.cat).Unsaved(catalog.Tools)
		if cached, _ := s.Catalog().CachedList(catalog.Tools); !pending || len(cached) != 1 {
			t.Fatalf("the earlier launch's tools (%d) kept as the new launch's; still to learn: %v", len(cached), pending)
		}
	})
}
