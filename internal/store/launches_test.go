package store

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A launch record is found under the key it was written with only; it
// survives a reopen; another key replaces it, nil deletes it;
// PruneLaunches keeps those of the servers and keys it is given.
func TestLaunchesPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	rec := json.RawMessage(`{"resolution":{"command":"/usr/bin/node"}}`)
	if got := s.Launch("a", "k1"); got != nil {
		t.Fatalf("fresh store has a record: %s", got)
	}
	for name, err := range map[string]error{
		"a": s.PutLaunch("a", "k1", rec),
		"b": s.PutLaunch("b", "k2", json.RawMessage(`{"reason":"not installed"}`)),
		"c": s.PutLaunch("c", "k3", json.RawMessage(`{}`)),
	} {
		if err != nil {
			t.Fatalf("PutLaunch %s: %v", name, err)
		}
	}
	for what, err := range map[string]error{
		"a record that is not JSON": s.PutLaunch("a", "k1", json.RawMessage(`{"resolution":`)),
		"an empty server name":      s.PutLaunch("", "k1", rec),
		"an empty key":              s.PutLaunch("a", "", rec),
	} {
		if err == nil {
			t.Errorf("PutLaunch took %s", what)
		}
	}
	if got := s.Launch("a", "k1"); string(got) != string(rec) {
		t.Fatalf("Launch = %s, want %s", got, rec)
	}
	if got := s.Launch("a", "k2"); got != nil {
		t.Fatalf("found under another key: %s", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, Options{})
	if got := s.Launch("a", "k1"); string(got) != string(rec) {
		t.Fatalf("after reopen: %s", got)
	}
	if err := s.PutLaunch("a", "k9", json.RawMessage(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	if s.Launch("a", "k1") != nil || string(s.Launch("a", "k9")) != `{"v":2}` {
		t.Fatal("a record under a new key did not replace the old one")
	}
	if err := s.PutLaunch("a", "k9", nil); err != nil || s.Launch("a", "k9") != nil {
		t.Fatalf("deleting: %v, left %s", err, s.Launch("a", "k9"))
	}
	n, err := s.PruneLaunches(map[string]string{"b": "k2", "c": "changed"})
	if err != nil || n != 1 || s.Launch("b", "k2") == nil || s.Launch("c", "k3") != nil {
		t.Fatalf("PruneLaunches removed %d (%v); b %s, c %s", n, err, s.Launch("b", "k2"), s.Launch("c", "k3"))
	}
	if n, err := s.PruneLaunches(nil); n != 1 || err != nil || s.Launch("b", "k2") != nil {
		t.Fatalf("PruneLaunches(nil) removed %d, %v", n, err)
	}

	var none *Store
	if none.Launch("a", "k") != nil || none.PutLaunch("a", "k", rec) != nil {
		t.Error("a nil store is not a no-op")
	}
	if n, err := none.PruneLaunches(nil); n != 0 || err != nil {
		t.Errorf("nil PruneLaunches = %d, %v", n, err)
	}
	s.Close()
	if s.Launch("b", "k2") != nil {
		t.Error("Launch after Close found a record")
	}
	if err := s.PutLaunch("b", "k2", rec); !errors.Is(err, ErrClosed) {
		t.Errorf("PutLaunch after Close = %v, want ErrClosed", err)
	}
}

// A file of another schema is emptied at open: its launch records too.
func TestLaunchesDroppedWithAnotherSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	if err := s.PutLaunch("a", "k", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("0")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = open(t, path, Options{Logger: slog.New(slog.DiscardHandler)})
	if got := s.Launch("a", "k"); got != nil {
		t.Fatalf("a record of another schema survived: %s", got)
	}
}

// A file that faults under a running store: a launch read finds nothing,
// the store carries on with a fresh file and keeps new records.
func TestLaunchesAfterFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	var logs testserver.Buffer
	s := open(t, path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	fill(t, s, 50)
	if err := s.PutLaunch("z-last", "k", json.RawMessage(`{"resolution":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 3*4096); err != nil {
		t.Fatal(err)
	}
	s.Load(map[string]string{"server-0049": hashOf(49)}) // faults: the file is replaced
	if got := s.Launch("z-last", "k"); got != nil {
		t.Fatalf("a record from a truncated file: %s", got)
	}
	if err := s.PutLaunch("z-last", "k", json.RawMessage(`{"v":1}`)); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	if string(s.Launch("z-last", "k")) != `{"v":1}` {
		t.Fatal("record written after recovery not found")
	}
}
