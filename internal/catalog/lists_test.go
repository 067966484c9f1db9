package catalog

import (
	"encoding/json"
	"testing"
	"testing/synctest"
)

// A list fetched before the server said its lists changed is not stored
// over what the refresh that follows fetches.
func TestListFetchedBeforeAChangeIsNotStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := newTestCatalogOf(t, nil, serverConfigWith(t, "fake", `,"idleTimeout":"0"`), newTestServer(t, ""))
		old := []json.RawMessage{json.RawMessage(`{"name":"old"}`)}
		gen := s.lists.generation() // a fetch begins
		s.ListChanged("notifications/tools/list_changed")
		synctest.Wait()
		if stored, _, _ := s.putIf(gen, Tools, old); stored {
			t.Fatal("a list fetched before the change was stored")
		}
		if s.Cached(Tools) {
			t.Fatal("the stale list is cached")
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if reported := h.reported; len(reported) != 1 || len(reported[0]) != 1 || reported[0][0] != Tools {
			t.Fatalf("reported %v, want one report of tools (the server is not running: its list is dropped)", reported)
		}
	})
}
