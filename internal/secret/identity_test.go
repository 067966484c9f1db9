package secret

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// An identity's references resolve to that identity's values, and its
// keyring reference reads only NAME/<its key>: never the shared NAME,
// never another identity's.
func TestResolveIdentity(t *testing.T) {
	store := mapStore{"gh": "shared-secret", "gh/k-alice": "alice-secret", "gh/k-bob": "bob-secret"}
	alice := Sources{Store: store, Identity: &Identity{Key: "k-alice", Subject: "alice@example.com"}}
	bob := Sources{Store: store, Identity: &Identity{Key: "k-bob", Subject: "bob"}}
	for in, want := range map[string]string{
		"${identity.sub}":           "alice@example.com",
		"user=${identity.key}":      "user=k-alice",
		"${keyring:gh@identity}":    "alice-secret",
		"${UNSET:-${identity.sub}}": "alice@example.com",
		"${keyring:gh}":             "shared-secret",
		"$${identity.sub}":          "${identity.sub}",
	} {
		got, err := Resolve(context.Background(), in, alice)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) as alice = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, err := Resolve(context.Background(), "${keyring:gh@identity}", bob); err != nil || got != "bob-secret" {
		t.Errorf("bob's credential = %q, %v", got, err)
	}
	// A subject is a value, never read as a reference.
	evil := Sources{LookupEnv: envOf(map[string]string{"TOKEN": "env-secret"}), Identity: &Identity{Key: "k", Subject: "${env:TOKEN}"}}
	if got, err := Resolve(context.Background(), "${identity.sub}", evil); err != nil || got != "${env:TOKEN}" {
		t.Errorf("a subject holding a reference resolved to %q, %v", got, err)
	}
}

func TestResolveIdentityErrors(t *testing.T) {
	store := mapStore{"gh": "shared-secret"}
	// No identity: a server that runs for none cannot read these.
	for _, in := range []string{"${identity.sub}", "${identity.key}", "${keyring:gh@identity}"} {
		_, err := Resolve(context.Background(), in, Sources{Store: store})
		var re *ResolveError
		if !errors.As(err, &re) || re.Ref != in || !strings.Contains(err.Error(), "per-identity") {
			t.Errorf("Resolve(%q) without an identity: %v", in, err)
		}
	}
	// An identity without its own credential does not get the shared one.
	_, err := Resolve(context.Background(), "${keyring:gh@identity}", Sources{Store: store, Identity: &Identity{Key: "k-carol"}})
	if err == nil || !strings.Contains(err.Error(), "mcpvisor secret set gh/k-carol") || strings.Contains(err.Error(), "shared-secret") {
		t.Errorf("missing per-identity secret: %v", err)
	}
	for in, want := range map[string]string{
		"${identity.email}":           "${identity.sub} or ${identity.key}",
		"${identity.}":                "${identity.sub} or ${identity.key}",
		"${keyring:@identity}":        "has no keyring name",
		"${keyring:oauth/x@identity}": "reserved",
	} {
		if err := Check(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want %q", in, err, want)
		}
	}
}

func TestUsesIdentity(t *testing.T) {
	for in, want := range map[string]bool{
		"${identity.sub}":           true,
		"x ${identity.key} y":       true,
		"${keyring:gh@identity}":    true,
		"${UNSET:-${identity.sub}}": true,
		"${keyring:gh}":             false,
		"$${identity.sub}":          false,
		"plain":                     false,
		"${identity.bogus}":         false,
	} {
		if got := UsesIdentity(in); got != want {
			t.Errorf("UsesIdentity(%q) = %v, want %v", in, got, want)
		}
	}
	if _, _, err := ExpandEnv("${identity.sub}", envOf(nil)); err == nil || !strings.Contains(err.Error(), "not allowed here") {
		t.Errorf("ExpandEnv of an identity reference: %v", err)
	}
}
