package catalog

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"testing"
	"unsafe"
)

// A kindSet holds any set of the four kinds in a byte, and lists them in
// allKinds' order whatever order they were added in.
func TestKindSet(t *testing.T) {
	if unsafe.Sizeof(kindSet(0)) != 1 {
		t.Fatalf("a kindSet takes %d bytes, want 1", unsafe.Sizeof(kindSet(0)))
	}
	var empty kindSet
	for _, k := range allKinds {
		if empty.has(k) {
			t.Fatalf("the empty set has %s", k.Member)
		}
	}
	set := setOf(Templates, Tools)
	if !set.has(Tools) || !set.has(Templates) || set.has(Prompts) || set.has(Resources) {
		t.Fatalf("setOf(templates, tools) = %08b", set)
	}
	if got := set.kinds(); !slices.Equal(got, []ListKind{Tools, Templates}) {
		t.Fatalf("kinds = %v, want tools then templates", got)
	}
	set &^= setOf(Tools)
	if set.has(Tools) || !set.has(Templates) {
		t.Fatalf("without tools: %08b", set)
	}
	if all := setOf(allKinds...); !slices.Equal(all.kinds(), allKinds) {
		t.Fatalf("every kind: %v", all.kinds())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a kind not in allKinds was taken")
		}
	}()
	setOf(ListKind{"x/list", "x", "x"})
}

// A capSet knows the capabilities that announce list changes, and no
// other.
func TestCapSet(t *testing.T) {
	var set capSet
	for i, name := range capabilityNames {
		if set.has(name) {
			t.Fatalf("the empty set has %s", name)
		}
		set = set.with(i)
		if !set.has(name) {
			t.Fatalf("%s added, not there", name)
		}
	}
	if set.has("logging") {
		t.Fatal("a capability not in capabilityNames is in the set")
	}
}

// A version keeps each known protocol version in a byte and gives it
// back; an unknown one is 0, which names none.
func TestVersion(t *testing.T) {
	for _, v := range knownVersions {
		if got := versionOf(v); got == 0 || got.String() != v {
			t.Fatalf("%s kept as %d, read back as %q", v, got, got.String())
		}
	}
	if v := versionOf("2099-01-01"); v != 0 || v.String() != "" {
		t.Fatalf("an unknown version kept as %d (%q)", v, v.String())
	}
}

// A change number wraps around at 16 bits: a write that took the number
// before the wrap no longer matches after one more change, and the number
// after the wrap is 0.
func TestChangeWrapsAround(t *testing.T) {
	var c change
	if got := c.next(); got != 1 {
		t.Fatalf("the first change is %d, want 1", got)
	}
	c = 0xffff
	taken := c // a write begins at the last number before the wrap
	if got := c.next(); got != 0 {
		t.Fatalf("after 0xffff: %d, want 0", got)
	}
	if c == taken {
		t.Fatal("a change after the write began is taken for the one written")
	}
}

// Across the wrap, a list persisted at the number its change left stays
// written; one that changed again after the write began stays stale.
func TestPersistedAcrossTheWrap(t *testing.T) {
	var l lists
	i := kindIndex(Tools)
	l.seq[i] = 0xfffe
	items := []json.RawMessage{json.RawMessage(`{"name":"a"}`)}
	seq := l.setLocked(Tools, items, true) // 0xffff
	if seq != 0xffff || !l.stale.has(Tools) {
		t.Fatalf("a change: number %#x, stale %v", seq, l.stale.has(Tools))
	}
	l.persisted(Tools, seq)
	if l.stale.has(Tools) {
		t.Fatal("written at its number, the list is still stale")
	}
	seq = l.setLocked(Tools, items, true) // wraps to 0
	if seq != 0 {
		t.Fatalf("the change after 0xffff is %#x, want 0", seq)
	}
	newer := l.setLocked(Tools, items, true) // 1: changed while 0 is written
	l.persisted(Tools, seq)
	if !l.stale.has(Tools) {
		t.Fatal("a write begun before the wrap's next change marked the newer one written")
	}
	l.persisted(Tools, newer)
	if l.stale.has(Tools) {
		t.Fatal("the newest change written, the list is still stale")
	}
}

// The initialize result and the lists on disk under one launch hash share
// one copy of it; sameLaunch compares by value, and nil is no launch.
func TestLaunchRefIsShared(t *testing.T) {
	var h [sha256.Size]byte
	h[0] = 1
	if sameLaunch(nil, h) {
		t.Fatal("nil is the launch")
	}
	var l lists
	l.coldFrom(nil, h)
	l.initFrom(json.RawMessage(`{"protocolVersion":"2025-11-25"}`), h)
	if l.initHash != l.coldHash || !sameLaunch(l.initHash, h) {
		t.Fatal("the result on disk under the lists' hash keeps a copy of its own")
	}
	other := h
	other[0] = 2
	if sameLaunch(l.coldHash, other) {
		t.Fatal("another launch's hash matches")
	}
}
