package replica

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Owner is the replica that owns an id: its ordinal, and its
// incarnation, which tells a restarted replica (whose sessions died
// with the process before) from the one that issued the id.
type Owner struct {
	Ordinal     int
	Incarnation string // NewIncarnation()'s
}

// MaxOrdinal is the highest ordinal: OrdinalFromName and stamps take
// ordinals of at most four digits.
const MaxOrdinal = 9999

// maxIncarnation bounds an incarnation's length in a stamp.
const maxIncarnation = 64

// NewIncarnation returns a new incarnation: 12 random bytes in base32,
// lower case, without padding (20 characters of a–z and 2–7), safe in a
// header and in a stamp. A process makes one at every start.
func NewIncarnation() string {
	var b [12]byte
	rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Valid says why o cannot be stamped, if it cannot: its ordinal must be
// in 0..MaxOrdinal, and its incarnation 1 to 64 characters of
// A–Z, a–z, 0–9, "-" and "_" (NewIncarnation's are).
func (o Owner) Valid() error {
	if o.Ordinal < 0 || o.Ordinal > MaxOrdinal {
		return fmt.Errorf("owner: ordinal %d is not in 0..%d", o.Ordinal, MaxOrdinal)
	}
	if !validIncarnation(o.Incarnation) {
		return fmt.Errorf("owner: incarnation %q is not 1 to %d letters, digits, - or _", o.Incarnation, maxIncarnation)
	}
	return nil
}

func validIncarnation(s string) bool {
	if len(s) == 0 || len(s) > maxIncarnation {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// StampPrefix starts every stamped id. The "1" is the scheme's version.
const StampPrefix = "mcpv-o1."

// HasStamp reports whether s starts as a stamp does: a cheap test,
// which verifies nothing.
func HasStamp(s string) bool { return strings.HasPrefix(s, StampPrefix) }

// stampInvalid stands for the owner in a stamp of an invalid Owner.
const stampInvalid = "invalid"

// ownerMACLen is the length of a stamp's mac: 16 bytes, base64 raw URL.
const ownerMACLen = 22

// Stamp returns inner stamped with o, signed with the signing key:
//
//	"mcpv-o1." + ordinal + "." + incarnation + "." + mac + "." + inner
//
// where mac is HMAC-SHA256(signing key, "mcpvisor owner v1\x00" +
// ordinal + "\x00" + incarnation + "\x00" + inner), its first 16 bytes
// in base64 raw URL. The ordinal is in decimal.
//
// What Stamp adds to inner is visible ASCII without spaces: the stamp
// is a legal header value and Mcp-Session-Id whenever inner is. Any
// inner may be stamped. An Owner that is not Valid is a caller's bug:
// its stamp is "mcpv-o1.invalid." + inner, which Unstamp refuses.
func (k *Keys) Stamp(o Owner, inner string) string {
	if o.Valid() != nil {
		return StampPrefix + stampInvalid + "." + inner
	}
	ord := strconv.Itoa(o.Ordinal)
	return StampPrefix + ord + "." + o.Incarnation + "." + ownerMAC(k.keys[0], ord, o.Incarnation, inner) + "." + inner
}

func ownerMAC(key []byte, ord, inc, inner string) string {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, "mcpvisor owner v1\x00")
	io.WriteString(m, ord)
	m.Write([]byte{0})
	io.WriteString(m, inc)
	m.Write([]byte{0})
	io.WriteString(m, inner)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// Unstamp parses and verifies s, a stamp of Stamp's.
//
// An s without StampPrefix is not stamped: ok is false and err nil (an
// id of a single-replica mcpvisor, or of someone else; its caller
// serves it itself). An s with the prefix is verified: ok is true and
// err nil when its mac is that of an accepted key; otherwise err says
// what is wrong — malformed, or a mac of no accepted key (forged, or
// stamped with a key no longer accepted) — and ok is false. A stamp
// verifies only as Stamp wrote it: each part has one spelling.
func (k *Keys) Unstamp(s string) (o Owner, inner string, ok bool, err error) {
	rest, stamped := strings.CutPrefix(s, StampPrefix)
	if !stamped {
		return Owner{}, "", false, nil
	}
	ord, rest, ok1 := strings.Cut(rest, ".")
	if ord == stampInvalid {
		return Owner{}, "", false, errors.New("owner stamp: stamped for an invalid owner")
	}
	inc, rest, ok2 := strings.Cut(rest, ".")
	mac, inner, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return Owner{}, "", false, errors.New("owner stamp: malformed: fewer than four parts")
	}
	n, good := parseOrdinal(ord)
	if !good {
		return Owner{}, "", false, errors.New("owner stamp: malformed: the ordinal is not a number in 0..9999")
	}
	if !validIncarnation(inc) {
		return Owner{}, "", false, errors.New("owner stamp: malformed incarnation")
	}
	if len(mac) != ownerMACLen {
		return Owner{}, "", false, errors.New("owner stamp: malformed mac")
	}
	// Compared as text: two spellings of the same bytes (base64's unused
	// low bits) are not both accepted.
	for _, key := range k.keys {
		if subtle.ConstantTimeCompare([]byte(ownerMAC(key, ord, inc, inner)), []byte(mac)) == 1 {
			return Owner{Ordinal: n, Incarnation: inc}, inner, true, nil
		}
	}
	return Owner{}, "", false, errors.New("owner stamp: the mac matches no accepted key")
}

// parseOrdinal parses an ordinal as it is written: decimal digits, no
// sign, no leading zeros but "0" itself, at most MaxOrdinal.
func parseOrdinal(s string) (int, bool) {
	if len(s) == 0 || len(s) > len(strconv.Itoa(MaxOrdinal)) || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= MaxOrdinal
}
