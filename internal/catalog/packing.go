package catalog

import "crypto/sha256"

// The small types below keep what a catalog holds of a dormant server in
// a few words: a learned server that sleeps keeps its sets of kinds in
// bytes, its change counts in 16 bits, and one launch hash however many
// of its lists and its initialize result are on disk under it. The
// catalog's own structs read as plain fields of these types.

// kindSet is a set of list kinds, in a byte: bit i stands for allKinds[i].
// The zero value is the empty set.
type kindSet uint8

// setOf is the set of kinds.
func setOf(kinds ...ListKind) kindSet {
	var set kindSet
	for _, k := range kinds {
		set |= 1 << kindIndex(k)
	}
	return set
}

// has reports whether k is in the set.
func (set kindSet) has(k ListKind) bool { return set&(1<<kindIndex(k)) != 0 }

// kinds lists the set's kinds in the order of allKinds.
func (set kindSet) kinds() []ListKind {
	var out []ListKind
	for i, k := range allKinds {
		if set&(1<<i) != 0 {
			out = append(out, k)
		}
	}
	return out
}

// kindIndex is k's place in allKinds; it panics for a kind that is not
// one of them.
func kindIndex(k ListKind) int {
	for i, a := range allKinds {
		if a == k {
			return i
		}
	}
	panic("catalog: unknown list kind " + k.Member)
}

// capSet is a set of capabilities, in a byte: bit i stands for
// capabilityNames[i]. The zero value is the empty set.
type capSet uint8

// has reports whether the capability named name is in the set; false for
// a name not in capabilityNames.
func (set capSet) has(name string) bool {
	for i, cp := range capabilityNames {
		if cp == name {
			return set&(1<<i) != 0
		}
	}
	return false
}

// with is the set with the capability at capabilityNames[i] added.
func (set capSet) with(i int) capSet { return set | 1<<i }

// version is a protocol version, in a byte: an index into knownVersions
// plus one. 0 is none, or a version not in that table (whose initialize
// result then stays in memory: see lists.initFrom).
type version uint8

// knownVersions are the protocol versions a version keeps in a byte.
var knownVersions = [...]string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// versionOf is v as a version; 0 if it is not in knownVersions.
func versionOf(v string) version {
	for i, k := range knownVersions {
		if v == k {
			return version(i + 1)
		}
	}
	return 0
}

// String is the version's name; "" for 0.
func (v version) String() string {
	if v == 0 {
		return ""
	}
	return knownVersions[v-1]
}

// change numbers the changes of one thing a catalog writes to disk, in 16
// bits that wrap around: a write takes the number when it begins, and
// marks the thing written when it ends only if the number is still the
// same (nothing changed meanwhile). Wrapping makes a write that began
// exactly 65,536 changes earlier look current; the writes it guards are
// each a few milliseconds, and no server changes a list that often in
// that time. The zero value is the first number.
type change uint16

// next counts one more change and returns its number.
func (c *change) next() change {
	*c++
	return *c
}

// launchRef is the launch hash a catalog's disk copy is under, shared:
// the lists and the initialize result on disk under the same hash hold
// the same pointer, so a dormant server keeps one hash, not one per use.
// nil is none.
type launchRef = *[sha256.Size]byte

// sameLaunch reports whether ref is the launch hash h.
func sameLaunch(ref launchRef, h [sha256.Size]byte) bool { return ref != nil && *ref == h }
