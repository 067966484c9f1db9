package clientbook_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/clientbook"
)

// server is a server of the book's, removed when set.
type server struct{ removed atomic.Bool }

func (s *server) Removed() bool { return s.removed.Load() }

type Book = clientbook.Book

func clientsByName(book *Book, s clientbook.Server) map[string]clientbook.Use {
	out := map[string]clientbook.Use{}
	for _, c := range book.Of(s) {
		out[c.Name] = c
	}
	return out
}

// Each client's requests count under its own name on the server it used,
// never under another's nor on another server; the version and the time
// are the last ones; an empty name is unknown.
func TestNoteClientCountsEachClientApart(t *testing.T) {
	var book Book
	a, b := &server{}, &server{}
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	book.Note(a, []byte("claude-ai"), []byte("0.1"), t0)
	book.Note(a, []byte("claude-ai"), []byte("0.2"), t0.Add(time.Second))
	book.Note(a, []byte("cursor-vscode"), []byte("1.0.0"), t0.Add(2*time.Second))
	book.Note(a, nil, nil, t0.Add(3*time.Second))
	// An end noted late (a request that began earlier ended later) does
	// not move the time back.
	book.Note(a, []byte("claude-ai"), []byte("0.2"), t0)

	got := clientsByName(&book, a)
	want := map[string]clientbook.Use{
		"claude-ai":        {Name: "claude-ai", Version: "0.2", Requests: 3, LastUsed: t0.Add(time.Second)},
		"cursor-vscode":    {Name: "cursor-vscode", Version: "1.0.0", Requests: 1, LastUsed: t0.Add(2 * time.Second)},
		clientbook.Unknown: {Name: clientbook.Unknown, Requests: 1, LastUsed: t0.Add(3 * time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("clients of a: %+v", book.Of(a))
	}
	for name, w := range want {
		g := got[name]
		if g.Name != w.Name || g.Version != w.Version || g.Requests != w.Requests || !g.LastUsed.Equal(w.LastUsed) {
			t.Errorf("%s: got %+v, want %+v", name, g, w)
		}
	}
	if names := book.Of(a); names[0].Name != "claude-ai" || names[1].Name != "cursor-vscode" || names[2].Name != clientbook.Unknown {
		t.Errorf("not by name: %+v", names)
	}
	if cs := book.Of(b); cs != nil {
		t.Errorf("b, which no client used, lists %+v", cs)
	}
}

// A server no client used costs nothing: asking for its clients makes no
// table; the first request of a client makes one.
func TestNoteClientTableIsMadeOnFirstUse(t *testing.T) {
	var book Book
	a := &server{}
	_ = book.Of(a)
	if book.HasTable(a) {
		t.Fatal("Of made a table for a server no client used")
	}
	book.Note(a, []byte("x"), nil, time.Now())
	if !book.HasTable(a) {
		t.Fatal("no table after a request")
	}
}

// A hostile client that gives a new name at every request, and huge
// ones: the server keeps clientbook.MaxNames names, every other request counts
// under clientbook.Other (which keeps no version), names and versions are cut
// at their bounds, and no request is lost from the counts.
func TestNoteClientIsBounded(t *testing.T) {
	var book Book
	a := &server{}
	now := time.Now()
	const n = 1000
	for i := range n {
		book.Note(a, fmt.Appendf(nil, "client-%d", i), []byte("1"), now)
	}
	huge := []byte(strings.Repeat("n", 1<<20))
	book.Note(a, huge, huge, now)
	cs := book.Of(a)
	if len(cs) != clientbook.MaxNames+1 {
		t.Fatalf("%d names kept, want %d and %s", len(cs), clientbook.MaxNames, clientbook.Other)
	}
	var total uint64
	for _, c := range cs {
		total += c.Requests
		if len(c.Name) > clientbook.MaxNameLen || len(c.Version) > clientbook.MaxVersionLen {
			t.Errorf("kept a name of %d bytes, version of %d", len(c.Name), len(c.Version))
		}
	}
	if total != n+1 {
		t.Errorf("%d requests counted, want %d", total, n+1)
	}
	other := cs[len(cs)-1]
	if other.Name != clientbook.Other || other.Requests != n+1-clientbook.MaxNames || other.Version != "" {
		t.Errorf("last: %+v, want %s with %d requests and no version", other, clientbook.Other, n+1-clientbook.MaxNames)
	}

	// A name cut to the bound is one name, however long it was.
	var book2 Book
	b := &server{}
	book2.Note(b, huge, nil, now)
	book2.Note(b, huge[:clientbook.MaxNameLen+7], nil, now)
	if cs := book2.Of(b); len(cs) != 1 || len(cs[0].Name) != clientbook.MaxNameLen || cs[0].Requests != 2 {
		t.Errorf("huge names: %+v", cs)
	}
}

// NoteClient allocates nothing once the client has an entry (it runs at
// every request).
func TestNoteClientAllocatesNothingOnceKnown(t *testing.T) {
	var book Book
	a := &server{}
	name, version := []byte("claude-ai"), []byte("0.2")
	now := time.Now()
	book.Note(a, name, version, now)
	if n := testing.AllocsPerRun(100, func() { book.Note(a, name, version, now) }); n != 0 {
		t.Errorf("%v allocations per request of a known client", n)
	}
}

// NoteClient is safe for concurrent use: every request of many callers
// is counted once (run with -race).
func TestNoteClientConcurrent(t *testing.T) {
	var book Book
	a := &server{}
	const callers, each = 16, 200
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range callers {
		wg.Go(func() {
			name := fmt.Appendf(nil, "c%d", i%4)
			for j := range each {
				// Each caller's times interleave with the others': the
				// latest is kept, whichever caller counts it last.
				book.Note(a, name, nil, t0.Add(time.Duration(j*callers+i)))
				_ = book.Of(a)
			}
		})
	}
	wg.Wait()
	var total uint64
	for _, c := range book.Of(a) {
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
	var book Book
	a, b := &server{}, &server{}
	book.Note(a, []byte("x"), nil, time.Now())
	book.Note(b, []byte("x"), nil, time.Now())
	a.removed.Store(true) // as a reload sets it, before Sweep
	book.Sweep()
	if book.HasTable(a) {
		t.Fatal("the removed server's table is kept")
	}
	book.Note(a, []byte("x"), nil, time.Now())
	if book.HasTable(a) || book.Of(a) != nil {
		t.Fatal("a request after the removal made the table again")
	}
	if cs := book.Of(b); len(cs) != 1 {
		t.Fatalf("the server kept lists %+v", cs)
	}
}
