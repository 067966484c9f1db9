package authn

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestExtract(t *testing.T) {
	const tok = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"
	cases := []struct {
		name    string
		headers []string
		query   string
		want    string
		code    string // "" no error
	}{
		{"one Bearer header", []string{"Bearer " + tok}, "", tok, ""},
		{"scheme case-insensitive", []string{"bEaReR " + tok}, "", tok, ""},
		{"several spaces", []string{"Bearer   " + tok}, "", tok, ""},
		{"token68 padding", []string{"Bearer abc=="}, "", "abc==", ""},
		{"missing", nil, "", "", ""},
		{"query only is ignored", nil, "access_token=" + tok, "", ""},
		{"other scheme", []string{"Basic dXNlcjpwYXNz"}, "", "", ""},
		{"two headers", []string{"Bearer " + tok, "Bearer " + tok}, "", "", CodeInvalidRequest},
		{"two headers, one not Bearer", []string{"Basic x", "Bearer " + tok}, "", "", CodeInvalidRequest},
		{"header and query", []string{"Bearer " + tok}, "access_token=" + tok, "", CodeInvalidRequest},
		{"header and empty query token", []string{"Bearer " + tok}, "a=1&access_token=", "", CodeInvalidRequest},
		{"header and escaped query name", []string{"Bearer " + tok}, "access%5Ftoken=x", "", CodeInvalidRequest},
		{"header and query after a semicolon", []string{"Bearer " + tok}, "a=1;access_token=x", "", CodeInvalidRequest},
		{"empty Bearer", []string{"Bearer "}, "", "", CodeInvalidRequest},
		{"bare Bearer", []string{"Bearer"}, "", "", CodeInvalidRequest},
		{"two tokens in one header", []string{"Bearer a, Bearer b"}, "", "", CodeInvalidRequest},
		{"space inside", []string{"Bearer a b"}, "", "", CodeInvalidRequest},
		{"padding inside", []string{"Bearer a=b"}, "", "", CodeInvalidRequest},
		{"too long", []string{"Bearer " + strings.Repeat("a", MaxTokenLen+1)}, "", "", CodeInvalidRequest},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/mcp?"+c.query, strings.NewReader(`{}`))
		for _, h := range c.headers {
			r.Header.Add("Authorization", h)
		}
		got, err := Extract(r)
		if c.code == "" {
			if err != nil || got != c.want {
				t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code || e.Status() != http.StatusBadRequest || got != "" {
			t.Errorf("%s: %q, %v; want %s", c.name, got, err, c.code)
			continue
		}
		if strings.Contains(e.Error(), tok) {
			t.Errorf("%s: error holds the token", c.name)
		}
	}
}

func TestChallengeWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	(&Challenge{Error: CodeInsufficientScope, Description: `needs "admin"\` + "\r\nX-Evil: 1",
		Scopes: []string{"mcp", "admin"}, ResourceMetadata: "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"}).Write(rec)
	if rec.Code != 403 {
		t.Errorf("status %d", rec.Code)
	}
	want := `Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="mcp admin", error="insufficient_scope", error_description="needs \"admin\"\\  X-Evil: 1"`
	if got := rec.Header().Get("WWW-Authenticate"); got != want {
		t.Errorf("WWW-Authenticate\n got %s\nwant %s", got, want)
	}
	if rec.Header().Get("Cache-Control") != "no-store" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", rec.Header())
	}
	var body map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body["error"] != "insufficient_scope" || !strings.HasPrefix(body["error_description"], `needs "admin"`) {
		t.Errorf("body %s (%v)", rec.Body, err)
	}

	rec = httptest.NewRecorder()
	(&Challenge{ResourceMetadata: "https://m/x", Scopes: []string{"mcp"}}).Write(rec)
	if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") != `Bearer resource_metadata="https://m/x", scope="mcp"` {
		t.Errorf("no token: %d %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}

	rec = httptest.NewRecorder()
	unavailable("issuer unavailable", 2500*time.Millisecond, nil).Challenge("https://m/x", nil).Write(rec)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "3" || rec.Header().Get("WWW-Authenticate") != "" {
		t.Errorf("unavailable: %d %v", rec.Code, rec.Header())
	}

	rec = httptest.NewRecorder()
	invalidRequest("more than one Authorization header").Challenge("https://m/x", nil).Write(rec)
	if rec.Code != 400 || !strings.Contains(rec.Header().Get("WWW-Authenticate"), `error="invalid_request"`) {
		t.Errorf("invalid_request: %d %v", rec.Code, rec.Header())
	}
	rec = httptest.NewRecorder()
	invalidToken("token expired", nil).Challenge("https://m/x", []string{"mcp"}).Write(rec)
	if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") != `Bearer resource_metadata="https://m/x", scope="mcp", error="invalid_token", error_description="token expired"` {
		t.Errorf("invalid_token: %d %v", rec.Code, rec.Header())
	}
}

func TestMetadata(t *testing.T) {
	for in, want := range map[string]string{
		"/mcp":                 "/.well-known/oauth-protected-resource/mcp",
		"/servers/github/mcp/": "/.well-known/oauth-protected-resource/servers/github/mcp",
		"":                     "/.well-known/oauth-protected-resource",
		"/":                    "/.well-known/oauth-protected-resource",
		"mcp":                  "/.well-known/oauth-protected-resource/mcp",
	} {
		if got := MetadataPath(in); got != want {
			t.Errorf("MetadataPath(%q) = %q, want %q", in, got, want)
		}
	}
	h := Metadata{Resource: "https://mcp.example.com/mcp", AuthorizationServers: []string{"https://as.example.com"},
		ScopesSupported: []string{"mcp"}}.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/.well-known/oauth-protected-resource/mcp", nil))
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != 200 {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body)
	}
	if m["resource"] != "https://mcp.example.com/mcp" || len(m["authorization_servers"].([]any)) != 1 ||
		m["bearer_methods_supported"].([]any)[0] != "header" || m["resource_name"] != nil {
		t.Errorf("document %v", m)
	}
	if rec.Header().Get("Access-Control-Allow-Origin") != "*" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET headers %v", rec.Header())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("HEAD", "/", nil))
	if rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("HEAD: %d %q", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("OPTIONS", "/", nil))
	if rec.Code != 204 || !strings.Contains(rec.Header().Get("Access-Control-Allow-Headers"), "MCP-Protocol-Version") {
		t.Errorf("OPTIONS: %d %v", rec.Code, rec.Header())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/", nil))
	if rec.Code != 405 || rec.Header().Get("Allow") == "" {
		t.Errorf("POST: %d %v", rec.Code, rec.Header())
	}
}
