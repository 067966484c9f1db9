package event

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/store"
)

// TestStoredEventsDecode: events persisted before the kinds were typed
// (details written from maps: testdata/stored-v0.jsonl, one of each
// kind) are read back from a store, and their details decode into their
// kind's type, no key unknown, and encode again as they were stored.
func TestStoredEventsDecode(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "stored-v0.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stored []store.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e store.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", sc.Bytes(), err)
		}
		stored = append(stored, e)
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.AppendEvents(stored); err != nil {
		t.Fatal(err)
	}
	back := st.Events(time.Time{}, 0)
	if len(back) != len(stored) {
		t.Fatalf("read back %d events, stored %d", len(back), len(stored))
	}
	kinds := map[Kind]bool{}
	for _, e := range back {
		k := Kind(e.Type)
		kinds[k] = true
		if !slices.Contains(Kinds(), k) {
			t.Errorf("stored event of kind %q, which Kinds does not list", k)
			continue
		}
		p := reflect.New(detailsOf(t, k))
		dec := json.NewDecoder(bytes.NewReader(e.Details))
		dec.DisallowUnknownFields()
		if err := dec.Decode(p.Interface()); err != nil {
			t.Errorf("%s: details %s: %v", k, e.Details, err)
			continue
		}
		again, err := json.Marshal(Fields(p.Elem().Interface().(Details)))
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(t, again, e.Details) {
			t.Errorf("%s: details %s encode again as %s", k, e.Details, again)
		}
	}
	for _, k := range Kinds() {
		if !kinds[k] {
			t.Errorf("testdata/stored-v0.jsonl has no event of kind %q", k)
		}
	}
}
