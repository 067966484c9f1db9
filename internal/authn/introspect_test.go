package authn

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
	"github.com/mcpvisor/mcpvisor/internal/identity"
)

func answer(iss *authntest.Issuer, exp time.Time, mod func(map[string]any)) map[string]any {
	a := map[string]any{"active": true, "iss": iss.URL, "sub": "alice", "client_id": "c1",
		"scope": "mcp admin", "aud": []string{aud}, "exp": exp.Unix(), "iat": time.Now().Unix(),
		"token_use": "access_token"}
	if mod != nil {
		mod(a)
	}
	return a
}

func TestIntrospection(t *testing.T) {
	ctx := context.Background()
	iss, v := setup(t, authntest.Options{IntrospectionClientID: "rs:1", IntrospectionSecret: "s e/cret"}, func(o *Options) {
		o.Introspection = &Introspection{ClientID: "rs:1", ClientSecret: "s e/cret"} // URL from metadata
	})
	exp := time.Now().Add(time.Hour)
	iss.AddOpaque("ory_at_good", answer(iss, exp, nil))
	id, err := v.Verify(ctx, "ory_at_good")
	if err != nil {
		t.Fatal(err)
	}
	if id.Kind != identity.Token || id.Subject != "alice" || id.ClientID != "c1" || strings.Join(id.Scopes, ",") != "mcp,admin" ||
		id.Expiry.Unix() != exp.Unix() {
		t.Errorf("identity %+v", id)
	}
	// An opaque token with dots is no JWT: it is introspected.
	iss.AddOpaque("abc.def.ghi", answer(iss, exp, nil))
	if _, err := v.Verify(ctx, "abc.def.ghi"); err != nil {
		t.Fatalf("opaque token with dots: %v", err)
	}
	bad := map[string]struct {
		answer map[string]any
		desc   string
	}{
		"ory_at_inactive":  {map[string]any{"active": false}, "not active"},
		"ory_at_unknown":   {nil, "not active"},
		"ory_at_expired":   {answer(iss, time.Now().Add(-2*time.Minute), nil), "expired"},
		"ory_at_no_exp":    {answer(iss, exp, func(a map[string]any) { delete(a, "exp") }), "required claim"},
		"ory_at_wrong_aud": {answer(iss, exp, func(a map[string]any) { a["aud"] = "https://other.example.com/mcp" }), "not for this resource"},
		"ory_at_no_aud":    {answer(iss, exp, func(a map[string]any) { delete(a, "aud") }), "not for this resource"},
		"ory_at_wrong_iss": {answer(iss, exp, func(a map[string]any) { a["iss"] = "https://evil.example.com" }), "another issuer"},
		"ory_at_nbf":       {answer(iss, exp, func(a map[string]any) { a["nbf"] = time.Now().Add(time.Hour).Unix() }), "not valid yet"},
		"ory_at_refresh":   {answer(iss, exp, func(a map[string]any) { a["token_use"] = "refresh_token" }), "not an access token"},
		"ory_at_no_sub":    {answer(iss, exp, func(a map[string]any) { delete(a, "sub") }), "no subject"},
	}
	for tok, c := range bad {
		if c.answer != nil {
			iss.AddOpaque(tok, c.answer)
		}
		_, err := v.Verify(ctx, tok)
		e := refused(t, err, CodeInvalidToken, tok)
		if !strings.Contains(e.Description, c.desc) {
			t.Errorf("%s: description %q, want %q", tok, e.Description, c.desc)
		}
	}

	// Wrong client credentials: the endpoint refuses mcpvisor, which is
	// not the client's fault.
	v2, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client(),
		Introspection: &Introspection{URL: iss.IntrospectionURL(), ClientID: "rs:1", ClientSecret: "wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	_, err = v2.Verify(ctx, "ory_at_good")
	refused(t, err, CodeUnavailable, "ory_at_good")
}

// TestIntrospectionCachedUntilExp: N verifies of one opaque token make one
// introspection call, and none is answered from the cache past its exp.
func TestIntrospectionCachedUntilExp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, func(o *Options) {
			o.Introspection = &Introspection{URL: "https://issuer.test/introspect"}
			o.Skew = time.Second
		})
		ctx := context.Background()
		iss.AddOpaque("opaque-1", answer(iss, time.Now().Add(10*time.Second), nil))
		for range 20 {
			if _, err := v.Verify(ctx, "opaque-1"); err != nil {
				t.Fatal(err)
			}
		}
		if n := iss.Introspections(); n != 1 {
			t.Fatalf("20 verifies: %d introspection calls, want 1", n)
		}
		time.Sleep(9 * time.Second)
		if _, err := v.Verify(ctx, "opaque-1"); err != nil || iss.Introspections() != 1 {
			t.Fatalf("before exp: err %v, %d calls", err, iss.Introspections())
		}
		time.Sleep(3 * time.Second)
		_, err := v.Verify(ctx, "opaque-1")
		refused(t, err, CodeInvalidToken, "opaque-1")
		if n := iss.Introspections(); n != 2 {
			t.Fatalf("past exp: %d introspection calls, want 2 (the cache answered)", n)
		}
	})
}

// TestVerifiedCacheNeverOutlivesExp: a cached JWT is refused once its exp
// (with the skew) has passed, and the cache stays within its bound.
func TestVerifiedCacheNeverOutlivesExp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, func(o *Options) { o.Skew = time.Second })
		ctx := context.Background()
		claims := iss.Claims("alice", aud)
		claims["exp"] = time.Now().Add(10 * time.Second).Unix()
		tok := iss.Mint(t, claims, authntest.MintOptions{})
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatal(err)
		}
		if v.cache.len() != 1 {
			t.Fatalf("cache holds %d", v.cache.len())
		}
		time.Sleep(10 * time.Second)
		if v.cache.get(sha(tok), time.Now()) != nil {
			t.Fatal("the cache answers at exp")
		}
		time.Sleep(2 * time.Second)
		_, err := v.Verify(ctx, tok)
		refused(t, err, CodeInvalidToken, tok)
		if v.cache.len() != 0 {
			t.Fatalf("expired entry kept: cache holds %d", v.cache.len())
		}
	})
}

func TestVerifiedCacheIsBounded(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, func(o *Options) { o.CacheSize = 16 })
	ctx := context.Background()
	var last string
	for i := range 100 {
		last = iss.Mint(t, iss.Claims("u"+string(rune('a'+i%26)), aud), authntest.MintOptions{Alg: "ES256"})
		if _, err := v.Verify(ctx, last); err != nil {
			t.Fatal(err)
		}
		if n := v.cache.len(); n > 16 {
			t.Fatalf("cache holds %d, bound 16", n)
		}
	}
	if v.cache.get(sha(last), time.Now()) == nil {
		t.Error("the last token is not cached")
	}
}

// TestConcurrentVerify runs good and bad tokens of both kinds from many
// goroutines (meaningful under -race) while the keys rotate.
func TestConcurrentVerify(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, func(o *Options) {
		o.Introspection = &Introspection{URL: "https://issuer.test/introspect"}
		o.CacheSize = 8
	})
	ctx := context.Background()
	iss.AddOpaque("opaque-c", answer(iss, time.Now().Add(time.Hour), nil))
	var good, bad []string
	for i := range 12 {
		alg := []string{"RS256", "ES256"}[i%2]
		good = append(good, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Alg: alg}))
		bad = append(bad, iss.Mint(t, iss.Claims("alice", "https://nope.example.com"), authntest.MintOptions{Alg: alg}))
	}
	good = append(good, "opaque-c")
	bad = append(bad, "opaque-nope", authntest.NoneToken(iss.Claims("alice", aud)))
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 60 {
				if id, err := v.Verify(ctx, good[(g+i)%len(good)]); err != nil || id.Subject != "alice" {
					t.Errorf("good token: %v", err)
					return
				}
				if _, err := v.Verify(ctx, bad[(g+i)%len(bad)]); err == nil {
					t.Error("bad token accepted")
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 3 {
			iss.Publish(iss.NewKey(t, "ES256"))
		}
	})
	wg.Wait()
}

// TestIntrospectionFloodIsBounded: many made-up opaque tokens at once
// reach the introspection endpoint at most MaxIntrospections at a time,
// and no request waits for a slot longer than FetchWait.
func TestIntrospectionFloodIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, func(o *Options) {
			o.Introspection = &Introspection{URL: "https://issuer.test/introspect"}
		})
		iss.SetIntrospectionDelay(500 * time.Millisecond)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			longest time.Duration
			codes   = map[string]int{}
		)
		for i := range 200 {
			wg.Go(func() {
				t0 := time.Now()
				_, err := v.Verify(context.Background(), "made-up-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String())
				var e *Error
				if !errors.As(err, &e) {
					t.Errorf("made-up token: %v", err)
					return
				}
				mu.Lock()
				codes[e.Code]++
				longest = max(longest, time.Since(t0))
				mu.Unlock()
			})
		}
		wg.Wait()
		if m := iss.IntrospectionsMaxInFlight(); m > MaxIntrospections {
			t.Errorf("%d introspections at once, bound %d", m, MaxIntrospections)
		}
		if longest > FetchWait+500*time.Millisecond {
			t.Errorf("a request took %v", longest)
		}
		if codes[CodeInvalidToken] == 0 || codes[CodeUnavailable] == 0 {
			t.Errorf("codes %v: want some refused as inactive and some turned away as busy", codes)
		}
		t.Logf("max in flight %d, longest %v, codes %v", iss.IntrospectionsMaxInFlight(), longest, codes)
	})
}
