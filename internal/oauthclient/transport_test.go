package oauthclient

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
)

func TestRoundTripper(t *testing.T) {
	var otherAuth atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherAuth.Store(r.Header.Get("Authorization"))
		_, _ = w.Write([]byte("elsewhere"))
	}))
	defer other.Close()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("away") {
			http.Redirect(w, r, other.URL, http.StatusFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	f := newFixture(t, oauthtest.Options{RefreshTokens: true, Handler: echo}, Settings{})
	hc := &http.Client{Transport: f.g.RoundTripper(nil)}
	post := func(u string) (string, error) {
		resp, err := hc.Post(u, "text/plain", strings.NewReader("the body"))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	// No record: sent without a token; the 401 asks for a login.
	_, err := post(f.srv.URL)
	if !errors.Is(err, ErrNeedsLogin) {
		t.Fatalf("before login: %v", err)
	}
	f.mustLogin()
	if got, err := post(f.srv.URL); err != nil || got != "the body" {
		t.Fatalf("after login: %q %v", got, err)
	}
	// A rejected token is refreshed and the request sent again, body and all.
	f.srv.ExpireAccessTokens()
	if got, err := post(f.srv.URL); err != nil || got != "the body" || f.srv.Count("refresh") != 1 {
		t.Fatalf("after a 401: %q %v, %d refreshes", got, err, f.srv.Count("refresh"))
	}
	// The token never goes to another host.
	if got, err := post(f.srv.URL + "?away"); err != nil || got != "elsewhere" {
		t.Fatalf("redirect: %q %v", got, err)
	}
	if a, _ := otherAuth.Load().(string); a != "" {
		t.Fatal("the token reached another host")
	}
}
