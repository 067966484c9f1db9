package oauthclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// stubAS answers refresh_token grants with a one-hour token.
func stubAS(t *testing.T, calls *atomic.Int32) *http.Client {
	return &http.Client{Transport: rtFunc(func(r *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(b))
		if r.URL.Path != "/token" || form.Get("grant_type") != "refresh_token" || form.Get("resource") != "https://mcp.example.com/mcp" {
			t.Errorf("unexpected request %s %v", r.URL, form)
		}
		n := calls.Add(1)
		body := fmt.Sprintf(`{"access_token":"tok-%d","token_type":"Bearer","expires_in":3600,"refresh_token":"ref-%d"}`, n, n)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	})}
}

func storedRecord(t *testing.T, refresh string, life time.Duration) *memStore {
	now := time.Now()
	r := record{V: 1, Tokens: &tokenSet{Issuer: "https://as.example.com", ClientID: "c", ClientKind: kindCIMD, AuthMethod: AuthNone,
		TokenEndpoint: "https://as.example.com/token", Resource: "https://mcp.example.com/mcp",
		Access: "tok-0", Refresh: refresh, Obtained: now, Expiry: now.Add(life)}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return &memStore{data: b}
}

func TestRefreshTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		store := storedRecord(t, "ref-0", time.Hour)
		g := New(Settings{Resource: "https://mcp.example.com/mcp"}, store, stubAS(t, &calls), nil)
		ctx := t.Context()
		time.Sleep(time.Hour - 61*time.Second)
		if tok, err := g.Token(ctx); err != nil || tok != "tok-0" || calls.Load() != 0 {
			t.Fatalf("61 s before expiry: %q %v, %d refreshes", tok, err, calls.Load())
		}
		time.Sleep(2 * time.Second)
		if tok, err := g.Token(ctx); err != nil || tok != "tok-1" || calls.Load() != 1 {
			t.Fatalf("59 s before expiry: %q %v, %d refreshes", tok, err, calls.Load())
		}
		if i := g.Info(); !i.Expiry.Equal(time.Now().Add(time.Hour)) || i.State != StateLoggedIn {
			t.Fatalf("info after refresh %+v", i)
		}
	})
}

func TestShortLivedTokenRefreshesAtTenPercent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		g := New(Settings{Resource: "https://mcp.example.com/mcp"}, storedRecord(t, "ref-0", 100*time.Second), stubAS(t, &calls), nil)
		time.Sleep(89 * time.Second)
		if _, err := g.Token(t.Context()); err != nil || calls.Load() != 0 {
			t.Fatalf("at 89 s of 100: %v, %d refreshes", err, calls.Load())
		}
		time.Sleep(2 * time.Second)
		if _, err := g.Token(t.Context()); err != nil || calls.Load() != 1 {
			t.Fatalf("at 91 s of 100: %v, %d refreshes", err, calls.Load())
		}
	})
}

func TestExpiryWithoutRefreshToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		g := New(Settings{Resource: "https://mcp.example.com/mcp"}, storedRecord(t, "", time.Hour), stubAS(t, &calls), nil)
		time.Sleep(time.Hour - time.Second)
		if tok, err := g.Token(t.Context()); err != nil || tok != "tok-0" {
			t.Fatalf("just before expiry: %v", err)
		}
		time.Sleep(time.Second)
		_, err := g.Token(t.Context())
		wantNeedsLogin(t, err, ReasonExpired)
		if i := g.Info(); i.State != StateNeedsLogin || i.Reason != ReasonExpired {
			t.Fatalf("info %+v", i)
		}
		if calls.Load() != 0 {
			t.Fatal("a request without a refresh token")
		}
	})
}

func TestStoreLoadErrorIsReported(t *testing.T) {
	g := New(Settings{Resource: "https://mcp.example.com/mcp"}, failingStore{}, nil, nil)
	if _, err := g.Token(t.Context()); err == nil || errors.Is(err, ErrNeedsLogin) || !strings.Contains(err.Error(), "keyring locked") {
		t.Fatalf("Token with a failing store: %v", err)
	}
}

type failingStore struct{}

func (failingStore) Load(ctx context.Context) ([]byte, error) {
	return nil, errors.New("keyring locked")
}
func (failingStore) Save(context.Context, []byte) error { return errors.New("keyring locked") }
func (failingStore) Delete(context.Context) error       { return errors.New("keyring locked") }

func TestParseChallenge(t *testing.T) {
	cases := []struct {
		in   string
		want Challenge
	}{
		{`Bearer error="invalid_token", error_description="Missing Authorization header", resource_metadata="http://localhost:1/.well-known/oauth-protected-resource/mcp"`,
			Challenge{Error: "invalid_token", ResourceMetadata: "http://localhost:1/.well-known/oauth-protected-resource/mcp"}},
		{`Bearer scope="mcp:write", resource_metadata="http://x/p", error="insufficient_scope"`,
			Challenge{Error: "insufficient_scope", Scope: []string{"mcp:write"}, ResourceMetadata: "http://x/p"}},
		{`Basic realm="x", Bearer scope="a b"`, Challenge{Scope: []string{"a", "b"}}},
		{`bearer error=invalid_token,scope="a\"b"`, Challenge{Error: "invalid_token", Scope: []string{`a"b`}}},
		{`Basic realm="x"`, Challenge{}},
		{``, Challenge{}},
	}
	for _, c := range cases {
		got := ParseChallenge(c.in)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("ParseChallenge(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestResourceMatches(t *testing.T) {
	cases := []struct {
		prm, conf string
		ok        bool
	}{
		{"http://localhost:1/mcp", "http://localhost:1/mcp", true},
		{"http://localhost:1", "http://localhost:1/mcp", true},
		{"http://localhost:1/", "http://localhost:1/mcp", true},
		{"http://localhost:1/api", "http://localhost:1/api/mcp", true},
		{"http://localhost:1/ap", "http://localhost:1/api/mcp", false},
		{"https://evil.example.com/mcp", "http://localhost:1/mcp", false},
		{"http://localhost:2/mcp", "http://localhost:1/mcp", false},
		{"https://localhost:1/mcp", "http://localhost:1/mcp", false},
		{"http://localhost:1/mcp/more", "http://localhost:1/mcp", false},
		{"", "http://localhost:1/mcp", false},
	}
	for _, c := range cases {
		if got := resourceMatches(c.prm, c.conf); got != c.ok {
			t.Errorf("resourceMatches(%q, %q) = %t", c.prm, c.conf, got)
		}
	}
}

func TestTricklingDocumentIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		_, _ = w.Write([]byte("{"))
		for range 100 {
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			_, _ = w.Write([]byte(" "))
		}
	}))
	defer srv.Close()
	g := New(Settings{Resource: srv.URL + "/mcp", Timeout: 200 * time.Millisecond}, &memStore{}, nil, nil)
	start := time.Now()
	_, err := g.Begin(t.Context(), "http://127.0.0.1:1/cb")
	if err == nil || !strings.Contains(err.Error(), "timed out") || time.Since(start) > 2*time.Second {
		t.Fatalf("Begin = %v after %v", err, time.Since(start))
	}
}
