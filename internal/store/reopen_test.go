package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// learn writes the lists and definitions of n servers one at a time, as
// learning a fleet does.
func learn(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		items := make([]json.RawMessage, 20)
		for j := range items {
			items[j] = json.RawMessage(fmt.Sprintf(`{"name":"tool_%d","description":"%s","inputSchema":{"type":"object"}}`, j, strings.Repeat("d", 100)))
		}
		name := fmt.Sprintf("s%04d", i)
		if err := s.PutLists(name, "h", Lists{Init: json.RawMessage(`{"protocolVersion":"2025-06-18"}`), Items: map[Kind][]json.RawMessage{Tools: items}}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutDefinitions(name, json.RawMessage(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
	}
}

// bbolt keeps in memory, while the file is open, a record of each page
// this process's writes allocated that is still in use; after many
// writes (learning a fleet), ReleaseMemory reopens the file, which lets
// that record go. What was written reads back, and writes go on.
func TestReleaseMemoryForgetsAllocations(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	learn(t, s, 1000)
	before := testserver.LiveHeap()
	if err := s.ReleaseMemory(); err != nil {
		t.Fatal(err)
	}
	after := testserver.LiveHeap()
	t.Logf("live heap %d kB before ReleaseMemory, %d kB after", before>>10, after>>10)
	if before-after < 32<<10 {
		t.Fatalf("ReleaseMemory after a thousand servers were written freed %d bytes of heap, want ≥ 32 KiB", before-after)
	}
	for _, name := range []string{"s0000", "s0999"} {
		if items, ok, err := s.List(name, "h", Tools); err != nil || !ok || len(items) != 20 {
			t.Fatalf("after ReleaseMemory, %s's tools read back as %d items (%v, %v)", name, len(items), ok, err)
		}
		if d := s.Definitions(name); string(d) != `{"n":1}` {
			t.Fatalf("after ReleaseMemory, %s's definitions read back as %s", name, d)
		}
	}
	if err := s.PutDefinitions("s0000", json.RawMessage(`{"n":2}`)); err != nil || string(s.Definitions("s0000")) != `{"n":2}` {
		t.Fatalf("a write after ReleaseMemory: %v", err)
	}
}

// A store that wrote little is not reopened: ReleaseMemory is cheap when
// there is nothing to win.
func TestReleaseMemoryKeepsTheFileAfterFewWrites(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	learn(t, s, 3)
	s.mu.RLock()
	db := s.db
	s.mu.RUnlock()
	if err := s.ReleaseMemory(); err != nil {
		t.Fatal(err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db != db {
		t.Fatal("ReleaseMemory reopened a file after a few writes")
	}
}

// ReleaseMemory may reopen the file while other goroutines read and
// write (run under -race): none fails or faults, and every read finds
// what was written.
func TestReleaseMemoryReopensUnderUse(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i%50)
				rec := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
				if err := s.PutDefinitions(name, rec); err != nil {
					t.Error(err)
					return
				}
				if got := s.Definitions(name); string(got) != string(rec) {
					t.Errorf("%s read back as %s, want %s", name, got, rec)
					return
				}
			}
		})
	}
	reopened := 0
	for range 6 {
		learn(t, s, 150)
		s.mu.RLock()
		db := s.db
		s.mu.RUnlock()
		if err := s.ReleaseMemory(); err != nil {
			t.Fatal(err)
		}
		s.mu.RLock()
		if s.db != db {
			reopened++
		}
		s.mu.RUnlock()
	}
	close(stop)
	wg.Wait()
	if reopened < 3 {
		t.Fatalf("the file was reopened %d times in 6 rounds of 150 servers written, want ≥ 3", reopened)
	}
}

// A reopen that cannot open the file again (anything but damage: the file
// system, a lock taken meanwhile) leaves the file as it is — not moved
// aside — and the store opens it again once it can, at most once a second,
// as it is used: nothing cached is lost for good.
func TestReopenThatFailsComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		s := open(t, path, Options{})
		learn(t, s, 400) // ≥ reopenPages pages allocated
		fault := errors.New("injected: the file system said no")
		s.openFault = func() error { return fault }
		_ = s.ReleaseMemory()
		if _, _, err := s.List("s0001", "h", Tools); err == nil {
			t.Fatal("a store whose file could not be opened again still reads")
		}
		if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
			t.Fatalf("a healthy file was moved aside: %v", aside)
		}
		s.openFault = nil
		if _, _, err := s.List("s0001", "h", Tools); err == nil {
			t.Fatal("the file was opened again within a second of the failure (want at most once a second)")
		}
		time.Sleep(reviveEvery)
		items, ok, err := s.List("s0001", "h", Tools)
		if err != nil || !ok || len(items) != 20 {
			t.Fatalf("a second later, a cached list reads as %d items, %v, %v; want its 20 items", len(items), ok, err)
		}
	})
}
