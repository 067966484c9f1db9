package replica

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
)

func TestOwnerOfEdges(t *testing.T) {
	for _, n := range []int{0, -1, -100} {
		if got := OwnerOf("a", n); got != -1 {
			t.Errorf("OwnerOf(a, %d) = %d", n, got)
		}
	}
	for _, name := range []string{"", "a", "github"} {
		if got := OwnerOf(name, 1); got != 0 {
			t.Errorf("OwnerOf(%q, 1) = %d", name, got)
		}
	}
}

// The owner is the ordinal of the highest weight, the weight the first
// 8 bytes of SHA-256(name NUL ordinal), big-endian: computed here
// without OwnerOf, and pinned, so that a change of the hash (which
// would move servers between replicas of different versions) fails.
func TestOwnerOfIsSpecified(t *testing.T) {
	for i := range 500 {
		name := fmt.Sprintf("server-%d", i)
		for count := 1; count <= 6; count++ {
			best, bestW := 0, uint64(0)
			for o := range count {
				sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", name, o)))
				if w := binary.BigEndian.Uint64(sum[:8]); o == 0 || w > bestW {
					best, bestW = o, w
				}
			}
			if got := OwnerOf(name, count); got != best {
				t.Fatalf("OwnerOf(%q, %d) = %d, want %d", name, count, got, best)
			}
		}
	}
	for _, c := range []struct {
		name  string
		count int
		want  int
	}{
		{"redis", 3, 0},
		{"github", 3, 1},
		{"sqlite", 3, 2},
		{"linear", 5, 4},
		{"fetch", 5, 3},
	} {
		if got := OwnerOf(c.name, c.count); got != c.want {
			t.Errorf("OwnerOf(%q, %d) = %d, pinned %d", c.name, c.count, got, c.want)
		}
	}
}

// Growing from n replicas to n+1 moves only the names ordinal n now
// owns; shrinking moves only the names the removed ordinal owned.
func TestOwnerOfMovesLittle(t *testing.T) {
	for i := range 2000 {
		name := fmt.Sprintf("srv/%d", i)
		prev := OwnerOf(name, 1)
		for n := 1; n < 8; n++ {
			next := OwnerOf(name, n+1)
			if next != prev && next != n {
				t.Fatalf("%q: owner %d of %d, %d of %d", name, prev, n, next, n+1)
			}
			prev = next
		}
	}
}

func TestOwnerOfSpreads(t *testing.T) {
	var counts [3]int
	for i := range 3000 {
		counts[OwnerOf(fmt.Sprintf("mcp-server-%d", i), 3)]++
	}
	for o, c := range counts {
		if c < 750 || c > 1250 {
			t.Errorf("ordinal %d owns %d of 3000: %v", o, c, counts)
		}
	}
}
