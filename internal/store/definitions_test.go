package store

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// A definitions record survives a reopen and a change of the server's
// cached lists under another launch hash; PruneDefinitions drops only
// those of servers not kept.
func TestDefinitionsPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	if got := s.Definitions("a"); got != nil {
		t.Fatalf("fresh store has a record: %s", got)
	}
	rec := json.RawMessage(`{"known":{"tool":["x"]}}`)
	if err := s.PutDefinitions("a", rec); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDefinitions("b", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDefinitions("a", json.RawMessage(`{"known":`)); err == nil {
		t.Fatal("PutDefinitions took a record that is not JSON")
	}
	if err := s.PutDefinitions("", rec); err == nil {
		t.Fatal("PutDefinitions took an empty server name")
	}
	if err := s.PutLists("a", "h1", Lists{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(map[string]string{"a": "h2"}); err != nil { // the lists of launch h1 go
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, Options{})
	defer s.Close()
	if got := s.Definitions("a"); string(got) != string(rec) {
		t.Fatalf("after reopen and a launch change: %s, want %s", got, rec)
	}
	n, err := s.PruneDefinitions(map[string]bool{"a": true})
	if err != nil || n != 1 {
		t.Fatalf("PruneDefinitions = %d, %v; want 1 removed", n, err)
	}
	if s.Definitions("b") != nil || s.Definitions("a") == nil {
		t.Fatal("PruneDefinitions removed the wrong record")
	}
	if err := s.PutDefinitions("a", nil); err != nil || s.Definitions("a") != nil {
		t.Fatalf("deleting a record: %v", err)
	}
	var none *Store
	if none.Definitions("a") != nil || none.PutDefinitions("a", rec) != nil {
		t.Fatal("a nil store is not a no-op")
	}
}
