package store

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// mappedRSS is the resident size (kB) of s's file mapping, from
// /proc/self/smaps.
func mappedRSS(t *testing.T, s *Store) int {
	t.Helper()
	s.mu.RLock()
	addr := s.db.Info().Data
	s.mu.RUnlock()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := strconv.FormatUint(uint64(addr), 16) + "-"
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && !strings.HasSuffix(f[0], ":") { // a mapping's first line
			in = strings.HasPrefix(line, prefix)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			return n
		}
	}
	t.Fatalf("no mapping at %#x in /proc/self/smaps", addr)
	return 0
}

// ReleaseMemory drops the state file's pages from the process's resident
// memory, and what is read afterwards is what was written.
func TestReleaseMemory(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	item := json.RawMessage(`{"name":"t","description":"` + strings.Repeat("d", 400) + `"}`)
	var entries []Entry
	for i := range 500 {
		items := make([]json.RawMessage, 20)
		for j := range items {
			items[j] = item
		}
		entries = append(entries, Entry{Server: fmt.Sprintf("s%03d", i), Hash: "h", Lists: Lists{Items: map[Kind][]json.RawMessage{Tools: items}}})
	}
	if err := s.PutMany(entries); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, e := range entries {
		want[e.Server] = "h"
	}
	if n := len(s.Load(want)); n != 500 {
		t.Fatalf("loaded %d entries", n)
	}
	before := mappedRSS(t, s)
	if err := s.ReleaseMemory(); err != nil {
		t.Fatal(err)
	}
	after := mappedRSS(t, s)
	t.Logf("the state file's resident pages: %d kB before, %d kB after", before, after)
	if before < 1024 || after > before/10 {
		t.Fatalf("resident pages of the state file: %d kB before ReleaseMemory, %d kB after", before, after)
	}
	l, ok := s.Lists("s123", "h")
	if items, _ := l.Get(Tools); !ok || len(items) != 20 || string(items[19]) != string(item) {
		t.Fatalf("after ReleaseMemory, s123's tools read back as %d items", len(items))
	}
}

// ReleaseMemory runs while writes grow the file (and so remap it) and
// reads go on: every read finds what was written, none faults.
func TestReleaseMemoryWhileTheFileGrows(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	item := json.RawMessage(`{"name":"t","description":"` + strings.Repeat("d", 2000) + `"}`)
	done := make(chan struct{})
	released := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				released <- n
				return
			default:
			}
			if err := s.ReleaseMemory(); err != nil {
				t.Error(err)
			}
			n++
		}
	}()
	for i := range 300 {
		name := fmt.Sprintf("s%03d", i)
		items := []json.RawMessage{item, item, item, item, item}
		if err := s.PutLists(name, "h", Lists{Items: map[Kind][]json.RawMessage{Tools: items}}); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := s.List(name, "h", Tools); err != nil || !ok || len(got) != 5 || string(got[4]) != string(item) {
			t.Fatalf("%s read back as %d items (%v, %v)", name, len(got), ok, err)
		}
	}
	close(done)
	if n := <-released; n == 0 {
		t.Fatal("no ReleaseMemory ran meanwhile")
	}
}
