package replica

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var fwdNow = time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)

func testForward() Forwarded {
	return Forwarded{
		From: 1, To: 2, ToIncarnation: "abcdefghij234567klmn",
		ConfigVersion: "sha256:0123",
		Identity:      json.RawMessage(`{"sub":"alice","groups":["a","b"]}`),
		Method:        "POST", Path: "/servers/github/mcp",
		Expires: fwdNow.Add(ForwardLifetime),
	}
}

func equalForward(a, b Forwarded) bool {
	return a.From == b.From && a.To == b.To && a.ToIncarnation == b.ToIncarnation &&
		a.ConfigVersion == b.ConfigVersion && string(a.Identity) == string(b.Identity) &&
		a.Method == b.Method && a.Path == b.Path && a.Expires.Equal(b.Expires)
}

func TestForwardRoundTrip(t *testing.T) {
	k := mustKeys(t, key("a"))
	for _, f := range []Forwarded{testForward(), {From: 0, To: 0, Method: "GET", Path: "/", Expires: fwdNow.Add(time.Nanosecond)}} {
		v := k.SignForward(f)
		if !visible(v) || strings.Count(v, ".") != 1 {
			t.Fatalf("header value %q", v)
		}
		got, err := k.VerifyForward(v, fwdNow)
		if err != nil || !equalForward(got, f) {
			t.Fatalf("VerifyForward: %+v %v; want %+v", got, err, f)
		}
	}
	// No identity: none in the header, none out of it.
	f := testForward()
	f.Identity = nil
	v := k.SignForward(f)
	if got, err := k.VerifyForward(v, fwdNow); err != nil || got.Identity != nil {
		t.Errorf("no identity: %s %v", got.Identity, err)
	}
}

// Each way a header is wrong is refused, saying which check failed.
func TestForwardRefused(t *testing.T) {
	k := mustKeys(t, key("a"))
	v := k.SignForward(testForward())
	payload, mac, _ := strings.Cut(v, ".")

	// Another request's payload, with this one's mac.
	other := testForward()
	other.Path = "/servers/other/mcp"
	otherPayload, _, _ := strings.Cut(k.SignForward(other), ".")

	flip := func(s string, i int) string {
		b := []byte(s)
		b[i] ^= 1
		return string(b)
	}
	reSigned := func(payload string) string { return payload + "." + k.forwardMAC(0, payload) }
	enc := base64.RawURLEncoding.EncodeToString
	payloadOf := func(f Forwarded) string {
		p, _, _ := strings.Cut(k.SignForward(f), ".")
		return p
	}
	raw, _ := base64.RawURLEncoding.DecodeString(payload)

	for _, c := range []struct {
		name, v string
		now     time.Time
		want    string
	}{
		{"empty", "", fwdNow, "malformed"},
		{"no mac", payload, fwdNow, "malformed"},
		{"empty payload", "." + mac, fwdNow, "malformed"},
		{"two dots", v + ".x", fwdNow, "malformed"},
		{"short mac", payload + "." + mac[1:], fwdNow, "malformed"},
		{"payload changed", flip(payload, 10) + "." + mac, fwdNow, "signature"},
		{"payload replaced", otherPayload + "." + mac, fwdNow, "signature"},
		{"mac changed", payload + "." + flip(mac, 5), fwdNow, "signature"},
		{"unaccepted key", mustKeys(t, key("b")).SignForward(testForward()), fwdNow, "signature"},
		{"expired", v, fwdNow.Add(ForwardLifetime), "expired"},
		{"long expired", v, fwdNow.Add(time.Hour), "expired"},
		{"too far ahead", v, fwdNow.Add(ForwardLifetime - MaxForwardAhead - time.Second), "ahead"},
		{"not a payload", reSigned(enc([]byte("not json"))), fwdNow, "malformed"},
		{"another version", reSigned(enc(append([]byte{1}, raw[1:]...))), fwdNow, "malformed"},
		{"cut short", reSigned(enc(raw[:len(raw)-3])), fwdNow, "malformed"},
		{"trailing bytes", reSigned(enc(append(raw[:len(raw):len(raw)], 0))), fwdNow, "malformed"},
		{"a string past the end", reSigned(enc([]byte{forwardVersion, 1, 2, 200})), fwdNow, "malformed"},
		{"an ordinal out of range", reSigned(payloadOf(Forwarded{From: MaxOrdinal + 1, Method: "GET", Path: "/", Expires: fwdNow.Add(time.Second)})), fwdNow, "malformed"},
		{"not base64", reSigned("a!b"), fwdNow, "malformed"},
		{"no expiry", reSigned(payloadOf(Forwarded{From: 1, To: 2})), fwdNow, "malformed"},
		{"invalid identity", k.SignForward(Forwarded{Identity: json.RawMessage("{"), Expires: fwdNow.Add(time.Second)}), fwdNow, "malformed"},
	} {
		got, err := k.VerifyForward(c.v, c.now)
		if err == nil || !strings.Contains(err.Error(), c.want) || !equalForward(got, Forwarded{}) {
			t.Errorf("%s: %+v %v; want an error saying %q", c.name, got, err, c.want)
		}
	}
	// Any one byte changed, to any ASCII byte, is refused: the mac's
	// last character too, whose low bits base64 leaves unused.
	for i := range len(v) {
		for c := range byte(0x80) {
			if c == v[i] {
				continue
			}
			b := []byte(v)
			b[i] = c
			if got, err := k.VerifyForward(string(b), fwdNow); err == nil {
				t.Fatalf("byte %d changed to %q: accepted as %+v", i, c, got)
			}
		}
	}
	// The last instant before Expires is in time.
	if _, err := k.VerifyForward(v, fwdNow.Add(ForwardLifetime-time.Nanosecond)); err != nil {
		t.Errorf("just in time: %v", err)
	}
}

// During a rotation a header signed with either key verifies.
func TestForwardRotation(t *testing.T) {
	both := mustKeys(t, key("new"), key("old"))
	for _, signer := range []*Keys{mustKeys(t, key("old")), mustKeys(t, key("new"), key("old"))} {
		if _, err := both.VerifyForward(signer.SignForward(testForward()), fwdNow); err != nil {
			t.Errorf("signed by %s: %v", signer.SigningID(), err)
		}
	}
	if _, err := mustKeys(t, key("new")).VerifyForward(mustKeys(t, key("old")).SignForward(testForward()), fwdNow); err == nil {
		t.Error("a key no longer accepted verifies")
	}
}

func TestForwardCheck(t *testing.T) {
	f := testForward()
	self := Owner{2, "abcdefghij234567klmn"}
	if err := f.Check("POST", "/servers/github/mcp", self); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path string
		self         Owner
	}{
		{"GET", "/servers/github/mcp", self},
		{"POST", "/servers/github/mcp/x", self},
		{"POST", "/servers/github/mcp", Owner{1, self.Incarnation}},
		{"POST", "/servers/github/mcp", Owner{2, "restarted"}},
	} {
		if err := f.Check(c.method, c.path, c.self); err == nil {
			t.Errorf("%s %s at %+v: no error", c.method, c.path, c.self)
		}
	}
	f.ToIncarnation = ""
	if err := f.Check("POST", "/servers/github/mcp", Owner{2, "any"}); err != nil {
		t.Errorf("any incarnation: %v", err)
	}
}
