package catalog

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
)

// A server gone dormant keeps its tools list and its definitions on disk
// only; they read back as they were — listed, compared with what the next
// process lists (a change is reported against them), and, pinned, its
// approvals still decide what is held.
func TestADormantServersListsLeaveMemory(t *testing.T) {
	for _, pin := range []bool{false, true} {
		name := "unpinned"
		settings := `,"idleTimeout":"10m"`
		if pin {
			name, settings = "pinned", settings+`,"pin":true`
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, h := newTestCatalogOf(t, openStore(t), serverConfigWith(t, "fake", settings), newTestServer(t, ""))
				h.srv.setItems(echoV1, pidTool)
				learnTools(t, s)
				if list, defs := inMemory(s); !list || !defs {
					t.Fatalf("a running server's list in memory: %v, definitions: %v", list, defs)
				}
				sleepNow(h)
				if list, defs := inMemory(s); list || defs {
					t.Fatalf("a dormant server's list still in memory: %v, definitions: %v", list, defs)
				}
				items, ok := s.CachedList(Tools)
				if !ok || len(items) != 2 || string(items[0]) != echoV1 || string(items[1]) != pidTool {
					t.Fatalf("the dormant server's tools read back as %q (%v)", items, ok)
				}
				if !s.Cached(Tools) {
					t.Fatal("a dormant server with its list on disk is not learned")
				}

				// The next process lists echo changed: reported against
				// the definitions read back, and held when pinned.
				h.srv.setItems(echoV2, pidTool)
				learnTools(t, s) // cached: no start
				wake(t, h)       // and the wake's relearn
				ev := h.eventsOf("definitions_changed")
				if len(ev) != 1 || !strings.Contains(jsonOf(t, ev[0].Details), `"changed":[{"kind":"tool","name":"echo"`) {
					t.Fatalf("after a wake with echo changed: %d definitions_changed events: %+v", len(ev), ev)
				}
				if got := s.ToolHeld("echo"); got != pin {
					t.Fatalf("echo held: %v, want %v", got, pin)
				}
				if d := s.Definitions(); len(d.Last) != 1 || d.Last[0].Name != "echo" {
					t.Fatalf("last change: %+v", d.Last)
				}
			})
		})
	}
}

// A list whose change could not be written stays in memory when the
// server goes dormant: nothing is lost for want of the disk.
func TestAListNotWrittenStaysInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		s, h := newTestCatalog(t, st)
		h.srv.setItems(echoV1, pidTool)
		learnTools(t, s)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		h.srv.setItems(echoV2)
		s.ListChanged("notifications/tools/list_changed")
		synctest.Wait()
		sleepNow(h)
		if list, _ := inMemory(s); !list {
			t.Fatal("a list the store refused left memory")
		}
		items, ok := s.CachedList(Tools)
		if !ok || len(items) != 1 || string(items[0]) != echoV2 {
			t.Fatalf("tools after the failed write: %q (%v)", items, ok)
		}
	})
}

// A pinned server whose definitions, put out of memory while it slept,
// cannot be read back (the record gone, the store closed) fails closed:
// nothing is approved any more, so a tool it changed meanwhile is held and
// not shown, never trusted as a first list.
func TestAPinnedServersToolsHeldWhenItsRecordCannotBeReadBack(t *testing.T) {
	for _, how := range []string{"record gone", "store closed"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := openStore(t)
				s, h := newTestCatalogOf(t, st, serverConfigWith(t, "fake", `,"idleTimeout":"10m","pin":true`), newTestServer(t, ""))
				h.srv.setItems(echoV1, pidTool)
				learnTools(t, s)
				sleepNow(h)
				if _, defs := inMemory(s); defs {
					t.Fatal("definitions not spilled")
				}
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
				h.srv.setItems(echoV2, pidTool) // echo changed: must be held
				wake(t, h)                      // and the wake's relearn
				if !s.ToolHeld("echo") {
					t.Error("a changed tool of a pinned server is not held after its definitions could not be read back")
				}
				if s.ToolVisible(json.RawMessage(echoV2)) {
					t.Error("the changed, never approved echo is visible to clients")
				}
			})
		})
	}
}

// After a restart a server's definitions stay on disk — only the counts
// a status shows come into memory — and read back whole when looked at:
// a pinned server's held tool is counted, reported and still held, from a
// record of this version and from one written before records kept the
// held count (read whole, then put out of memory).
func TestDefinitionsStayOnDiskAcrossARestart(t *testing.T) {
	for _, format := range []string{"current", "without a held count"} {
		t.Run(format, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := openStore(t)
				s, h := newTestCatalogOf(t, st, serverConfigWith(t, "fake", `,"idleTimeout":"10m","pin":true`), newTestServer(t, ""))
				h.srv.setItems(echoV1, pidTool)
				learnTools(t, s)
				h.srv.setItems(echoV2, pidTool)
				relearn(s)
				if n := s.PendingDefinitions(); n != 1 {
					t.Fatalf("%d tools held before the restart, want 1 (echo)", n)
				}
				sleepNow(h)
				h.close()
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

				s, _ = h.restart(t)
				cold, known := defsState(s)
				if !cold || known {
					t.Fatalf("after the restart the definitions are in memory (cold %v, known %v)", cold, known)
				}
				if n := s.PendingDefinitions(); n != 1 {
					t.Fatalf("%d tools held after the restart, want 1", n)
				}
				if _, defs := inMemory(s); defs {
					t.Fatal("counting the held tools read the definitions back")
				}
				p := s.Definitions().Pending
				if len(p) != 1 || p[0].Name != "echo" {
					t.Fatalf("pending after the restart: %+v, want echo", p)
				}
				if !s.ToolHeld("echo") || s.ToolHeld("pid") {
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
		s, h := newTestCatalog(t, st)
		h.srv.setItems(echoV1, pidTool)
		learnTools(t, s)
		sleepNow(h)
		if list, _ := inMemory(s); list {
			t.Fatal("the dormant server's list was not spilled")
		}
		starts := h.startCount()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			items, err := s.List(t.Context(), Tools)
			if err == nil || !strings.Contains(err.Error(), "state file") {
				t.Fatalf("List of a list the closed state file keeps: %q, %v (want an error naming the state file)", items, err)
			}
			synctest.Wait()
			if running, dormant := h.state(); h.startCount() != starts || running || !dormant {
				t.Fatalf("the server was started (%d starts, running %v) for a list it could not read", h.startCount()-starts, running)
			}
			if !s.Cached(Tools) {
				t.Fatal("a list that could not be read is no longer known")
			}
		}
	})
}
