package authn

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
	"go.uber.org/goleak"
)

// TestCloseStopsFetches: a request facing a JWKS endpoint that hangs
// returns within FetchWait, and Close ends the fetch still under way:
// no goroutine of the Verifier outlives it.
func TestCloseStopsFetches(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	iss.SetJWKSDelay(time.Hour)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	iss.AddOpaque("opaque", answer(iss, time.Now().Add(time.Hour), nil))
	v, err := New(Options{Issuer: iss.URL, Audiences: []string{aud},
		Introspection: &Introspection{URL: iss.IntrospectionURL()},
		HTTPClient:    &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = v.Verify(context.Background(), iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{}))
	if d := time.Since(start); d > FetchWait+time.Second {
		t.Errorf("Verify waited %v", d)
	}
	refused(t, err, CodeUnavailable, "")
	done := make(chan struct{})
	go func() { v.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the fetch under way")
	}
	for _, tok := range []string{iss.Mint(t, iss.Claims("bob", aud), authntest.MintOptions{}), "opaque"} {
		_, err = v.Verify(context.Background(), tok)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeUnavailable {
			t.Fatalf("after Close: %v", err)
		}
	}
}

// TestVerifyHonoursContext: a caller's context ends the wait for a slow
// fetch.
func TestVerifyHonoursContext(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, nil)
	iss.SetJWKSDelay(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{}))
	refused(t, err, CodeUnavailable, "")
	if d := time.Since(start); d > time.Second {
		t.Errorf("Verify outlived its context by %v", d)
	}
}

// FuzzVerify feeds requests through Extract and Verify: nothing panics,
// every error is an *Error that holds nothing of the token, and only the
// genuine token is accepted.
func FuzzVerify(f *testing.F) {
	iss := authntest.Start(f, authntest.Options{InMemory: true})
	v, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client(),
		Introspection: &Introspection{URL: iss.IntrospectionURL()}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { v.Close() })
	good := iss.Mint(f, iss.Claims("alice", aud), authntest.MintOptions{})
	goodEC := iss.Mint(f, iss.Claims("alice", aud), authntest.MintOptions{Alg: "ES256"})
	iss.AddOpaque("opaque-good", answer(iss, time.Now().Add(time.Hour), nil))
	genuine := map[[32]byte]bool{sha256.Sum256([]byte(good)): true, sha256.Sum256([]byte(goodEC)): true,
		sha256.Sum256([]byte("opaque-good")): true}
	for _, s := range []struct{ auth, query string }{
		{"Bearer " + good, ""},
		{"Bearer " + goodEC, ""},
		{"bearer opaque-good", ""},
		{"Bearer " + authntest.NoneToken(iss.Claims("alice", aud)), ""},
		{"Bearer " + iss.HS256WithPublicKey(f, iss.Claims("alice", aud)), ""},
		{"Bearer " + authntest.Tamper(good, iss.Claims("mallory", aud)), ""},
		{"Bearer " + good, "access_token=" + good},
		{"", "access_token=" + good},
		{"Basic dXNlcjpwYXNz", ""},
		{"Bearer a.b.c", ""},
		{"Bearer e30.e30.", ""},
		{"Bearer ..", ""},
		{"Bearer " + strings.Repeat("A", 100) + "." + strings.Repeat("B", 100) + ".", ""},
	} {
		f.Add(s.auth, s.query)
	}
	f.Fuzz(func(t *testing.T, auth, query string) {
		r := httptest.NewRequest("GET", "/mcp", nil)
		r.URL.RawQuery = query
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		tok, err := Extract(r)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidRequest {
				t.Fatalf("Extract: %v", err)
			}
			return
		}
		if tok == "" {
			return
		}
		id, err := v.Verify(context.Background(), tok)
		if err == nil {
			if !genuine[sha256.Sum256([]byte(tok))] || id.Subject != "alice" {
				t.Fatalf("accepted a token never issued: %q", tok)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Verify: %v (%T)", err, err)
		}
		if len(tok) >= 8 && strings.Contains(e.Error(), tok) {
			t.Fatalf("error %q holds the token", e.Error())
		}
	})
}

// TestCloseWaitsForItsFetch: when Close returns, the fetch it stopped has
// ended (not merely been told to).
func TestCloseWaitsForItsFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		iss := authntest.Start(t, authntest.Options{InMemory: true})
		iss.SetJWKSDelay(time.Hour)
		v, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(context.Background(), iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{}))
		refused(t, err, CodeUnavailable, "")
		if iss.JWKSInFlight() != 1 {
			t.Fatalf("%d JWKS requests under way, want 1", iss.JWKSInFlight())
		}
		v.Close()
		if n := iss.JWKSInFlight(); n != 0 {
			t.Fatalf("Close returned with %d JWKS requests under way", n)
		}
	})
}

// An issuer that makes its signing key at its first token (Ory Hydra
// does) publishes it after serve's prefetch: the first token signed with
// it fetches the keys again at once, not after the refetch interval.
func TestNewKeyJustAfterPrefetch(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	v, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.Prefetch(t.Context()); err != nil {
		t.Fatal(err)
	}
	k := iss.NewKey(t, "RS256")
	iss.Publish(k)
	tok := iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: k})
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("a token of a key made after the prefetch: %v", err)
	}
	// Later unknown keys are rate-limited as ever.
	k2 := iss.NewKey(t, "RS256")
	iss.Publish(k2)
	if _, err := v.Verify(t.Context(), iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: k2})); err == nil {
		t.Fatal("a second new key within the refetch interval was fetched at once")
	}
}
