package store

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
)

// Index summarizes the entries under their launch hashes — the init and
// each fetched list's item count, an empty fetched list included — and
// leaves out servers not wanted or stored under another hash.
func TestIndex(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	if err := s.PutLists("a", "h1", Lists{Init: json.RawMessage(`{"protocolVersion":"2025-11-25"}`),
		Items: map[Kind][]json.RawMessage{Tools: raws(`{"name":"x"}`, `{"name":"y"}`), Prompts: {}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLists("b", "h2", Lists{Items: map[Kind][]json.RawMessage{Tools: raws(`{"name":"z"}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLists("c", "h3", Lists{Items: map[Kind][]json.RawMessage{Tools: raws(`{"name":"z"}`)}}); err != nil {
		t.Fatal(err)
	}
	got := s.Index(map[string]string{"a": "h1", "b": "other", "d": "h4"})
	if len(got) != 1 {
		t.Fatalf("Index = %v, want a only", got)
	}
	a := got["a"]
	if string(a.Init) != `{"protocolVersion":"2025-11-25"}` || len(a.Lists) != 2 || !a.Lists[Tools] || a.Lists[Prompts] {
		t.Fatalf("a's summary: init %s, lists %v", a.Init, a.Lists)
	}
	if _, ok := a.Lists[Prompts]; !ok {
		t.Fatal("a fetched, empty list of prompts is absent from its summary")
	}

	// List reads one list: the items, an empty fetched one, none unfetched
	// or under another hash.
	if items, ok, _ := s.List("a", "h1", Tools); !ok || len(items) != 2 || string(items[1]) != `{"name":"y"}` {
		t.Fatalf("a's tools: %q (%v)", items, ok)
	}
	if items, ok, _ := s.List("a", "h1", Prompts); !ok || items == nil || len(items) != 0 {
		t.Fatalf("a's fetched, empty prompts: %q (%v)", items, ok)
	}
	if _, ok, _ := s.List("a", "h1", Resources); ok {
		t.Fatal("a's resources, never fetched, read as a list")
	}
	if _, ok, _ := s.List("b", "other", Tools); ok {
		t.Fatal("b's tools read under another launch hash")
	}
	// Init reads the initialize result alone: none stored, or under
	// another hash, is none.
	if init, ok, err := s.Init("a", "h1"); err != nil || !ok || string(init) != `{"protocolVersion":"2025-11-25"}` {
		t.Fatalf("a's init: %s (%v, %v)", init, ok, err)
	}
	if init, ok, err := s.Init("b", "h2"); err != nil || ok || init != nil {
		t.Fatalf("b's init, never stored: %s (%v, %v)", init, ok, err)
	}
	if _, ok, _ := s.Init("a", "other"); ok {
		t.Fatal("a's init read under another launch hash")
	}
	var nilStore *Store
	if n := len(nilStore.Index(map[string]string{"a": "h1"})); n != 0 {
		t.Fatalf("a nil store indexed %d servers", n)
	}
}

// A read that fails — the store closed — is an error, not an absent list
// or initialize result.
func TestListOfAClosedStoreIsAnError(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	if err := s.PutLists("a", "h1", Lists{Items: map[Kind][]json.RawMessage{Tools: {json.RawMessage(`{"name":"x"}`)}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if items, ok, err := s.List("a", "h1", Tools); !errors.Is(err, ErrClosed) || ok || items != nil {
		t.Fatalf("List on a closed store: %q, %v, %v; want ErrClosed", items, ok, err)
	}
	if init, ok, err := s.Init("a", "h1"); !errors.Is(err, ErrClosed) || ok || init != nil {
		t.Fatalf("Init on a closed store: %s, %v, %v; want ErrClosed", init, ok, err)
	}
}
