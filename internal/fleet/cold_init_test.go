package fleet

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

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

// A dormant server's initialize result reads back as it was, its
// version and the list changes it announces known; a wake that finds the
// same result does not write it again, one that finds another writes it;
// after a restart it is read from the store — gone from there, it is
// unknown. (What the fleet's dormancy, wakes and restart do here, seen
// through the catalog's API; the catalog's test of this name looks at
// where the result is held at each step.)
func TestADormantServersInitLeavesMemory(t *testing.T) {
	const first = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"prompts":{}}}`
	const second = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"b"}}`
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		in, err := backend.ParseInit(json.RawMessage(first))
		if err != nil {
			t.Fatal(err)
		}
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, &listServer{init: in}, st)
		df.srv.setItems(echoV1)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
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

		// A wake with the same result: not written. (The first wake learns
		// the other lists; the second writes nothing.)
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
		check("after a wake", first, "2025-11-25", true, false)
		if after, _ := st.Lists("s", hash); !after.Fetched.Equal(before.Fetched) {
			t.Errorf("a wake that found the same init wrote the entry (fetched %v, was %v)", after.Fetched, before.Fetched)
		}

		// A wake with another result writes it.
		sleepNow(t, s)
		in2, err := backend.ParseInit(json.RawMessage(second))
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

		// After a restart: read from the store (the check below: gone from
		// there, it is unknown).
		df2 := newDriftFleet(t, `,"idleTimeout":"10m"`, &listServer{init: in2}, st)
		defer df2.close(t)
		s = df2.f.Get("s")
		check("after a restart", second, "2025-06-18", false, true)

		// Gone from the store: unknown.
		if err := st.Forget("s"); err != nil {
			t.Fatal(err)
		}
		check("gone from the store", "", "", false, false)
	})
}

// A reload that relaunches a dormant server, without learning it again,
// keeps its initialize result, and does not start it. (The catalog's
// test of this name sees the result cold before, read back into memory
// before the store entry it was under is pruned.)
func TestARelaunchKeepsAColdInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df, s := dormantFleet(t, nil, openStore(t))
		defer df.close(t)
		relaunchS(t, df, "fake2")
		if n := df.connects; n != 1 {
			t.Fatalf("%d connects: the reload started the server", n)
		}
		wantInitKnown(t, s, "after the relaunch")
	})
}

// The result goes cold when its server goes dormant, once it is on disk:
// one whose write failed stays in memory. A cold one that cannot be read
// (the store closed) reads as nil — it left memory —, but its version and
// the changes it announces stay known. A capability that announces no
// list is no. (The catalog's test of this name also sees it still cold
// after the failed read, and the one the store refused not taken for
// saved.)
func TestAnUnwrittenInitStaysAndAnUnreadableOneStaysKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df, s := dormantFleet(t, nil, st)
		defer df.close(t)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if raw := s.Catalog().CachedInit(); raw != nil {
			t.Fatalf("a cold result read from a closed store: %s", raw)
		}
		if s.Catalog().Era() != "2025-11-25" || !s.Catalog().AnnouncesChanges("tools") {
			t.Fatalf("after a failed read: era %q, announces tools %v", s.Catalog().Era(), s.Catalog().AnnouncesChanges("tools"))
		}
		if s.Catalog().AnnouncesChanges("logging") {
			t.Fatal("announces changes of a capability with no list")
		}

		// A fresh fleet whose store refuses the write: the result stays
		// (read with the store closed, it is read from memory).
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
		if s2.Catalog().CachedInit() == nil {
			t.Fatal("a result the store refused is lost")
		}
	})
}

// A relaunch whose read of the store fails loses the earlier launch's
// result itself, not its version nor the changes it announces. (The
// catalog's test of this name also sees that one whose read succeeds
// keeps the result in bytes of its own.)
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
