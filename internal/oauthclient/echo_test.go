package oauthclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// An authorization server that echoes what authenticated the client into
// its error_description (the Basic credentials, the client secret, the
// private_key_jwt assertion) gets none of it into the error mcpvisor
// shows.
func TestTokenErrorsDoNotEchoClientCredentials(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		echo := r.Header.Get("Authorization") + " " + r.PostForm.Get("client_secret") + " " + r.PostForm.Get("client_assertion")
		seen = append(seen, echo)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client", "error_description": "got " + echo})
	}))
	defer srv.Close()
	_, keyPEM := ecKey(t)
	g := New(Settings{Resource: "https://mcp.example.test/mcp", PrivateKeyPEM: keyPEM}, nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, method := range []string{AuthClientSecretBasic, AuthClientSecretPost, AuthPrivateKeyJWT} {
		seen = nil
		_, _, err := g.postForm(ctx, srv.URL, url.Values{"grant_type": {"client_credentials"}},
			clientAuth{id: "client-1", secret: "s3cret-value", method: method, audience: srv.URL}, nil)
		if err == nil || len(seen) != 1 {
			t.Fatalf("%s: %v, %d requests", method, err, len(seen))
		}
		msg := err.Error()
		for _, part := range strings.Fields(seen[0]) {
			if len(part) >= 8 && strings.Contains(msg, part) {
				t.Errorf("%s: the error shows %q: %s", method, part, msg)
			}
		}
		if !strings.Contains(msg, "invalid_client") {
			t.Errorf("%s: the error does not say what the server said: %s", method, msg)
		}
	}
}

// A public server may not name local or private addresses for mcpvisor
// to fetch (its metadata, its authorization server); a local server may.
func TestNamedURLsStayOffLocalAddresses(t *testing.T) {
	for _, c := range []struct {
		resource, named string
		ok              bool
	}{
		{"https://mcp.example.com/mcp", "https://auth.example.com/.well-known/oauth-protected-resource", true},
		{"https://mcp.example.com/mcp", "http://127.0.0.1:8080/.well-known/oauth-protected-resource", false},
		{"https://mcp.example.com/mcp", "https://10.0.0.5/", false},
		{"https://mcp.example.com/mcp", "https://169.254.169.254/latest", false},
		{"https://mcp.example.com/mcp", "https://[::1]/x", false},
		{"http://127.0.0.1:9000/mcp", "http://127.0.0.1:9001/issuer", true},
		{"https://192.168.1.2/mcp", "https://192.168.1.3/issuer", true},
	} {
		g := New(Settings{Resource: c.resource}, nil, nil, nil)
		if err := g.checkNamed(c.named); (err == nil) != c.ok {
			t.Errorf("server %s naming %s: %v, want ok=%v", c.resource, c.named, err, c.ok)
		}
	}
}
