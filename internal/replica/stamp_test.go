package replica

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"
)

var testOwner = Owner{Ordinal: 3, Incarnation: "abcdefghij234567klmn"}

// visible reports whether s is visible ASCII only (0x21–0x7E): a legal
// Mcp-Session-Id, and a header value.
func visible(s string) bool {
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// A stamp is what the format says, with the mac computed as specified,
// and it reads back.
func TestStampFormat(t *testing.T) {
	k := mustKeys(t, key("a"))
	inner := "sess.1.2"
	m := hmac.New(sha256.New, key("a"))
	m.Write([]byte("mcpvisor owner v1\x003\x00abcdefghij234567klmn\x00sess.1.2"))
	mac := base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
	want := "mcpv-o1.3.abcdefghij234567klmn." + mac + ".sess.1.2"
	if got := k.Stamp(testOwner, inner); got != want {
		t.Fatalf("stamp %q, want %q", got, want)
	}
	if !HasStamp(want) || HasStamp(inner) {
		t.Fatal("HasStamp")
	}
	for _, inner := range []string{"", "x", "with.dots.", ".", "mcpv-o1.nested", "ünïcødé", "\x00\xff ctl"} {
		s := k.Stamp(testOwner, inner)
		o, got, ok, err := k.Unstamp(s)
		if err != nil || !ok || o != testOwner || got != inner {
			t.Errorf("Unstamp(Stamp(%q)) = %+v %q %v %v", inner, o, got, ok, err)
		}
	}
	// Ordinals 0 and MaxOrdinal, and an incarnation of NewIncarnation.
	for _, o := range []Owner{{0, NewIncarnation()}, {MaxOrdinal, "A-_z"}} {
		if got, _, ok, err := k.Unstamp(k.Stamp(o, "i")); !ok || err != nil || got != o {
			t.Errorf("owner %+v: %+v %v %v", o, got, ok, err)
		}
	}
}

// Any one byte changed, anywhere after the prefix, to any ASCII byte,
// is refused (the mac's last character too, whose low bits base64
// leaves unused); a byte changed in the prefix makes an id that is not
// stamped.
func TestStampTampered(t *testing.T) {
	k := mustKeys(t, key("a"))
	s := k.Stamp(testOwner, "inner-id")
	for i := range len(s) {
		for c := range byte(0x80) {
			if c == s[i] {
				continue
			}
			b := []byte(s)
			b[i] = c
			o, inner, ok, err := k.Unstamp(string(b))
			if ok {
				t.Fatalf("byte %d changed to %q: accepted as %+v %q", i, c, o, inner)
			}
			if i >= len(StampPrefix) && err == nil {
				t.Fatalf("byte %d changed to %q: no error", i, c)
			}
			if i < len(StampPrefix) && err != nil {
				t.Fatalf("prefix byte %d changed to %q: %v", i, c, err)
			}
		}
	}
	// Parts cut or added are refused too.
	for _, bad := range []string{s[:len(s)-1], s + "x", s[:len(s)-len(".inner-id")]} {
		if _, _, ok, err := k.Unstamp(bad); ok || err == nil {
			t.Errorf("%q: %v %v", bad, ok, err)
		}
	}
}

// A stamp verifies with any accepted key: one made with a key accepted
// but not signing passes, one made with a key not accepted does not.
func TestStampKeys(t *testing.T) {
	oldKey, newKey, other := key("old"), key("new"), key("other")
	rotated := mustKeys(t, newKey, oldKey)
	byOld := mustKeys(t, oldKey).Stamp(testOwner, "x")
	if o, inner, ok, err := rotated.Unstamp(byOld); !ok || err != nil || o != testOwner || inner != "x" {
		t.Errorf("stamped with an accepted key: %+v %q %v %v", o, inner, ok, err)
	}
	if _, _, ok, err := rotated.Unstamp(rotated.Stamp(testOwner, "x")); !ok || err != nil {
		t.Errorf("stamped with the signing key: %v %v", ok, err)
	}
	byOther := mustKeys(t, other, newKey).Stamp(testOwner, "x") // signs with other
	if _, _, ok, err := rotated.Unstamp(byOther); ok || err == nil || !strings.Contains(err.Error(), "no accepted key") {
		t.Errorf("stamped with a key not accepted: %v %v", ok, err)
	}
	// After step 3, the old key's stamps are refused.
	if _, _, ok, err := mustKeys(t, newKey).Unstamp(byOld); ok || err == nil {
		t.Errorf("stamped with a key no longer accepted: %v %v", ok, err)
	}
}

func TestUnstampNotStamped(t *testing.T) {
	k := mustKeys(t, key("a"))
	for _, s := range []string{"", "abc", "mcpv-o1", "MCPV-O1.3.x.y.z", " mcpv-o1.3", "mcpv-o2.3.a.b.c", "4f8c0c5e-0a2b"} {
		if o, inner, ok, err := k.Unstamp(s); ok || err != nil || o != (Owner{}) || inner != "" {
			t.Errorf("%q: %+v %q %v %v", s, o, inner, ok, err)
		}
	}
}

func TestUnstampMalformed(t *testing.T) {
	k := mustKeys(t, key("a"))
	good := k.Stamp(testOwner, "x")
	mac := strings.Split(good, ".")[3]
	for _, s := range []string{
		StampPrefix,
		StampPrefix + "3",
		StampPrefix + "3.inc",
		StampPrefix + "3.inc." + mac, // no dot before inner
		StampPrefix + "03.abcdefghij234567klmn." + mac + ".x",
		StampPrefix + "+3.abcdefghij234567klmn." + mac + ".x",
		StampPrefix + "10000.abcdefghij234567klmn." + mac + ".x",
		StampPrefix + "-1.abcdefghij234567klmn." + mac + ".x",
		StampPrefix + "3..." + mac + ".x",
		StampPrefix + "3.abc def." + mac + ".x",
		StampPrefix + "3." + strings.Repeat("a", 65) + "." + mac + ".x",
		StampPrefix + "3.abcdefghij234567klmn." + mac[:21] + ".x",
		StampPrefix + "3.abcdefghij234567klmn." + mac + "=.x",
	} {
		if o, inner, ok, err := k.Unstamp(s); ok || err == nil || o != (Owner{}) || inner != "" {
			t.Errorf("%q: %+v %q %v %v", s, o, inner, ok, err)
		}
	}
}

// An Owner that cannot be stamped gives a stamp that is refused, and no
// panic.
func TestStampInvalidOwner(t *testing.T) {
	k := mustKeys(t, key("a"))
	for _, o := range []Owner{{-1, "abc"}, {MaxOrdinal + 1, "abc"}, {0, ""}, {0, "a.b"}, {0, "a b"}, {0, "ü"}, {0, strings.Repeat("a", 65)}} {
		if o.Valid() == nil {
			t.Errorf("%+v is valid", o)
		}
		s := k.Stamp(o, "inner")
		if !visible(s) {
			t.Errorf("%+v: stamp %q", o, s)
		}
		if _, _, ok, err := k.Unstamp(s); ok || err == nil {
			t.Errorf("%+v: stamp %q: %v %v", o, s, ok, err)
		}
	}
}

func TestNewIncarnation(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		inc := NewIncarnation()
		if len(inc) != 20 || strings.Trim(inc, "abcdefghijklmnopqrstuvwxyz234567") != "" || seen[inc] {
			t.Fatalf("incarnation %q (seen: %v)", inc, seen[inc])
		}
		seen[inc] = true
		if (Owner{0, inc}).Valid() != nil {
			t.Fatalf("%q is not a valid incarnation", inc)
		}
	}
}

// Over random visible inners, stamps are visible and read back.
func TestStampHeaderSafe(t *testing.T) {
	k := mustKeys(t, key("a"))
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(80))
		for i := range b {
			b[i] = byte(0x21 + r.IntN(0x7e-0x21+1))
		}
		o := Owner{Ordinal: r.IntN(MaxOrdinal + 1), Incarnation: NewIncarnation()}
		s := k.Stamp(o, string(b))
		if !visible(s) {
			t.Fatalf("Stamp(%q) = %q", b, s)
		}
		if got, inner, ok, err := k.Unstamp(s); !ok || err != nil || got != o || inner != string(b) {
			t.Fatalf("Unstamp(%q) = %+v %q %v %v", s, got, inner, ok, err)
		}
	}
}

// FuzzUnstamp: Unstamp never panics, and what it verifies is exactly
// what Stamp writes; any inner round-trips, and a visible inner gives a
// visible stamp.
func FuzzUnstamp(f *testing.F) {
	k, err := NewKeys(key("a"), key("b"))
	if err != nil {
		f.Fatal(err)
	}
	byB, err := NewKeys(key("b"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "x", StampPrefix, StampPrefix + "1.2.3.4", k.Stamp(testOwner, "seed"), byB.Stamp(Owner{7, "q"}, "a.b"), "\xff\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, x string) {
		if o, inner, ok, err := k.Unstamp(x); ok {
			if err != nil {
				t.Fatalf("ok with %v", err)
			}
			if k.Stamp(o, inner) != x && byB.Stamp(o, inner) != x {
				t.Fatalf("%q verified as %+v %q, which neither key stamps so", x, o, inner)
			}
		}
		s := k.Stamp(testOwner, x)
		if o, inner, ok, err := k.Unstamp(s); !ok || err != nil || o != testOwner || inner != x {
			t.Fatalf("Unstamp(Stamp(%q)) = %+v %q %v %v", x, o, inner, ok, err)
		}
		if visible(x) && !visible(s) {
			t.Fatalf("Stamp(%q) = %q is not visible ASCII", x, s)
		}
	})
}
