package store

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
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
	// b is no longer configured: kept for the grace period from when it
	// was first seen gone, which a return of b resets.
	const day, grace = 24 * time.Hour, 30 * 24 * time.Hour
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	prune := func(at time.Duration, keep ...string) int {
		t.Helper()
		k := map[string]bool{}
		for _, name := range keep {
			k[name] = true
		}
		n, err := s.PruneDefinitions(k, t0.Add(at), grace)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if prune(0, "a") != 0 || prune(29*day, "a") != 0 || s.Definitions("b") == nil {
		t.Fatal("a record of a server gone for less than the grace period was removed")
	}
	prune(29*day, "a", "b") // b is back
	if prune(40*day, "a") != 0 || s.Definitions("b") == nil {
		t.Fatal("the grace period did not start again after b came back")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, Options{})
	if prune(69*day, "a") != 0 || s.Definitions("b") == nil {
		t.Fatal("removed before its grace period ended (counted from when it left again, across a reopen)")
	}
	if n := prune(70*day, "a"); n != 1 || s.Definitions("b") != nil || s.Definitions("a") == nil {
		t.Fatalf("PruneDefinitions after the grace period removed %d; b %s, a %s", n, s.Definitions("b"), s.Definitions("a"))
	}
	if err := s.PutDefinitions("a", nil); err != nil || s.Definitions("a") != nil {
		t.Fatalf("deleting a record: %v", err)
	}
	var none *Store
	if none.Definitions("a") != nil || none.PutDefinitions("a", rec) != nil {
		t.Fatal("a nil store is not a no-op")
	}
}
