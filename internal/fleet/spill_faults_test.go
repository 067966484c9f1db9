package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
)

// A pinned server whose definitions, put out of memory while it slept,
// cannot be read back (the record gone, the store closed) fails closed:
// nothing is approved any more, so a tool it changed meanwhile is held and
// not shown, never trusted as a first list.
func TestAPinnedServersToolsHeldWhenItsRecordCannotBeReadBack(t *testing.T) {
	for _, how := range []string{"record gone", "store closed"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := openStore(t)
				df := newDriftFleet(t, `,"idleTimeout":"10m","pin":true`, nil, st)
				defer df.close(t)
				df.srv.setItems(echoV1, pidTool)
				s := df.f.Get("s")
				learnTools(t, s)
				sleepNow(t, s)
				switch how {
				case "record gone": // e.g. a faulted state file moved aside and started empty
					if err := st.PutDefinitions("s", nil); err != nil {
						t.Fatal(err)
					}
				case "store closed":
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
				}
				// They left memory at the dormancy: read back from nothing,
				// not even the echo approved before is shown.
				if s.Catalog().ToolVisible(json.RawMessage(echoV1)) {
					t.Error("the definitions were not spilled: the approved echo is still shown")
				}
				df.srv.setItems(echoV2, pidTool) // echo changed: must be held
				if _, err := use(s.Acquire(t.Context(), "")); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the wake's relearn
				if !s.Catalog().ToolHeld("echo") {
					t.Error("a changed tool of a pinned server is not held after its definitions could not be read back")
				}
				if s.Catalog().ToolVisible(json.RawMessage(echoV2)) {
					t.Error("the changed, never approved echo is visible to clients")
				}
			})
		})
	}
}

// After a relaunch, a list the new launch finds unchanged is still not on
// disk under its hash until written: when that write fails, the list
// stays in memory when the server goes dormant.
func TestARelaunchedListNotWrittenStaysInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st)
		defer df.close(t)
		df.srv.setItems(echoV1, pidTool)
		s := df.f.Get("s")
		learnTools(t, s)
		// The store refuses writes from now on (as a full disk would;
		// closing is the seam the package's own test uses).
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"10m"}`), true, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // drain, relearn (same items, persist fails), Rest → dormant → spill
		if st := s.Status().State; st != "dormant" {
			t.Logf("state %s", st)
		}
		items, ok := s.Catalog().CachedList(catalog.Tools)
		if !ok || len(items) != 2 {
			t.Fatalf("the relaunched server's tools, whose write failed, are lost: %q (%v)", items, ok)
		}
	})
}

// A reload that relaunches a dormant server reads its lists back into
// memory before it prunes the store entry they are under: until the
// relearn they are still listed, and a relearn that finds them the same
// reports no change.
func TestARelaunchOfADormantServerReportsNoChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st)
		defer df.close(t)
		df.srv.setItems(echoV1, pidTool)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		before := df.toolsReported()
		gate := make(chan struct{})
		df.srv.mu.Lock()
		df.srv.gate = gate // hold the relearn's tools/list
		df.srv.mu.Unlock()
		if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake2","idleTimeout":"10m"}`), true, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cached := s.Catalog().Cached(catalog.Tools)
		if _, ok := s.Catalog().CachedList(catalog.Tools); !ok && cached {
			t.Error("during the relearn: Cached(catalog.Tools) is true but CachedList cannot read it (entry pruned)")
		}
		if s.Catalog().CachedInit() == nil || s.Catalog().Era() == "" {
			t.Error("during the relearn: the initialize result of the earlier launch is lost (entry pruned)")
		}
		close(gate)
		synctest.Wait()
		if n := df.toolsReported(); n != before {
			t.Errorf("a relaunch whose tools did not change reported them changed %d time(s)", n-before)
		}
	})
}

// After a restart a server's definitions stay on disk — only the counts
// a status shows come into memory — and read back whole when looked at:
// a pinned server's held tool is counted, reported and still held, from a
// record of this version and from one written before records kept the
// held count (read whole, then put out of memory). (The catalog's test of
// this name sees them out of memory after the restart and after the
// count.)
func TestDefinitionsStayOnDiskAcrossARestart(t *testing.T) {
	for _, format := range []string{"current", "without a held count"} {
		t.Run(format, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := openStore(t)
				df := newDriftFleet(t, `,"idleTimeout":"10m","pin":true`, nil, st)
				s := df.f.Get("s")
				df.srv.setItems(echoV1, pidTool)
				learnTools(t, s)
				if _, err := use(s.Acquire(t.Context(), "")); err != nil {
					t.Fatal(err)
				}
				df.srv.setItems(echoV2, pidTool)
				relearn(s)
				if n := s.cat.PendingDefinitions(); n != 1 {
					t.Fatalf("%d tools held before the restart, want 1 (echo)", n)
				}
				sleepNow(t, s)
				df.close(t)
				if format != "current" {
					var rec map[string]json.RawMessage
					if err := json.Unmarshal(st.Definitions("s"), &rec); err != nil {
						t.Fatal(err)
					}
					if _, ok := rec["held"]; !ok {
						t.Fatal("the record keeps no held count")
					}
					delete(rec, "held")
					raw, _ := json.Marshal(rec)
					if err := st.PutDefinitions("s", raw); err != nil {
						t.Fatal(err)
					}
				}

				df = newDriftFleet(t, `,"idleTimeout":"10m","pin":true`, df.srv, st)
				defer df.close(t)
				s = df.f.Get("s")
				if n := s.cat.PendingDefinitions(); n != 1 {
					t.Fatalf("%d tools held after the restart, want 1", n)
				}
				p := s.Catalog().Definitions().Pending
				if len(p) != 1 || p[0].Name != "echo" {
					t.Fatalf("pending after the restart: %+v, want echo", p)
				}
				if !s.Catalog().ToolHeld("echo") || s.Catalog().ToolHeld("pid") {
					t.Fatal("after the restart echo is not held, or pid is")
				}
			})
		})
	}
}

// A dormant server's list kept on disk that cannot be read back (the state
// file closed, failing) is an error for whoever asks, not a reason to
// start the server: an aggregate list on a failing state file would
// otherwise start every dormant server at once. It stays known, read again
// next time; a list the store no longer has is unknown, and asked for, the
// server starts to learn it.
func TestAnUnreadableColdListDoesNotStartTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		df := newDriftFleet(t, `,"idleTimeout":"10m"`, nil, st)
		defer df.close(t)
		df.srv.setItems(echoV1, pidTool)
		s := df.f.Get("s")
		learnTools(t, s)
		sleepNow(t, s)
		count := func() int {
			df.srv.mu.Lock()
			defer df.srv.mu.Unlock()
			return df.connects
		}
		connects := count()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			items, err := s.Catalog().List(t.Context(), catalog.Tools)
			if err == nil || !strings.Contains(err.Error(), "state file") {
				t.Fatalf("List of a list the closed state file keeps: %q, %v (want an error naming the state file)", items, err)
			}
			synctest.Wait()
			if n := count(); n != connects || state(s) != "dormant" {
				t.Fatalf("the server was started (%d connects, state %s) for a list it could not read", n-connects, state(s))
			}
			if !s.Catalog().Cached(catalog.Tools) {
				t.Fatal("a list that could not be read is no longer known")
			}
		}
	})
}
