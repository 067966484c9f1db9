package replica

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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

// SignForward returns f as a header value, signed with the signing key:
// base64url(JSON of f) + "." + base64url(HMAC-SHA256(signing key,
// "mcpvisor forward v1\x00" + the first part)), unpadded. Identity is
// written compacted. An Identity that is not JSON gives "", which
// VerifyForward refuses.
func (k *Keys) SignForward(f Forwarded) string {
	b, err := json.Marshal(f)
	if err != nil {
		return ""
	}
	p := base64.RawURLEncoding.EncodeToString(b)
	return p + "." + forwardMAC(k.keys[0], p)
}

func forwardMAC(key []byte, payload string) string {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, "mcpvisor forward v1\x00")
	io.WriteString(m, payload)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// VerifyForward parses v, a value of ForwardHeader, and verifies it
// with the accepted keys, at now. The error says which check failed:
// malformed, signature (no accepted key's), expired, or expiring too far
// ahead. The caller checks the rest against the request: Check.
func (k *Keys) VerifyForward(v string, now time.Time) (Forwarded, error) {
	p, mac, ok := strings.Cut(v, ".")
	if !ok || p == "" || len(mac) != forwardMACLen {
		return Forwarded{}, errors.New("forward header: malformed")
	}
	signed := false
	for _, key := range k.keys {
		// Compared as text: one spelling of a mac is accepted.
		if subtle.ConstantTimeCompare([]byte(forwardMAC(key, p)), []byte(mac)) == 1 {
			signed = true
			break
		}
	}
	if !signed {
		return Forwarded{}, errors.New("forward header: the signature matches no accepted key")
	}
	b, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return Forwarded{}, fmt.Errorf("forward header: malformed: %w", err)
	}
	var f Forwarded
	if err := json.Unmarshal(b, &f); err != nil {
		return Forwarded{}, fmt.Errorf("forward header: malformed: %w", err)
	}
	switch {
	case f.Expires.IsZero():
		return Forwarded{}, errors.New("forward header: malformed: no expiry")
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
