package adminclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// setStored sets StoredToken for the test.
func setStored(t *testing.T, f func(ctx context.Context, addr string) (string, error)) {
	old := StoredToken
	StoredToken = f
	t.Cleanup(func() { StoredToken = old })
}

// A serve that asks for no token never has the store consulted; one that
// challenges (team identity) gets the gateway login's token, and the
// process's later requests send it at once.
func TestStoredTokenOnChallenge(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "")
	t.Setenv("MCPVISOR_TOKEN_FILE", "")
	var lookups atomic.Int32
	setStored(t, func(_ context.Context, addr string) (string, error) {
		lookups.Add(1)
		return "stored-admin-token", nil
	})
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("{}")) }))
	defer open.Close()
	c := Client{Addr: strings.TrimPrefix(open.URL, "http://")}
	if _, err := c.Get(context.Background(), "/api/servers"); err != nil {
		t.Fatal(err)
	}
	if lookups.Load() != 0 {
		t.Fatal("the store was consulted for a serve that asks for no token")
	}

	var unauth atomic.Int32
	team := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer stored-admin-token" {
			unauth.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="x"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(r.Method))
	}))
	defer team.Close()
	c = Client{Addr: strings.TrimPrefix(team.URL, "http://")}
	for range 3 {
		if b, err := c.Get(context.Background(), "/api/servers"); err != nil || string(b) != "GET" {
			t.Fatalf("GET with the stored token: %q %v", b, err)
		}
	}
	if code, b, err := c.Post(context.Background(), "/api/reload", []byte(`{}`)); err != nil || code != 200 || string(b) != "POST" {
		t.Fatalf("POST with the stored token: %d %q %v", code, b, err)
	}
	if n := unauth.Load(); n != 1 {
		t.Errorf("%d requests went without the token, want only the first", n)
	}

	// An explicit token wins; the store is not asked.
	before := lookups.Load()
	t.Setenv("MCPVISOR_TOKEN", "explicit")
	if _, err := c.Get(context.Background(), "/api/servers"); err == nil {
		t.Error("the explicit (wrong) token was replaced by the stored one")
	}
	if lookups.Load() != before {
		t.Error("the store was consulted despite an explicit token")
	}

	// A login that needs renewing is the command's error.
	t.Setenv("MCPVISOR_TOKEN", "")
	wantsStored.Delete(c.Addr)
	setStored(t, func(context.Context, string) (string, error) { return "", errors.New("log in again") })
	if _, err := c.Get(context.Background(), "/api/servers"); err == nil || !strings.Contains(err.Error(), "log in again") {
		t.Errorf("a stale login: %v", err)
	}
}

// $MCPVISOR_TOKEN_FILE is read when --token-file is not given; an empty
// file is an error, not "no token".
func TestTokenFileEnv(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tok")
	if err := os.WriteFile(f, []byte(" from-file \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MCPVISOR_TOKEN", "from-env")
	t.Setenv("MCPVISOR_TOKEN_FILE", f)
	c := Client{}
	if tok, err := c.token(context.Background()); err != nil || tok != "from-file" {
		t.Errorf("token = %q, %v; want the file's", tok, err)
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, nil, 0o600)
	t.Setenv("MCPVISOR_TOKEN_FILE", empty)
	if _, err := c.token(context.Background()); err == nil || !strings.Contains(err.Error(), "$MCPVISOR_TOKEN_FILE") {
		t.Errorf("an empty token file: %v", err)
	}
	c.TokenFile = f
	if tok, _ := c.token(context.Background()); tok != "from-file" {
		t.Errorf("--token-file: %q", tok)
	}
}
