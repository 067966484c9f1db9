package fleet

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"
)

// initState is what the server's lists hold of its initialize result:
// the bytes in memory, and whether it is cold and known to be on disk.
func initState(s *Server) (raw json.RawMessage, cold, saved bool) {
	c := s.lists
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.init, c.initCold, c.initSaved
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
		if raw, cold, saved := initState(s); string(raw) != first || cold || !saved {
			t.Fatalf("a running server's init: %s, cold %v, saved %v", raw, cold, saved)
		}
		sleepNow(t, s)
		if raw, cold, _ := initState(s); raw != nil || !cold {
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
		if raw, cold, saved := initState(s); string(raw) != first || cold || !saved {
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
		if got := string(s.ServerInfo()); got != `{"name":"b"}` {
			t.Errorf("serverInfo of the cold init: %s", got)
		}
		df.close(t)

		// After a restart: cold from the start.
		df2 := newDriftFleet(t, `,"idleTimeout":"10m"`, &listServer{init: in2}, st)
		defer df2.close(t)
		s = df2.f.Get("s")
		if raw, cold, _ := initState(s); raw != nil || !cold {
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
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, &listServer{init: in}, openStore(t))
		defer df.close(t)
		df.srv.setItems(echoV1)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		if raw, cold, _ := initState(s); string(raw) != odd || cold {
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
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, openStore(t))
		defer df.close(t)
		df.srv.setItems(echoV1)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		if _, cold, _ := initState(s); !cold {
			t.Fatal("the dormant server's init is not cold")
		}
		if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"10m"}`), false, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := df.connects; n != 1 {
			t.Fatalf("%d connects: the reload started the server", n)
		}
		if s.CachedInit() == nil || s.Era() != "2025-11-25" || !s.AnnouncesChanges("tools") {
			t.Fatalf("after the relaunch: init %s, era %q", s.CachedInit(), s.Era())
		}
	})
}
