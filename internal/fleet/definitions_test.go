package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/drift"
	"github.com/mcpvisor/mcpvisor/internal/store"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// The fixture's tools in two versions: v2 changes echo's description and
// the type of its text, and adds shout.
var (
	echoV1  = `{"name":"echo","description":"Returns text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`
	echoV2  = `{"name":"echo","description":"Returns text, loudly.","inputSchema":{"type":"object","properties":{"text":{"type":"integer"}}}}`
	echoV3  = `{"name":"echo","description":"Returns text, quietly.","inputSchema":{"type":"object","properties":{"text":{"type":"integer"}}}}`
	pidTool = `{"name":"pid","inputSchema":{"type":"object"}}`
	shout   = `{"name":"shout","inputSchema":{"type":"object"}}`
	// echoV1Reordered is echoV1 with other key order and spacing: the
	// same definition.
	echoV1Reordered = `{ "inputSchema": {"properties": {"text": {"type": "string"}}, "type": "object"}, "description": "Returns text.", "name": "echo" }`
)

func (s *listServer) setItems(items ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools = nil
	for _, it := range items {
		s.tools = append(s.tools, json.RawMessage(it))
	}
}

// driftFleet is a listFleet that records events, with an optional store.
type driftFleet struct {
	*listFleet
	evMu   sync.Mutex
	events []Event
}

func newDriftFleet(t *testing.T, settings string, srv *listServer, st *store.Store) *driftFleet {
	t.Helper()
	return newDriftFleetCmd(t, "fake", settings, srv, st)
}

func newDriftFleetCmd(t *testing.T, command, settings string, srv *listServer, st *store.Store) *driftFleet {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"`+command+`"`+settings+`}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if srv == nil {
		init, err := backend.ParseInit(json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}}}`))
		if err != nil {
			t.Fatal(err)
		}
		srv = &listServer{init: init}
	}
	df := &driftFleet{listFleet: &listFleet{srv: srv}}
	df.f, err = New(cfg, Options{
		Logger: discardLogger(),
		Connector: func(_ *config.Server, _ backend.Hooks, onConnect func(context.Context, Live)) lifecycle.Connector {
			return &listConnector{onConnect: onConnect, srv: df.srv, connects: &df.connects}
		},
		OnListsChanged: func(_ *Server, kinds []catalog.ListKind) {
			df.mu.Lock()
			df.reported = append(df.reported, kinds)
			df.mu.Unlock()
		},
		OnEvent: func(e Event) {
			recordEvent(e)
			df.evMu.Lock()
			df.events = append(df.events, e)
			df.evMu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st != nil {
		df.f.SetStore(st)
	}
	return df
}

// of returns the events of type typ so far.
func (df *driftFleet) of(typ string) []Event {
	df.evMu.Lock()
	defer df.evMu.Unlock()
	var out []Event
	for _, e := range df.events {
		if string(e.Type) == typ {
			out = append(out, e)
		}
	}
	return out
}

// toolsReported counts the reports that the tools list changed.
func (df *driftFleet) toolsReported() int {
	df.mu.Lock()
	defer df.mu.Unlock()
	n := 0
	for _, k := range df.reported {
		if slices.Contains(k, catalog.Tools) {
			n++
		}
	}
	return n
}

// learnTools learns the server's tools (starting it: with no idle
// timeout it then stays running).
func learnTools(t *testing.T, s *Server) {
	t.Helper()
	if _, err := s.Catalog().List(t.Context(), catalog.Tools); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
}

// relearn has the running server's tools learned again, as its
// list_changed does, and waits for it.
func relearn(s *Server) {
	s.listChanged("notifications/tools/list_changed")
	synctest.Wait()
}

// details decodes an event's details the way the admin API sends them.
func details(t *testing.T, e Event) (out struct {
	Added, Removed []struct{ Kind, Name string }
	Changed        []struct {
		Kind, Name string
		Fields     []string
	}
	Held []string
}) {
	t.Helper()
	b, err := json.Marshal(e.Details)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The first list learned is the baseline (no event); relearning the same
// definitions, however written, reports nothing; a change reports one
// definitions_changed with what was added and which fields changed, kept
// as the last diff with the values before and after; the same list again
// reports nothing more.
func TestDefinitionsChangedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"0"`, nil, nil)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1, pidTool)
		learnTools(t, s)
		if !s.Catalog().Cached(catalog.Tools) {
			t.Fatal("the start did not learn the tools")
		}
		df.srv.setItems(pidTool, echoV1Reordered)
		relearn(s)
		if ev := df.of("definitions_changed"); len(ev) != 0 {
			t.Fatalf("first learn and an unchanged relearn reported %d changes: %+v", len(ev), ev)
		}

		df.srv.setItems(echoV2, pidTool, shout)
		relearn(s)
		relearn(s)
		ev := df.of("definitions_changed")
		if len(ev) != 1 {
			t.Fatalf("%d definitions_changed events, want 1", len(ev))
		}
		d := details(t, ev[0])
		if len(d.Added) != 1 || d.Added[0].Name != "shout" || d.Added[0].Kind != "tool" || len(d.Removed) != 0 {
			t.Fatalf("added %+v removed %+v", d.Added, d.Removed)
		}
		if len(d.Changed) != 1 || d.Changed[0].Name != "echo" || !slices.Equal(d.Changed[0].Fields, []string{"description", "inputSchema.properties.text.type"}) {
			t.Fatalf("changed %+v", d.Changed)
		}
		if len(d.Held) != 0 {
			t.Fatalf("an unpinned server held %v", d.Held)
		}
		defs := s.Catalog().Definitions()
		if defs.ChangedAt.IsZero() || len(defs.Last) != 2 || len(defs.Pending) != 0 {
			t.Fatalf("definitions %+v", defs)
		}
		f := defs.Last[0].Fields
		if defs.Last[0].Name != "echo" || string(f[1].Old) != `"string"` || string(f[1].New) != `"integer"` {
			t.Fatalf("last diff %+v", defs.Last[0])
		}
		if s.Catalog().ToolHeld("echo") || !s.Catalog().ToolVisible(json.RawMessage(echoV2)) {
			t.Fatal("an unpinned server holds a changed tool back")
		}
	})
}

// What is known of a server's definitions survives a restart of mcpvisor
// (a reopen of the store): a change made while mcpvisor was down is
// reported when the next run learns it, whether the server's launch is
// the same (its cached lists are loaded, its start relearns) or changed
// (nothing cached: learned afresh, and still compared).
func TestDefinitionsPersistAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	run := func(command string, items ...string) (changed []Event) {
		synctest.Test(t, func(t *testing.T) {
			st, err := store.Open(path, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			df := newDriftFleetCmd(t, command, `,"idleTimeout":"0"`, nil, st)
			df.srv.setItems(items...)
			df.f.Learn(t.Context(), 1) // learns what is not cached
			s := df.f.Get("s")
			if _, err := use(s.Acquire(t.Context(), "")); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the start's relearn
			changed = df.of("definitions_changed")
			df.close(t)
		})
		return changed
	}
	if ev := run("fake", echoV1, pidTool); len(ev) != 0 {
		t.Fatalf("first run: %d changes", len(ev))
	}
	if ev := run("fake", echoV1, pidTool); len(ev) != 0 {
		t.Fatalf("second run, nothing changed: %d changes", len(ev))
	}
	ev := run("fake", echoV2, pidTool)
	if len(ev) != 1 {
		t.Fatalf("third run, echo changed while mcpvisor was down: %d changes, want 1", len(ev))
	}
	ev = run("fake2", echoV2)
	if len(ev) != 1 || !strings.Contains(jsonOf(t, ev[0].Details), `"removed":[{"kind":"tool","name":"pid"}]`) {
		t.Fatalf("fourth run, a new launch without pid: %+v", ev)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A pinned server trusts its first list; then a changed or new tool is
// held back (not visible, its calls refused) until approved, and the
// approval — of that definition — is persisted. Approving a name that is
// not pending, or a definition other than the one reviewed, approves
// nothing.
func TestPinningHoldsUntilApproved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	synctest.Test(t, func(t *testing.T) {
		st, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		df := newDriftFleet(t, `,"idleTimeout":"0","pin":true`, nil, st)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1, pidTool)
		learnTools(t, s)
		if s.Catalog().ToolHeld("echo") || !s.Catalog().ToolVisible(json.RawMessage(echoV1)) || s.Status().PendingDefinitions != 0 {
			t.Fatal("the first list of a pinned server is not trusted")
		}

		df.srv.setItems(echoV2, pidTool, shout)
		relearn(s)
		if !s.Catalog().ToolHeld("echo") || !s.Catalog().ToolHeld("shout") || s.Catalog().ToolHeld("pid") {
			t.Fatalf("held: echo %v shout %v pid %v; want echo and shout", s.Catalog().ToolHeld("echo"), s.Catalog().ToolHeld("shout"), s.Catalog().ToolHeld("pid"))
		}
		if s.Catalog().ToolVisible(json.RawMessage(echoV2)) || !s.Catalog().ToolVisible(json.RawMessage(pidTool)) || s.Catalog().ToolVisible(json.RawMessage(shout)) {
			t.Fatal("a held definition is visible, or an approved one is not")
		}
		ev := df.of("definitions_changed")
		if len(ev) != 1 || !slices.Equal(details(t, ev[0]).Held, []string{"echo", "shout"}) {
			t.Fatalf("events %+v, want one holding echo and shout", ev)
		}
		defs := s.Catalog().Definitions()
		if len(defs.Pending) != 2 || defs.Pending[0].Name != "echo" || defs.Pending[0].Change.Change != drift.Changed || len(defs.Pending[0].Fields) != 2 || defs.Pending[1].Change.Change != drift.Added {
			t.Fatalf("pending %+v", defs.Pending)
		}
		if n := s.Status().PendingDefinitions; n != 2 {
			t.Fatalf("status counts %d pending", n)
		}

		_, pending, err := s.Catalog().Approve([]string{"echo", "nope"}, nil)
		if !errors.Is(err, catalog.ErrNotPending) || !strings.Contains(err.Error(), "pending: echo, shout") || len(pending) != 2 {
			t.Fatalf("approving an unknown name: %v (pending %v)", err, pending)
		}
		if !s.Catalog().ToolHeld("echo") {
			t.Fatal("a refused approval approved echo")
		}
		_, _, err = s.Catalog().Approve([]string{"echo"}, map[string]string{"echo": "0123"})
		if !errors.Is(err, catalog.ErrStaleApproval) || !s.Catalog().ToolHeld("echo") {
			t.Fatalf("approving another fingerprint: %v, held %v", err, s.Catalog().ToolHeld("echo"))
		}
		before := df.toolsReported()
		approved, pending, err := s.Catalog().Approve([]string{"echo"}, map[string]string{"echo": defs.Pending[0].Fingerprint})
		if err != nil || !slices.Equal(approved, []string{"echo"}) || !slices.Equal(pending, []string{"shout"}) {
			t.Fatalf("Approve(echo) = %v, %v, %v", approved, pending, err)
		}
		if s.Catalog().ToolHeld("echo") || !s.Catalog().ToolVisible(json.RawMessage(echoV2)) || !s.Catalog().ToolHeld("shout") {
			t.Fatal("echo is still held after its approval, or shout was approved with it")
		}
		if df.toolsReported() != before+1 {
			t.Fatal("the approval did not report the tools list changed")
		}
		approved, pending, err = s.Catalog().Approve(nil, nil)
		if err != nil || !slices.Equal(approved, []string{"shout"}) || len(pending) != 0 {
			t.Fatalf("Approve(all) = %v, %v, %v", approved, pending, err)
		}

		// The approvals are in the store: a new run holds nothing.
		df.close(t)
		df2 := newDriftFleet(t, `,"idleTimeout":"0","pin":true`, df.srv, st)
		defer df2.close(t)
		s2 := df2.f.Get("s")
		if s2.Catalog().ToolHeld("echo") || s2.Catalog().ToolHeld("shout") || !s2.Catalog().ToolVisible(json.RawMessage(echoV2)) {
			t.Fatal("approvals did not survive a restart")
		}
		df.srv.setItems(echoV3, pidTool, shout)
		if _, err := use(s2.Acquire(t.Context(), "")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !s2.Catalog().ToolHeld("echo") || s2.Catalog().ToolHeld("shout") {
			t.Fatal("after a restart, a changed tool is not held (or an unchanged one is)")
		}
	})
}

// An approval that comes while a relearn fetches a newer definition
// approves the one known when it was made, never the newer one: that is
// held again once learned.
func TestApprovalDuringRelearn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"0","pin":true`, nil, nil)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1)
		learnTools(t, s)
		df.srv.setItems(echoV2)
		relearn(s)
		if !s.Catalog().ToolHeld("echo") {
			t.Fatal("echo v2 not held")
		}
		release := df.holdLists()
		defer release()
		df.srv.setItems(echoV3)
		s.listChanged("notifications/tools/list_changed")
		synctest.Wait() // the relearn waits in tools/list, with v3
		approved, _, err := s.Catalog().Approve(nil, nil)
		if err != nil || !slices.Equal(approved, []string{"echo"}) {
			t.Fatalf("Approve = %v, %v", approved, err)
		}
		if !s.Catalog().ToolVisible(json.RawMessage(echoV2)) || s.Catalog().ToolVisible(json.RawMessage(echoV3)) {
			t.Fatal("the approval did not approve exactly v2")
		}
		release()
		synctest.Wait()
		if !s.Catalog().ToolHeld("echo") {
			t.Fatal("v3, learned after the approval of v2, is not held")
		}
		p := s.Catalog().Definitions().Pending
		if len(p) != 1 || !slices.Equal(p[0].Paths(), []string{"description"}) {
			t.Fatalf("pending %+v, want echo's description changed since v2", p)
		}
	})
}

// Approvals, relearns (the refresher's, and List's own through the
// fleet's lease), lists, sleeps and status reads from many goroutines at
// once: nothing races (under -race), and what the definitions know ends
// as the list cached (approving all makes the cached echo the visible
// one). A list_changed while the server sleeps drops the cached list
// (the refresher has nothing to fetch it from), so the next List learns
// it again, starting the server.
func TestApproveConcurrentWithRelearns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"0","pin":true`, nil, nil)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1)
		learnTools(t, s)
		// The first Lists below learn the list again, racing each other.
		if err := s.Sleep(t.Context()); err != nil {
			t.Fatal(err)
		}
		s.listChanged("notifications/tools/list_changed")
		synctest.Wait()
		if s.Catalog().Cached(catalog.Tools) {
			t.Fatal("a list_changed while the server slept left its list cached")
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for j := range 20 {
					if (i+j)%2 == 0 {
						df.srv.setItems(echoV2)
					} else {
						df.srv.setItems(echoV3)
					}
					if j%5 == 0 {
						_ = s.Sleep(t.Context()) // the list_changed that follows may drop the list
					}
					s.listChanged("notifications/tools/list_changed")
					if j%3 == 0 {
						if _, err := s.Catalog().List(t.Context(), catalog.Tools); err != nil {
							t.Error(err)
						}
					}
					_, _, err := s.Catalog().Approve(nil, nil)
					if err != nil {
						t.Error(err)
					}
					_ = s.Status()
					_ = s.Catalog().Definitions()
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		// A last sleep and list_changed may have dropped the list: learn
		// it, then approve what it holds.
		if _, err := s.Catalog().List(t.Context(), catalog.Tools); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Catalog().Approve(nil, nil); err != nil {
			t.Fatal(err)
		}
		items, _ := s.Catalog().CachedList(catalog.Tools)
		if len(items) != 1 || !s.Catalog().ToolVisible(items[0]) || s.Catalog().ToolHeld("echo") {
			t.Fatal("after approving all, the cached echo is not the visible one")
		}
	})
}

// A server whose relearn lists no tools where it had some is flagged —
// tools_lost, a warning, not ready — and serves the empty list; when its
// tools come back as they were, tools_restored clears the warning and no
// definitions changed.
func TestToolsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"0"`, nil, nil)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1, pidTool)
		learnTools(t, s)
		if st := s.Status(); !st.Ready || st.Warning != "" {
			t.Fatalf("running with its tools known: %+v", st)
		}
		df.srv.setItems()
		relearn(s)
		relearn(s)
		lost := df.of("tools_lost")
		if len(lost) != 1 || lost[0].Details["previous"] != 2 {
			t.Fatalf("tools_lost events %+v, want one with previous 2", lost)
		}
		st := s.Status()
		if st.Warning == "" || st.Ready || !strings.Contains(st.Warning, "had 2") {
			t.Fatalf("status while its tools are lost: ready %v, warning %q", st.Ready, st.Warning)
		}
		if items, _ := s.Catalog().CachedList(catalog.Tools); len(items) != 0 {
			t.Fatalf("serving %d cached tools of a server that lists none", len(items))
		}
		df.srv.setItems(echoV1, pidTool)
		relearn(s)
		if st := s.Status(); st.Warning != "" || !st.Ready {
			t.Fatalf("status after the tools came back: %+v", st)
		}
		if n := len(df.of("tools_restored")); n != 1 {
			t.Fatalf("%d tools_restored events, want 1", n)
		}
		if n := len(df.of("definitions_changed")); n != 0 {
			t.Fatalf("%d definitions_changed for tools that came back as they were", n)
		}
	})
}

// Ready needs the handshake and the lists: a running server whose tools
// are not known yet is not ready.
func TestReadyNeedsLists(t *testing.T) {
	for _, c := range []struct {
		st   Status
		want bool
	}{
		{Status{State: "running", Learned: true}, true},
		{Status{State: "running"}, false},
		{Status{State: "dormant", Learned: true}, true},
		{Status{State: "new", Learned: true}, true},
		{Status{State: "new", Learned: true, LastError: "x"}, false},
		{Status{State: "starting", Learned: true}, false},
		{Status{State: "running", Learned: true, Warning: "lost"}, false},
		{Status{State: "failed", Learned: true}, false},
	} {
		if got := ready(c.st); got != c.want {
			t.Errorf("ready(%+v) = %v, want %v", c.st, got, c.want)
		}
	}
}

// Unpinning by a reload shows the held tools (reported as a change of the
// tools list) and approves them as they are.
func TestUnpinByReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"idleTimeout":"0","pin":true`, nil, nil)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1)
		learnTools(t, s)
		df.srv.setItems(echoV2)
		relearn(s)
		if !s.Catalog().ToolHeld("echo") {
			t.Fatal("not held")
		}
		before := df.toolsReported()
		cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"fake","idleTimeout":"0"}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
		res, err := df.f.Reload(t.Context(), cfg, false, nil)
		if err != nil || res.Servers[0].Action != config.ActionUpdated {
			t.Fatalf("reload: %+v, %v", res, err)
		}
		if s.Catalog().ToolHeld("echo") || df.toolsReported() != before+1 {
			t.Fatal("unpinning did not show the held tool and report it")
		}
	})
}

// Unpinning approves the tools as clients then see them, also when the
// same reload changes the server's launch: pinning it again later holds
// only what changes after.
func TestUnpinningWithARelaunchApprovesWhatIsListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		df := newDriftFleet(t, `,"pin":true,"idleTimeout":"0"`, nil, nil)
		defer df.close(t)
		s := df.f.Get("s")
		df.srv.setItems(echoV1, pidTool)
		learnTools(t, s)
		df.srv.setItems(echoV2, pidTool)
		relearn(s)
		if !s.Catalog().ToolHeld("echo") {
			t.Fatal("the changed echo of the pinned server is not held")
		}
		reload := func(settings string) {
			t.Helper()
			if _, err := df.f.Reload(t.Context(), parseCfg(t, `"s":{"command":"fake2"`+settings+`}`), true, nil); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		reload(`,"pin":false,"idleTimeout":"0"`) // unpinned, relaunched
		if s.Catalog().ToolHeld("echo") {
			t.Fatal("echo held on an unpinned server")
		}
		reload(`,"pin":true,"idleTimeout":"0"`) // pinned again, same launch
		if s.Catalog().ToolHeld("echo") {
			t.Fatal("pinned again, the echo clients used while unpinned is held")
		}
	})
}
