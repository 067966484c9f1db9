package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// clientFleet is a fleet of servers that are never started: NoteClient
// needs none running.
func clientFleet(t *testing.T, servers string) *Fleet {
	t.Helper()
	f, err := New(parseCfg(t, servers), Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

func clientsByName(s *Server) map[string]ClientUse {
	out := map[string]ClientUse{}
	for _, c := range s.Clients() {
		out[c.Name] = c
	}
	return out
}

// Each client's requests count under its own name on the server it used,
// never under another's nor on another server; the version and the time
// are the last ones; an empty name is unknown.
func TestNoteClientCountsEachClientApart(t *testing.T) {
	f := clientFleet(t, `"a":{"command":"a"},"b":{"command":"b"}`)
	a, b := f.Get("a"), f.Get("b")
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	a.NoteClient([]byte("claude-ai"), []byte("0.1"), t0)
	a.NoteClient([]byte("claude-ai"), []byte("0.2"), t0.Add(time.Second))
	a.NoteClient([]byte("cursor-vscode"), []byte("1.0.0"), t0.Add(2*time.Second))
	a.NoteClient(nil, nil, t0.Add(3*time.Second))
	// An end noted late (a request that began earlier ended later) does
	// not move the time back.
	a.NoteClient([]byte("claude-ai"), []byte("0.2"), t0)

	got := clientsByName(a)
	want := map[string]ClientUse{
		"claude-ai":     {Name: "claude-ai", Version: "0.2", Requests: 3, LastUsed: t0.Add(time.Second)},
		"cursor-vscode": {Name: "cursor-vscode", Version: "1.0.0", Requests: 1, LastUsed: t0.Add(2 * time.Second)},
		UnknownClient:   {Name: UnknownClient, Requests: 1, LastUsed: t0.Add(3 * time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("clients of a: %+v", a.Clients())
	}
	for name, w := range want {
		g := got[name]
		if g.Name != w.Name || g.Version != w.Version || g.Requests != w.Requests || !g.LastUsed.Equal(w.LastUsed) {
			t.Errorf("%s: got %+v, want %+v", name, g, w)
		}
	}
	if names := a.Clients(); names[0].Name != "claude-ai" || names[1].Name != "cursor-vscode" || names[2].Name != UnknownClient {
		t.Errorf("not by name: %+v", names)
	}
	if cs := b.Clients(); cs != nil {
		t.Errorf("b, which no client used, lists %+v", cs)
	}
}

// A server no client used costs nothing: asking for its clients makes no
// table; the first request of a client makes one.
func TestNoteClientTableIsMadeOnFirstUse(t *testing.T) {
	f := clientFleet(t, `"a":{"command":"a"}`)
	a := f.Get("a")
	_ = a.Clients()
	if _, ok := f.clients.tables.Load(a); ok {
		t.Fatal("Clients made a table for a server no client used")
	}
	a.NoteClient([]byte("x"), nil, time.Now())
	if _, ok := f.clients.tables.Load(a); !ok {
		t.Fatal("no table after a request")
	}
}

// A hostile client that gives a new name at every request, and huge
// ones: the server keeps MaxClientNames names, every other request counts
// under OtherClients (which keeps no version), names and versions are cut
// at their bounds, and no request is lost from the counts.
func TestNoteClientIsBounded(t *testing.T) {
	f := clientFleet(t, `"a":{"command":"a"}`)
	a := f.Get("a")
	now := time.Now()
	const n = 1000
	for i := range n {
		a.NoteClient(fmt.Appendf(nil, "client-%d", i), []byte("1"), now)
	}
	huge := []byte(strings.Repeat("n", 1<<20))
	a.NoteClient(huge, huge, now)
	cs := a.Clients()
	if len(cs) != MaxClientNames+1 {
		t.Fatalf("%d names kept, want %d and %s", len(cs), MaxClientNames, OtherClients)
	}
	var total uint64
	for _, c := range cs {
		total += c.Requests
		if len(c.Name) > MaxClientNameLen || len(c.Version) > MaxClientVersionLen {
			t.Errorf("kept a name of %d bytes, version of %d", len(c.Name), len(c.Version))
		}
	}
	if total != n+1 {
		t.Errorf("%d requests counted, want %d", total, n+1)
	}
	other := cs[len(cs)-1]
	if other.Name != OtherClients || other.Requests != n+1-MaxClientNames || other.Version != "" {
		t.Errorf("last: %+v, want %s with %d requests and no version", other, OtherClients, n+1-MaxClientNames)
	}

	// A name cut to the bound is one name, however long it was.
	f2 := clientFleet(t, `"a":{"command":"a"}`)
	b := f2.Get("a")
	b.NoteClient(huge, nil, now)
	b.NoteClient(huge[:MaxClientNameLen+7], nil, now)
	if cs := b.Clients(); len(cs) != 1 || len(cs[0].Name) != MaxClientNameLen || cs[0].Requests != 2 {
		t.Errorf("huge names: %+v", cs)
	}
}

// NoteClient allocates nothing once the client has an entry (it runs at
// every request).
func TestNoteClientAllocatesNothingOnceKnown(t *testing.T) {
	f := clientFleet(t, `"a":{"command":"a"}`)
	a := f.Get("a")
	name, version := []byte("claude-ai"), []byte("0.2")
	now := time.Now()
	a.NoteClient(name, version, now)
	if n := testing.AllocsPerRun(100, func() { a.NoteClient(name, version, now) }); n != 0 {
		t.Errorf("%v allocations per request of a known client", n)
	}
}

// NoteClient is safe for concurrent use: every request of many callers
// is counted once (run with -race).
func TestNoteClientConcurrent(t *testing.T) {
	f := clientFleet(t, `"a":{"command":"a"}`)
	a := f.Get("a")
	const callers, each = 16, 200
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range callers {
		wg.Go(func() {
			name := fmt.Appendf(nil, "c%d", i%4)
			for j := range each {
				// Each caller's times interleave with the others': the
				// latest is kept, whichever caller counts it last.
				a.NoteClient(name, nil, t0.Add(time.Duration(j*callers+i)))
				_ = a.Clients()
			}
		})
	}
	wg.Wait()
	var total uint64
	for _, c := range a.Clients() {
		total += c.Requests
		// c%d's last request: caller 12+k's (k = 0…3) last one.
		var k int
		fmt.Sscanf(c.Name, "c%d", &k)
		if want := t0.Add(time.Duration((each-1)*callers + 12 + k)); !c.LastUsed.Equal(want) {
			t.Errorf("%s: last used %v, want %v", c.Name, c.LastUsed.Sub(t0), want.Sub(t0))
		}
	}
	if total != callers*each {
		t.Errorf("%d requests counted, want %d", total, callers*each)
	}
}

// A server a reload removed drops its table, and a request that ends
// after (one that was in flight, or a session still open on its
// endpoint) does not make it again: the book keeps no removed server.
func TestNoteClientForgetsARemovedServer(t *testing.T) {
	f := clientFleet(t, `"a":{"command":"a"},"b":{"command":"b"}`)
	a := f.Get("a")
	a.NoteClient([]byte("x"), nil, time.Now())
	if _, err := f.Reload(t.Context(), parseCfg(t, `"b":{"command":"b"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.clients.tables.Load(a); ok {
		t.Fatal("the removed server's table is kept")
	}
	a.NoteClient([]byte("x"), nil, time.Now())
	if _, ok := f.clients.tables.Load(a); ok || a.Clients() != nil {
		t.Fatal("a request after the removal made the table again")
	}
}
