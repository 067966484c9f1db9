package store

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// BenchmarkLoad1000 is mcpvisor's start: 1,000 configured servers, each
// with 20 cached tools of 1 KB, read in one Load.
func BenchmarkLoad1000(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	want := fill(b, s, 1000)
	b.SetBytes(1000 * 20 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		if got := s.Load(want); len(got) != 1000 {
			b.Fatalf("loaded %d", len(got))
		}
	}
}

// BenchmarkOpen1000 is Open of that file, including the walk that checks
// every page.
func BenchmarkOpen1000(b *testing.B) {
	path := filepath.Join(b.TempDir(), "state.db")
	s := open(b, path, Options{})
	fill(b, s, 1000)
	s.Close()
	b.ReportAllocs()
	for b.Loop() {
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkDecodeJSON1000 is what storing each list as one JSON array
// would add to BenchmarkLoad1000: decoding 1,000 arrays of 20 1 KB items
// into []json.RawMessage (the copy out of the file is not counted).
func BenchmarkDecodeJSON1000(b *testing.B) {
	arrays := make([][]byte, 1000)
	for i := range arrays {
		tools, _ := realisticLists(i, 20, 1024).Get(Tools)
		arrays[i], _ = json.Marshal(tools)
	}
	b.SetBytes(1000 * 20 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		for _, a := range arrays {
			var items []json.RawMessage
			if err := json.Unmarshal(a, &items); err != nil || len(items) != 20 {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPutLists is one server's lists written on their own (one fsync).
func BenchmarkPutLists(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	l := realisticLists(0, 20, 1024)
	for b.Loop() {
		if err := s.PutLists("server", "h", l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutMany1000 writes all 1,000 servers in one transaction.
func BenchmarkPutMany1000(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	for b.Loop() {
		fill(b, s, 1000)
	}
}

// BenchmarkLists is one server's lookup.
func BenchmarkLists(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	fill(b, s, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Lists("server-0500", hashOf(500)); !ok {
			b.Fatal("not found")
		}
	}
}

// BenchmarkAppendEvent is one event on its own (one fsync).
func BenchmarkAppendEvent(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "state.db"), Options{})
	e := Event{Server: "everything", Type: "dormant", Details: json.RawMessage(`{"idle_seconds":180,"pid":1234}`)}
	for b.Loop() {
		if err := s.AppendEvent(e); err != nil {
			b.Fatal(err)
		}
	}
}
