package catalog

import (
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/store"
)

// Approvals and relearns from many goroutines at once — the refresher's
// and those of List after the cached list was dropped, racing each other
// — : nothing races (under -race), and what the definitions know ends as
// the list cached (approving all makes the cached echo the visible one).
func TestApproveConcurrentWithRelearns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := newTestCatalogOf(t, nil, serverConfigWith(t, "fake", `,"idleTimeout":"0","pin":true`), newTestServer(t, ""))
		h.srv.setItems(echoV1)
		learnTools(t, s)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for j := range 20 {
					if (i+j)%2 == 0 {
						h.srv.setItems(echoV2)
					} else {
						h.srv.setItems(echoV3)
					}
					s.ListChanged("notifications/tools/list_changed")
					if j%3 == 0 {
						s.lists.drop(Tools)
						if _, err := s.List(t.Context(), Tools); err != nil {
							t.Error(err)
						}
					}
					_, _, err := s.Approve(nil, nil)
					if err != nil {
						t.Error(err)
					}
					// What the fleet's status reads of the catalog.
					_, _, _, _ = s.Cached(Tools), s.Warning(), s.PendingDefinitions(), s.Era()
					_ = s.Definitions()
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		if _, _, err := s.Approve(nil, nil); err != nil {
			t.Fatal(err)
		}
		items, _ := s.CachedList(Tools)
		if len(items) != 1 || !s.ToolVisible(items[0]) || s.ToolHeld("echo") {
			t.Fatal("after approving all, the cached echo is not the visible one")
		}
	})
}

// Once a reload removed a server, nothing of it writes its definitions
// record: a late flush of the removed server (its refresher finishing)
// does not undo what the server added again under its name wrote.
func TestARemovedServerNoLongerWritesItsRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		s, h := newTestCatalogOf(t, st, serverConfigWith(t, "fake", `,"idleTimeout":"0","pin":true`), newTestServer(t, ""))
		h.srv.setItems(echoV1, pidTool)
		learnTools(t, s)
		h.remove()
		synctest.Wait()
		before := string(st.Definitions("s"))
		if before == "" {
			t.Fatal("no record written before the removal")
		}
		d := s.lockDefs() // a change the removed server would persist
		d.approved = nil
		d.dirty = true
		d.mu.Unlock()
		s.flushDefinitions()
		if got := string(st.Definitions("s")); got != before {
			t.Fatalf("a removed server wrote its record:\n%s\nwas\n%s", got, before)
		}
	})
}

// Persisting a server's definitions (a disk write with fsync) does not
// hold up what reads them — ToolHeld on every pinned call, the status on
// every poll — and two flushes racing write the newer record last.
func TestDefinitionsWriteDoesNotHoldUpReaders(t *testing.T) {
	s, h := newTestCatalogOf(t, openStore(t), serverConfigWith(t, "fake", `,"pin":true,"idleTimeout":"0"`), newTestServer(t, ""))
	h.srv.setItems(echoV1, pidTool)
	if _, err := s.List(t.Context(), Tools); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h.env.putDefs = func(*store.Store, string, json.RawMessage) error {
		entered <- struct{}{}
		<-release
		return nil
	}
	releaseWrite := sync.OnceFunc(func() { close(release) })
	defer releaseWrite() // (the write held ends before the host's work is waited for)
	h.srv.setItems(echoV2, pidTool)
	s.ListChanged("notifications/tools/list_changed") // a relearn: the change is persisted
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the change was not persisted")
	}
	read := make(chan bool, 1)
	go func() {
		held := s.ToolHeld("echo")
		// What the fleet's status reads of the catalog.
		_, _, _, _ = s.Cached(Tools), s.Warning(), s.PendingDefinitions(), s.Era()
		read <- held
	}()
	select {
	case held := <-read:
		if !held {
			t.Error("the changed echo of a pinned server is not held")
		}
	case <-time.After(10 * time.Second):
		t.Error("ToolHeld and the status's reads waited for the disk write")
	}
	releaseWrite()
}
