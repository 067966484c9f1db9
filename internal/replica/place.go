package replica

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
)

// OwnerOf returns the ordinal, in 0..count-1, that owns the server
// name among count replicas, by rendezvous (highest random weight)
// hashing: each ordinal weighs the first 8 bytes, big-endian, of
// SHA-256(name + "\x00" + ordinal in decimal), and the heaviest owns
// the name (the lowest ordinal of equals). Every process, on every
// architecture, computes the same owner; going from n replicas to n+1
// moves only the names that ordinal n now owns. A count <= 0 owns
// nothing: -1.
func OwnerOf(name string, count int) int {
	if count <= 0 {
		return -1
	}
	best, bestW := -1, uint64(0)
	buf := make([]byte, 0, len(name)+1+len("9999"))
	for i := range count {
		buf = append(buf[:0], name...)
		buf = append(buf, 0)
		buf = strconv.AppendInt(buf, int64(i), 10)
		sum := sha256.Sum256(buf)
		if w := binary.BigEndian.Uint64(sum[:8]); best < 0 || w > bestW {
			best, bestW = i, w
		}
	}
	return best
}
