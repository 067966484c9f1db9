package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func open(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func raws(ss ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(s)
	}
	return out
}

// sameLists compares byte for byte, telling a fetched empty list from an
// absent one.
func sameLists(t *testing.T, got, want Lists) {
	t.Helper()
	if !bytes.Equal(got.Init, want.Init) || (got.Init == nil) != (want.Init == nil) {
		t.Errorf("Init = %q, want %q", got.Init, want.Init)
	}
	for _, k := range kinds {
		g, gok := got.Get(k)
		w, wok := want.Get(k)
		if gok != wok {
			t.Errorf("%s present = %v, want %v", k, gok, wok)
			continue
		}
		if len(g) != len(w) {
			t.Errorf("%s: %d items, want %d", k, len(g), len(w))
			continue
		}
		for i := range g {
			if !bytes.Equal(g[i], w[i]) {
				t.Errorf("%s[%d] = %q, want %q", k, i, g[i], w[i])
			}
		}
	}
	if len(got.Items) != len(want.Items) {
		t.Errorf("kinds %v, want %v", slices.Sorted(mapKeys(got.Items)), slices.Sorted(mapKeys(want.Items)))
	}
	if !want.Fetched.IsZero() && !got.Fetched.Equal(want.Fetched) {
		t.Errorf("Fetched = %v, want %v", got.Fetched, want.Fetched)
	}
}

func mapKeys(m map[Kind][]json.RawMessage) func(func(Kind) bool) {
	return func(yield func(Kind) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Items as servers send them: unknown fields, member order, whitespace,
// escapes and literal non-ASCII text must all come back unchanged.
var sample = Lists{
	Init: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"x-future":{"a":[1,2.50,1e3]}},` +
		`"serverInfo":{"name":"ünïcode-sérver","version":"1.0"},"instructions":"Use <b>&</b> \u00e9 é 日本語 🚀\n"}`),
	Items: map[Kind][]json.RawMessage{
		Tools: raws(
			`{"name":"echo","description":"Échos — \"quoted\" \u2028 日本","inputSchema":{"type":"object"},"x-unknown":{"nested":[true,null]}}`,
			"{ \"name\" : \"spaced\",\n\t\"inputSchema\": {\"type\":\"object\"} }",
			`{"inputSchema":{"type":"object"},"name":"order-kept","annotations":{"readOnlyHint":true}}`,
		),
		Prompts:           raws(`{"name":"p1","arguments":[{"name":"a","required":true}]}`),
		Resources:         raws(`{"uri":"file:///ë.txt","name":"ë"}`, `{"uri":"mem://x","name":"x","size":12345678901234567890}`),
		ResourceTemplates: raws(`{"uriTemplate":"file:///{path}","name":"files"}`),
	},
	Fetched: time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.UTC),
}

func TestRoundTripByteExact(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "state.db")
	s := open(t, path, Options{})
	if err := s.PutLists("everything", "h1", sample); err != nil {
		t.Fatal(err)
	}
	got, ok := s.Lists("everything", "h1")
	if !ok {
		t.Fatal("Lists: not found after PutLists")
	}
	sameLists(t, got, sample)

	// Returned slices are copies: writing to them does not change the store.
	got.Items[Tools][0][0] = 'X'
	again, _ := s.Lists("everything", "h1")
	sameLists(t, again, sample)

	for name, want := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
}

func TestFetchedDefaultsToNow(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	before := time.Now()
	if err := s.PutLists("a", "h", Lists{Items: map[Kind][]json.RawMessage{Tools: nil}}); err != nil {
		t.Fatal(err)
	}
	l, ok := s.Lists("a", "h")
	if !ok || l.Fetched.Before(before.Truncate(time.Nanosecond)) || l.Fetched.After(time.Now()) {
		t.Fatalf("Fetched = %v (ok %v), want between %v and now", l.Fetched, ok, before)
	}
}

func TestHashMismatchNotFound(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	if err := s.PutLists("a", "h1", sample); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lists("a", "h2"); ok {
		t.Error("Lists with another hash: found")
	}
	if _, ok := s.Lists("b", "h1"); ok {
		t.Error("Lists of another server: found")
	}
	if got := s.Load(map[string]string{"a": "h2"}); len(got) != 0 {
		t.Errorf("Load with another hash = %v", got)
	}
	// The mismatching lookup did not remove anything.
	if _, ok := s.Lists("a", "h1"); !ok {
		t.Error("entry gone after a mismatching lookup")
	}
}

func TestNewHashReplaces(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	if err := s.PutLists("a", "h1", sample); err != nil {
		t.Fatal(err)
	}
	fresh := Lists{Items: map[Kind][]json.RawMessage{Tools: raws(`{"name":"new"}`)}}
	if err := s.PutLists("a", "h2", fresh); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lists("a", "h1"); ok {
		t.Error("old hash still found")
	}
	got, ok := s.Lists("a", "h2")
	if !ok {
		t.Fatal("new hash not found")
	}
	sameLists(t, got, fresh) // no Init, no prompts/resources left from h1

	// PutList under a third hash: the entry holds that one list only.
	if err := s.PutList("a", "h3", Prompts, raws(`{"name":"p"}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lists("a", "h2"); ok {
		t.Error("h2 still found after PutList with h3")
	}
	got, _ = s.Lists("a", "h3")
	sameLists(t, got, Lists{Items: map[Kind][]json.RawMessage{Prompts: raws(`{"name":"p"}`)}})

	// PutInit likewise.
	if err := s.PutInit("a", "h4", json.RawMessage(`{"serverInfo":{}}`)); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Lists("a", "h4")
	sameLists(t, got, Lists{Init: json.RawMessage(`{"serverInfo":{}}`), Items: map[Kind][]json.RawMessage{}})
	if names := s.Servers(); !slices.Equal(names, []string{"a"}) {
		t.Errorf("Servers = %v", names)
	}
}

func TestPutListUpdatesOneKind(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	if err := s.PutLists("a", "h", sample); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	newTools := raws(`{"name":"only"}`, `{"name":"two","x":"ÿ"}`)
	if err := s.PutList("a", "h", Tools, newTools); err != nil {
		t.Fatal(err)
	}
	want := Lists{Init: sample.Init, Items: map[Kind][]json.RawMessage{}}
	for k, v := range sample.Items {
		want.Items[k] = v
	}
	want.Items[Tools] = newTools
	got, ok := s.Lists("a", "h")
	if !ok {
		t.Fatal("not found")
	}
	sameLists(t, got, want)
	if got.Fetched.Before(before) {
		t.Errorf("Fetched %v not updated by PutList (before %v)", got.Fetched, before)
	}

	// A shorter list leaves no items of the longer one behind.
	if err := s.PutList("a", "h", Resources, raws(`{"uri":"a:"}`)); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Lists("a", "h")
	if r, _ := got.Get(Resources); len(r) != 1 || string(r[0]) != `{"uri":"a:"}` {
		t.Errorf("resources = %q", r)
	}
	if err := s.PutInit("a", "h", json.RawMessage(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Lists("a", "h")
	if string(got.Init) != `{"v":2}` || len(got.Items[Tools]) != 2 {
		t.Errorf("after PutInit: init %q, tools %d", got.Init, len(got.Items[Tools]))
	}
	if err := s.PutList("a", "h", Kind("bogus"), nil); err == nil {
		t.Error("PutList with an unknown kind: no error")
	}
	if err := s.PutLists("a", "h", Lists{Items: map[Kind][]json.RawMessage{"tool": nil}}); err == nil {
		t.Error("PutLists with an unknown kind: no error")
	}
	for _, c := range [][2]string{{"", "h"}, {"a", ""}} {
		if err := s.PutList(c[0], c[1], Tools, nil); err == nil {
			t.Errorf("PutList(%q, %q): no error", c[0], c[1])
		}
	}
}

func TestEmptyVersusAbsent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	l := Lists{Items: map[Kind][]json.RawMessage{
		Tools:   {},  // fetched, empty
		Prompts: nil, // fetched, empty (nil slice, key present)
	}}
	if err := s.PutLists("a", "h", l); err != nil {
		t.Fatal(err)
	}
	if err := s.PutList("b", "h", Resources, nil); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		got, ok := s.Lists("a", "h")
		if !ok {
			t.Fatal("a not found")
		}
		for k, want := range map[Kind]bool{Tools: true, Prompts: true, Resources: false, ResourceTemplates: false} {
			items, present := got.Get(k)
			if present != want || len(items) != 0 {
				t.Errorf("a %s: present %v (%d items), want present %v and empty", k, present, len(items), want)
			}
		}
		if got.Init != nil {
			t.Errorf("a Init = %q, want nil (never stored)", got.Init)
		}
		b, _ := s.Lists("b", "h")
		if _, ok := b.Get(Resources); !ok || len(b.Items) != 1 {
			t.Errorf("b kinds = %v, want resources only", b.Items)
		}
	}
	check(s)
	s.Close()
	check(open(t, path, Options{}))
}

func TestPrune(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	for _, n := range []string{"keep", "rehashed", "gone1", "gone2"} {
		if err := s.PutLists(n, "h1", sample); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Prune(map[string]string{"keep": "h1", "rehashed": "h2", "new": "h1"})
	if err != nil || n != 3 {
		t.Fatalf("Prune = %d, %v; want 3 removed", n, err)
	}
	if names := s.Servers(); !slices.Equal(names, []string{"keep"}) {
		t.Errorf("Servers after Prune = %v, want [keep]", names)
	}
	if _, ok := s.Lists("keep", "h1"); !ok {
		t.Error("kept entry lost")
	}
	if n, err := s.Prune(nil); err != nil || n != 1 || len(s.Servers()) != 0 {
		t.Errorf("Prune(nil) = %d, %v; servers %v", n, err, s.Servers())
	}
}

func TestForgetAndServers(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	for _, n := range []string{"b", "a", "c"} {
		if err := s.PutLists(n, "h", sample); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Servers(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Servers = %v", got)
	}
	if err := s.Forget("b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget("never"); err != nil {
		t.Errorf("Forget of an unknown server: %v", err)
	}
	if _, ok := s.Lists("b", "h"); ok {
		t.Error("forgotten entry found")
	}
	if got := s.Servers(); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("Servers = %v", got)
	}
}

func TestReopenPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	entries := make([]Entry, 50)
	want := map[string]string{}
	for i := range entries {
		name := fmt.Sprintf("srv-%02d", i)
		entries[i] = Entry{Server: name, Hash: "h" + name, Lists: sample}
		want[name] = "h" + name
	}
	if err := s.PutMany(entries); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(Event{Server: "srv-01", Type: "dormant", Details: json.RawMessage(`{"idle":180}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s2 := open(t, path, Options{})
	got := s2.Load(want)
	if len(got) != len(entries) {
		t.Fatalf("Load after reopen: %d entries, want %d", len(got), len(entries))
	}
	for name, l := range got {
		t.Run(name, func(t *testing.T) { sameLists(t, l, sample) })
	}
	if ev := s2.Events(time.Time{}, 0); len(ev) != 1 || ev[0].Type != "dormant" || string(ev[0].Details) != `{"idle":180}` {
		t.Errorf("events after reopen = %+v", ev)
	}
	// Load filters by hash and by the names asked for.
	part := s2.Load(map[string]string{"srv-00": "hsrv-00", "srv-01": "stale", "other": "x"})
	if len(part) != 1 || part["srv-00"].Items == nil {
		t.Errorf("partial Load = %v", part)
	}
}

func TestNilStore(t *testing.T) {
	var s *Store
	if _, ok := s.Lists("a", "h"); ok {
		t.Error("nil Lists found something")
	}
	for name, err := range map[string]error{
		"PutLists": s.PutLists("a", "h", sample),
		"PutMany":  s.PutMany([]Entry{{Server: "a", Hash: "h"}}),
		"PutList":  s.PutList("a", "h", Tools, nil),
		"PutInit":  s.PutInit("a", "h", nil),
		"Forget":   s.Forget("a"),
		"Append":   s.AppendEvent(Event{Type: "x"}),
		"Close":    s.Close(),
	} {
		if err != nil {
			t.Errorf("nil %s: %v", name, err)
		}
	}
	if n, err := s.Prune(nil); n != 0 || err != nil {
		t.Errorf("nil Prune = %d, %v", n, err)
	}
	if s.Servers() != nil || s.Events(time.Time{}, 0) != nil || len(s.Load(map[string]string{"a": "h"})) != 0 || s.Path() != "" {
		t.Error("nil store returned data")
	}
}

func TestClosedStore(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	if err := s.PutLists("a", "h", sample); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, ok := s.Lists("a", "h"); ok {
		t.Error("Lists after Close found")
	}
	if err := s.PutLists("a", "h", sample); !errors.Is(err, ErrClosed) {
		t.Errorf("PutLists after Close = %v, want ErrClosed", err)
	}
	if err := s.AppendEvent(Event{Type: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("AppendEvent after Close = %v, want ErrClosed", err)
	}
	if s.Servers() != nil || s.Events(time.Time{}, 0) != nil {
		t.Error("reads after Close returned data")
	}
}

func TestConcurrentReadersWriters(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{MaxEvents: 50})
	const servers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < servers; i++ {
		name := fmt.Sprintf("s%d", i)
		wg.Add(2)
		go func() { // writer
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				tools := raws(fmt.Sprintf(`{"name":"t","round":%d}`, r), fmt.Sprintf(`{"name":"u","round":%d}`, r))
				var err error
				switch r % 3 {
				case 0:
					err = s.PutLists(name, "h", Lists{Init: sample.Init, Items: map[Kind][]json.RawMessage{Tools: tools, Prompts: {}}})
				case 1:
					err = s.PutList(name, "h", Tools, tools)
				case 2:
					err = s.AppendEvent(Event{Server: name, Type: "ready", Details: json.RawMessage(fmt.Sprint(r))})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() { // reader
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				if l, ok := s.Lists(name, "h"); ok {
					tools, _ := l.Get(Tools)
					// Writers replace lists whole: a reader sees both items of one round.
					if len(tools) != 2 || !bytes.Equal(tools[0][len(`{"name":"t"`):], tools[1][len(`{"name":"u"`):]) {
						errs <- fmt.Errorf("torn read: %q", tools)
						return
					}
				}
				s.Load(map[string]string{name: "h", "s0": "h"})
				s.Servers()
				if ev := s.Events(time.Time{}, 10); len(ev) > 10 {
					errs <- fmt.Errorf("Events(limit 10) = %d", len(ev))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := s.Servers(); len(got) != servers {
		t.Errorf("Servers = %v", got)
	}
	if ev := s.Events(time.Time{}, 0); len(ev) != 50 {
		t.Errorf("events kept = %d, want 50", len(ev))
	}
}

func TestEventRing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{MaxEvents: 5})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= 7; i++ {
		if err := s.AppendEvent(Event{Time: t0.Add(time.Duration(i) * time.Second), Server: "a", Type: fmt.Sprint("e", i)}); err != nil {
			t.Fatal(err)
		}
	}
	batch := []Event{
		{Time: t0.Add(8 * time.Second), Server: "b", Type: "e8", Details: json.RawMessage("{ \"html\": \"<&>\", \"u\": \"é\\u00e9\" }")},
		{Time: t0.Add(9 * time.Second), Type: "e9"},
		{Time: t0.Add(10 * time.Second), Type: "e10"},
	}
	if err := s.AppendEvents(batch); err != nil {
		t.Fatal(err)
	}
	types := func(ev []Event) (out []string) {
		for _, e := range ev {
			out = append(out, e.Type)
		}
		return out
	}
	all := s.Events(time.Time{}, 0)
	if got := types(all); !slices.Equal(got, []string{"e6", "e7", "e8", "e9", "e10"}) {
		t.Fatalf("ring = %v, want the last 5", got)
	}
	for i, e := range all {
		if e.Seq != uint64(6+i) || !e.Time.Equal(t0.Add(time.Duration(6+i)*time.Second)) {
			t.Errorf("event %d: seq %d time %v", i, e.Seq, e.Time)
		}
	}
	if !bytes.Equal(all[2].Details, batch[0].Details) || all[2].Server != "b" {
		t.Errorf("details %q server %q, want byte-exact %q", all[2].Details, all[2].Server, batch[0].Details)
	}
	if got := types(s.Events(time.Time{}, 2)); !slices.Equal(got, []string{"e9", "e10"}) {
		t.Errorf("limit 2 = %v", got)
	}
	if got := types(s.Events(t0.Add(8*time.Second), 0)); !slices.Equal(got, []string{"e8", "e9", "e10"}) {
		t.Errorf("since e8 = %v", got)
	}
	if err := s.AppendEvent(Event{Type: "bad", Details: json.RawMessage(`{`)}); err == nil {
		t.Error("invalid details: no error")
	}

	// Sequence numbers keep increasing across a reopen; a smaller bound
	// applies at the next append.
	s.Close()
	s = open(t, path, Options{MaxEvents: 3})
	before := time.Now()
	if err := s.AppendEvent(Event{Type: "e11"}); err != nil {
		t.Fatal(err)
	}
	all = s.Events(time.Time{}, 0)
	if got := types(all); !slices.Equal(got, []string{"e9", "e10", "e11"}) || all[2].Seq != 11 {
		t.Errorf("after reopen: %v (last seq %d)", got, all[len(all)-1].Seq)
	}
	if all[2].Time.Before(before) {
		t.Errorf("default event time %v is before %v", all[2].Time, before)
	}

	// The default bound.
	s.Close()
	s = open(t, path, Options{})
	evs := make([]Event, 1500)
	for i := range evs {
		evs[i] = Event{Type: "bulk"}
	}
	if err := s.AppendEvents(evs); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Events(time.Time{}, 0)); n != DefaultMaxEvents {
		t.Errorf("kept %d events, want %d", n, DefaultMaxEvents)
	}
}

func TestLockedInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	if err := s.PutLists("a", "h", sample); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s2, err := Open(path, Options{LockTimeout: 300 * time.Millisecond})
	elapsed := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a held state file succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	want := fmt.Sprintf("state file %s is in use by another mcpvisor (pid %d)", path, os.Getpid())
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if elapsed < 250*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("second Open returned after %v, want about the 300ms timeout", elapsed)
	}
	// The held file was left alone and still works.
	assertNoCorruptFiles(t, path)
	if _, ok := s.Lists("a", "h"); !ok {
		t.Error("first store lost its entry")
	}
	s.Close()
	s3 := open(t, path, Options{LockTimeout: 300 * time.Millisecond})
	if _, ok := s3.Lists("a", "h"); !ok {
		t.Error("entry not found after the lock was released")
	}
}

func TestLockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	child, stdin, pid := startHolder(t, path)
	start := time.Now()
	s, err := Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("Open of a state file held by another process succeeded")
	}
	want := fmt.Sprintf("in use by another mcpvisor (pid %d)", pid)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) {
		t.Errorf("Open: %v, want ErrLocked naming %q", err, want)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Open took %v", el)
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	s = open(t, path, Options{})
	if err := s.PutLists("a", "h", sample); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsDefaults(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	want := Options{LockTimeout: DefaultLockTimeout, MaxEvents: DefaultMaxEvents}
	got := s.opts
	got.Logger = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("opts = %+v, want %+v", got, want)
	}
}
