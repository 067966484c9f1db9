package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// The gateway login's name is a valid, reserved secret name (no user's
// secret reference can send it anywhere), per serve address, and apart
// from serve's remote-server records.
func TestGatewaySecretName(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7331":           "oauth/.gateway/127.0.0.1_7331",
		"https://mcp.example.com/": "oauth/.gateway/https___mcp.example.com",
		"[::1]:7331":               "oauth/.gateway/___1__7331",
		"host/../../etc":           "oauth/.gateway/host_.._.._etc",
	} {
		got := GatewaySecretName(addr)
		if got != want {
			t.Errorf("GatewaySecretName(%q) = %q, want %q", addr, got, want)
		}
		if err := secret.CheckName(got); err != nil {
			t.Errorf("%q: %v", got, err)
		}
		if !secret.Reserved(got) || secret.CheckUserName(got) == nil {
			t.Errorf("%q is not reserved", got)
		}
		if strings.Count(got, "/") != 2 {
			t.Errorf("%q has a path of its own", got)
		}
	}
}

func TestGatewayStore(t *testing.T) {
	ctx := context.Background()
	store := secret.OpenFile(t.TempDir())
	s := &GatewayStore{Secrets: store, Name: GatewaySecretName("127.0.0.1:1"), Login: GatewayLogin{Resource: "http://127.0.0.1:1", ClientID: "c", Scopes: []string{"mcpvisor:admin"}}}
	if _, err := s.Load(ctx); !errors.Is(err, oauthclient.ErrNoRecord) {
		t.Fatalf("Load of nothing: %v, want ErrNoRecord", err)
	}
	if err := s.Save(ctx, []byte("record")); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Load(ctx); err != nil || string(b) != "record" {
		t.Fatalf("Load = %q, %v", b, err)
	}
	l, err := LoadGatewayLogin(ctx, store, s.Name)
	if err != nil || l == nil || l.ClientID != "c" || l.Resource != "http://127.0.0.1:1" {
		t.Fatalf("LoadGatewayLogin = %+v, %v", l, err)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, *l); strings.Contains(out, "record\"") || strings.Contains(out, "cmVjb3Jk") || strings.Contains(out, "[114") {
			t.Errorf("%s shows the record: %s", f, out)
		}
	}
	// Another resource at the same address (serve's public URL changed):
	// the record is not used for it.
	other := *s
	other.Login.Resource = "https://elsewhere.example"
	if _, err := other.Load(ctx); !errors.Is(err, oauthclient.ErrNoRecord) {
		t.Errorf("a record of another resource was loaded: %v", err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Errorf("a second Delete: %v", err)
	}
	if l, err := LoadGatewayLogin(ctx, store, s.Name); l != nil || err != nil {
		t.Errorf("after Delete: %+v, %v", l, err)
	}
	// A damaged record is an error that says what to do, not a panic.
	_ = store.Set(ctx, s.Name, "{not json")
	if _, err := LoadGatewayLogin(ctx, store, s.Name); err == nil || !strings.Contains(err.Error(), "login --gateway") {
		t.Errorf("a damaged login: %v", err)
	}
}

// With no gateway login, the stored token is none, without an error; the
// cache is per address.
func TestStoredGatewayTokenNone(t *testing.T) {
	dir := t.TempDir()
	old := OpenSecrets
	OpenSecrets = func() secret.Store { return secret.OpenFile(dir) }
	t.Cleanup(func() { OpenSecrets = old; ResetGatewayTokens() })
	ResetGatewayTokens()
	tok, err := StoredGatewayToken(context.Background(), "127.0.0.1:9")
	if tok != "" || err != nil {
		t.Fatalf("StoredGatewayToken without a login = %q, %v", tok, err)
	}
	// A login whose record holds no tokens needs renewing: an error
	// naming the command.
	s := &GatewayStore{Secrets: secret.OpenFile(dir), Name: GatewaySecretName("127.0.0.1:9"), Login: GatewayLogin{Resource: "http://127.0.0.1:9"}}
	if err := s.Save(context.Background(), []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	_, err = StoredGatewayToken(context.Background(), "127.0.0.1:9")
	if err == nil || !strings.Contains(err.Error(), "mcpvisor login --gateway --addr 127.0.0.1:9") {
		t.Errorf("a login without tokens: %v", err)
	}
}
