package replica

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"
)

// ForwardHeader is the header of a request one replica forwards to
// another: SignForward's value.
const ForwardHeader = "Mcpvisor-Forwarded"

// ForwardLifetime is how long a sender makes a forwarding header valid:
// its Expires is now plus this.
const ForwardLifetime = 30 * time.Second

// MaxForwardAhead is how far ahead of the receiver's clock a header may
// expire: a header that would live longer is refused, so that a sender's
// bad clock or bug does not make a capture replayable for long.
const MaxForwardAhead = 5 * time.Minute

// Forwarded is what a forwarding replica says of a request.
type Forwarded struct {
	From, To      int             // ordinals
	ToIncarnation string          // the incarnation the sender expects the owner to have ("" = any)
	ConfigVersion string          // the sender's config version (a digest); the receiver compares
	Identity      json.RawMessage `json:",omitempty"` // the verified identity (JSON), or absent
	Method, Path  string          // the HTTP method and URL path forwarded: bound into the signature, so a header captured for one request does not serve another path
	Expires       time.Time       // short: the sender sets now+ForwardLifetime
}

// forwardMACLen is the length of a header's mac: 32 bytes, base64 raw URL.
const forwardMACLen = 43

// forwardVersion is the first byte of a header's payload.
const forwardVersion = 2

// SignForward returns f as a header value, signed with the signing key:
// base64url(payload) + "." + base64url(HMAC-SHA256(signing key,
// "mcpvisor forward v2\x00" + the first part)), unpadded. The payload is
// a version byte, then the ordinals as uvarints, the strings (the
// incarnation, the config version, the method, the path, the identity's
// JSON) each as a uvarint length and its bytes, and Expires in Unix
// nanoseconds as a varint: a forward is signed and verified on every
// hop, and a binary payload costs a fraction of JSON's reflection. An
// Identity that is not JSON gives "", which VerifyForward refuses.
func (k *Keys) SignForward(f Forwarded) string {
	if len(f.Identity) > 0 && !json.Valid(f.Identity) {
		return ""
	}
	b := make([]byte, 0, 64+len(f.ToIncarnation)+len(f.ConfigVersion)+len(f.Path)+len(f.Identity))
	b = append(b, forwardVersion)
	b = binary.AppendUvarint(b, uint64(f.From))
	b = binary.AppendUvarint(b, uint64(f.To))
	for _, s := range []string{f.ToIncarnation, f.ConfigVersion, f.Method, f.Path} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(f.Identity)))
	b = append(b, f.Identity...)
	var exp int64 // none: 0
	if !f.Expires.IsZero() {
		exp = f.Expires.UnixNano()
	}
	b = binary.AppendVarint(b, exp)
	p := base64.RawURLEncoding.EncodeToString(b)
	return p + "." + k.forwardMAC(0, p)
}

// errForwardMalformed is a header that does not parse.
var errForwardMalformed = errors.New("forward header: malformed")

// decodeForward reads a payload SignForward wrote.
func decodeForward(b []byte) (Forwarded, error) {
	if len(b) == 0 || b[0] != forwardVersion {
		return Forwarded{}, errForwardMalformed
	}
	b = b[1:]
	num := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	str := func() ([]byte, bool) {
		n, ok := num()
		if !ok || n > uint64(len(b)) {
			return nil, false
		}
		s := b[:n]
		b = b[n:]
		return s, true
	}
	var f Forwarded
	from, ok1 := num()
	to, ok2 := num()
	if !ok1 || !ok2 || from > MaxOrdinal || to > MaxOrdinal {
		return Forwarded{}, errForwardMalformed
	}
	f.From, f.To = int(from), int(to)
	var fields [5][]byte
	for i := range fields {
		var ok bool
		if fields[i], ok = str(); !ok {
			return Forwarded{}, errForwardMalformed
		}
	}
	f.ToIncarnation, f.ConfigVersion, f.Method, f.Path = string(fields[0]), string(fields[1]), string(fields[2]), string(fields[3])
	if len(fields[4]) > 0 {
		if !json.Valid(fields[4]) {
			return Forwarded{}, fmt.Errorf("%w: the identity is not JSON", errForwardMalformed)
		}
		f.Identity = json.RawMessage(fields[4])
	}
	exp, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return Forwarded{}, errForwardMalformed
	}
	if exp != 0 {
		f.Expires = time.Unix(0, exp)
	}
	return f, nil
}

// forwardMAC is the mac of payload under the i-th key, with a keyed
// HMAC reused from the key's pool rather than made per header.
func (k *Keys) forwardMAC(i int, payload string) string {
	pool := &k.macs[i]
	m, _ := pool.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, k.keys[i])
	}
	m.Reset()
	io.WriteString(m, "mcpvisor forward v2\x00")
	io.WriteString(m, payload)
	var sum [sha256.Size]byte
	out := base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0]))
	pool.Put(m)
	return out
}

// VerifyForward parses v, a value of ForwardHeader, and verifies it
// with the accepted keys, at now. The error says which check failed:
// malformed, signature (no accepted key's), expired, or expiring too far
// ahead. The caller checks the rest against the request: Check.
func (k *Keys) VerifyForward(v string, now time.Time) (Forwarded, error) {
	p, mac, ok := strings.Cut(v, ".")
	if !ok || p == "" || len(mac) != forwardMACLen {
		return Forwarded{}, errForwardMalformed
	}
	signed := false
	for i := range k.keys {
		// Compared as text: one spelling of a mac is accepted.
		if subtle.ConstantTimeCompare([]byte(k.forwardMAC(i, p)), []byte(mac)) == 1 {
			signed = true
			break
		}
	}
	if !signed {
		return Forwarded{}, errors.New("forward header: the signature matches no accepted key")
	}
	b, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return Forwarded{}, fmt.Errorf("%w: %w", errForwardMalformed, err)
	}
	f, err := decodeForward(b)
	if err != nil {
		return Forwarded{}, err
	}
	switch {
	case f.Expires.IsZero():
		return Forwarded{}, fmt.Errorf("%w: no expiry", errForwardMalformed)
	case !now.Before(f.Expires):
		return Forwarded{}, fmt.Errorf("forward header: expired %s ago", now.Sub(f.Expires))
	case f.Expires.Sub(now) > MaxForwardAhead:
		return Forwarded{}, fmt.Errorf("forward header: expires %s ahead, more than %s", f.Expires.Sub(now), MaxForwardAhead)
	}
	return f, nil
}

// Check says whether f, verified, was made for this request to this
// replica: the method and path it forwarded, self's ordinal as the To,
// and self's incarnation if it names one.
func (f Forwarded) Check(method, path string, self Owner) error {
	switch {
	case f.Method != method || f.Path != path:
		return fmt.Errorf("forward header: made for %s %s, not %s %s", f.Method, f.Path, method, path)
	case f.To != self.Ordinal:
		return fmt.Errorf("forward header: made for replica %d, not %d", f.To, self.Ordinal)
	case f.ToIncarnation != "" && f.ToIncarnation != self.Incarnation:
		return fmt.Errorf("forward header: made for incarnation %s of replica %d, which is now %s", f.ToIncarnation, f.To, self.Incarnation)
	}
	return nil
}
