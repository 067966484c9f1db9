package identity

import (
	"context"
	"testing"
)

func TestKeyIsPerPersonNotPerClient(t *testing.T) {
	a := (&Identity{Kind: Token, Issuer: "https://as", Subject: "alice", ClientID: "c1"}).Finish()
	b := (&Identity{Kind: Token, Issuer: "https://as", Subject: "alice", ClientID: "c2"}).Finish()
	c := (&Identity{Kind: Token, Issuer: "https://other", Subject: "alice", ClientID: "c1"}).Finish()
	l := LocalUser(1000, "alice")
	if a.Key() != b.Key() {
		t.Errorf("same issuer and subject, keys %q and %q differ", a.Key(), b.Key())
	}
	if a.Key() == c.Key() || a.Key() == l.Key() {
		t.Errorf("another issuer or a local user shares alice's key %q", a.Key())
	}
	if Same(a, b) {
		t.Error("Same: another client of the same person counts as the same")
	}
	if !Same(a, (&Identity{Kind: Token, Issuer: "https://as", Subject: "alice", ClientID: "c1"}).Finish()) {
		t.Error("Same: equal identities differ")
	}
	if Same(a, nil) || !Same(nil, nil) {
		t.Error("Same with nil")
	}
	var none *Identity
	if none.Key() != "" || none.Name() != "" || none.HasScopes([]string{"x"}) || !none.HasScopes(nil) {
		t.Error("nil identity")
	}
}

func TestHasScopes(t *testing.T) {
	id := (&Identity{Scopes: []string{"mcp", "admin"}}).Finish()
	if !id.HasScopes([]string{"admin", "mcp"}) || id.HasScopes([]string{"mcp", "write"}) {
		t.Errorf("HasScopes wrong for %v", id.Scopes)
	}
}

func TestContext(t *testing.T) {
	id := LocalUser(7, "")
	if id.Subject != "7" {
		t.Errorf("unnamed local user: subject %q", id.Subject)
	}
	ctx := NewContext(context.Background(), id)
	if FromContext(ctx) != id || FromContext(context.Background()) != nil {
		t.Error("context round trip")
	}
	if NewContext(context.Background(), nil) != context.Background() {
		t.Error("a nil identity changed the context")
	}
}
