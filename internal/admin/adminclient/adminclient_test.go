package adminclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The token comes from TokenFile (trimmed), else $MCPVISOR_TOKEN; a 200's
// body is returned; any other answer is an error in the API's words, its
// status kept.
func TestGetSendsTheTokenAndSaysWhatWentWrong(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer s3cret":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"a bearer token is required"}`))
		case r.URL.Path == "/api/servers/x":
			_, _ = w.Write([]byte(`{"name":"x"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("no such page\n"))
		}
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MCPVISOR_TOKEN", "wrong")
	c := &Client{Addr: srv.URL, TokenFile: file}
	var v struct{ Name string }
	if err := c.GetJSON(context.Background(), "/api/servers/x", &v); err != nil || v.Name != "x" {
		t.Fatalf("GetJSON: %+v %v", v, err)
	}
	_, err := c.Get(context.Background(), "/nope")
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound || !strings.Contains(err.Error(), "no such page") {
		t.Errorf("a 404 with a plain body: %v", err)
	}
	_, err = (&Client{Addr: srv.URL}).Get(context.Background(), "/api/servers/x")
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized || err.Error() != "a bearer token is required" {
		t.Errorf("the environment's wrong token: %v", err)
	}
}

// Nothing listening at the address is an error that asks whether serve
// runs there.
func TestNothingAnswering(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = (&Client{Addr: addr}).Get(context.Background(), "/api/servers")
	if err == nil || !strings.Contains(err.Error(), "is mcpvisor serve running at "+addr) {
		t.Fatalf("%v", err)
	}
}

// HTTPClient's requests carry the same token as Do's, and none without
// one; a token file that cannot be read is an error at once.
func TestHTTPClientSendsTheToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MCPVISOR_TOKEN", "")
	for _, c := range []*Client{{Addr: srv.URL, TokenFile: file}, {Addr: strings.TrimPrefix(srv.URL, "http://")}} {
		hc, err := c.HTTPClient()
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, c.URL("/servers/x/mcp"), nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.Header.Get("Authorization") != "" {
			t.Errorf("the caller's request was changed: %v", req.Header)
		}
	}
	if strings.Join(got, ",") != "Bearer s3cret," {
		t.Errorf("Authorization headers: %q", got)
	}
	if _, err := (&Client{TokenFile: filepath.Join(t.TempDir(), "none")}).HTTPClient(); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("an unreadable token file: %v", err)
	}
}
