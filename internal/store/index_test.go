package store

import (
	"encoding/json"
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
	if string(a.Init) != `{"protocolVersion":"2025-11-25"}` || len(a.Count) != 2 || a.Count[Tools] != 2 || a.Count[Prompts] != 0 {
		t.Fatalf("a's summary: init %s, counts %v", a.Init, a.Count)
	}
	if _, ok := a.Count[Prompts]; !ok {
		t.Fatal("a fetched, empty list of prompts is absent from its summary")
	}
	var nilStore *Store
	if n := len(nilStore.Index(map[string]string{"a": "h1"})); n != 0 {
		t.Fatalf("a nil store indexed %d servers", n)
	}
}
