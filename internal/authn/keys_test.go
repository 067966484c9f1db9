package authn

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
)

// TestUnknownKidRefetchesOnceThenRefuses: an unknown kid refetches the
// JWKS once (if the last fetch is old enough) and is refused; another
// unknown kid right after makes no fetch; a rotated-in key is found by
// its refetch.
func TestUnknownKidRefetchesOnceThenRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, nil)
		ctx := context.Background()
		if _, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{})); err != nil {
			t.Fatal(err)
		}
		if n := iss.JWKSFetches(); n != 1 {
			t.Fatalf("%d JWKS fetches for the first token", n)
		}
		time.Sleep(RefetchInterval)
		stranger := iss.NewKey(t, "RS256")
		_, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: stranger}))
		refused(t, err, CodeInvalidToken, "")
		if n := iss.JWKSFetches(); n != 2 {
			t.Fatalf("unknown kid: %d JWKS fetches, want 2", n)
		}
		other := iss.NewKey(t, "ES256")
		_, err = v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: other}))
		refused(t, err, CodeInvalidToken, "")
		if n := iss.JWKSFetches(); n != 2 {
			t.Fatalf("second unknown kid within %v: %d JWKS fetches, want 2", RefetchInterval, n)
		}
		// Rotation: the new key is published; after the interval its
		// first token refetches and is accepted.
		time.Sleep(RefetchInterval)
		k := iss.Rotate(t)
		if _, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: k})); err != nil {
			t.Fatalf("rotated key: %v", err)
		}
		if n := iss.JWKSFetches(); n != 3 {
			t.Fatalf("rotation: %d JWKS fetches, want 3", n)
		}
	})
}

// TestUnknownKidFloodIsBounded: a flood of tokens with unknown kids, many
// at once and for a long time, makes at most one JWKS fetch per
// RefetchInterval, and no request waits longer than FetchWait, even with
// a JWKS endpoint that is slow or hangs.
func TestUnknownKidFloodIsBounded(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Second, time.Hour} {
		t.Run(fmt.Sprint("jwks delay ", delay), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				iss, v := setup(t, authntest.Options{}, nil)
				ctx := context.Background()
				if _, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{})); err != nil {
					t.Fatal(err)
				}
				iss.SetJWKSDelay(delay)
				stranger := iss.NewKey(t, "ES256")
				const seconds, perSecond = 30, 40
				start := time.Now()
				var (
					mu      sync.Mutex
					longest time.Duration
					wg      sync.WaitGroup
					codes   = map[string]int{}
				)
				for s := 0; s < seconds; s++ {
					for r := 0; r < perSecond; r++ {
						tok := iss.Mint(t, iss.Claims("mallory", aud), authntest.MintOptions{Key: stranger, Kid: fmt.Sprintf("k-%d-%d", s, r)})
						wg.Go(func() {
							t0 := time.Now()
							_, err := v.Verify(ctx, tok)
							d := time.Since(t0)
							var e *Error
							if !errors.As(err, &e) {
								t.Errorf("unknown kid: %v", err)
								return
							}
							mu.Lock()
							codes[e.Code]++
							longest = max(longest, d)
							mu.Unlock()
						})
					}
					time.Sleep(time.Second)
				}
				wg.Wait()
				elapsed := time.Since(start)
				bound := 1 + int(elapsed/RefetchInterval) + 1
				if n := iss.JWKSFetches(); n > bound {
					t.Errorf("%d requests over %v made %d JWKS fetches, bound %d", seconds*perSecond, elapsed, n, bound)
				}
				if longest > FetchWait {
					t.Errorf("a request waited %v, bound %v", longest, FetchWait)
				}
				if codes[CodeInvalidToken] == 0 {
					t.Errorf("no request refused as invalid_token: %v", codes)
				}
				t.Logf("fetches %d, longest wait %v, codes %v", iss.JWKSFetches(), longest, codes)
			})
		})
	}
}

// TestDiscoveryFailsThenRecovers: with the issuer down, Verify answers
// issuer_unavailable with a Retry-After, retries the discovery at a
// bounded rate, and verifies once the issuer is back.
func TestDiscoveryFailsThenRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, nil)
		ctx := context.Background()
		tok := iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{})
		iss.SetDown(true)
		for range 50 {
			_, err := v.Verify(ctx, tok)
			e := refused(t, err, CodeUnavailable, tok)
			if e.Status() != 503 || e.RetryAfter <= 0 || e.RetryAfter > RefetchInterval {
				t.Fatalf("unavailable: status %d retry %v", e.Status(), e.RetryAfter)
			}
		}
		if n := iss.MetadataFetches(); n > 2 {
			t.Fatalf("50 requests at once while down: %d metadata fetches", n)
		}
		iss.SetDown(false)
		time.Sleep(RefetchInterval)
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatalf("issuer back: %v", err)
		}
	})
}

func TestDiscovery(t *testing.T) {
	ctx := context.Background()
	t.Run("RFC 8414 with a path", func(t *testing.T) {
		iss, v := setup(t, authntest.Options{Path: "/realms/a"}, nil)
		if _, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{})); err != nil {
			t.Fatal(err)
		}
		if n := iss.MetadataFetches(); n != 1 {
			t.Errorf("%d metadata fetches", n)
		}
	})
	t.Run("OpenID Connect only", func(t *testing.T) {
		iss, v := setup(t, authntest.Options{OIDCOnly: true, Path: "/x"}, nil)
		if _, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{})); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("metadata names another issuer", func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, nil)
		iss.SetMetadataIssuer(iss.URL + "/")
		_, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{}))
		refused(t, err, CodeUnavailable, "")
	})
	t.Run("JWKS URL set: no discovery", func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, nil)
		v2, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client(), JWKSURL: iss.JWKSURL()})
		if err != nil {
			t.Fatal(err)
		}
		defer v2.Close()
		_ = v
		if _, err := v2.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{})); err != nil {
			t.Fatal(err)
		}
		if n := iss.MetadataFetches(); n != 0 {
			t.Errorf("%d metadata fetches", n)
		}
	})
	t.Run("listening on 127.0.0.1 with the default client", func(t *testing.T) {
		iss := authntest.Start(t, authntest.Options{})
		v, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}})
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		if _, err := v.Verify(ctx, iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Alg: "ES256"})); err != nil {
			t.Fatal(err)
		}
	})
}

func sha(tok string) [32]byte { return sha256.Sum256([]byte(tok)) }

// TestKeysRefreshInBackground: keys older than RefreshInterval are
// refetched at the next request, which does not wait for it; a key the
// refresh drops is then unknown (its cached tokens aside).
func TestKeysRefreshInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		iss, v := setup(t, authntest.Options{}, func(o *Options) { o.CacheSize = -1 })
		ctx := context.Background()
		if err := v.Prefetch(ctx); err != nil || iss.JWKSFetches() != 1 {
			t.Fatalf("Prefetch: %v, %d fetches", err, iss.JWKSFetches())
		}
		ec := iss.EC()
		tok := iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Key: ec})
		time.Sleep(RefreshInterval + time.Second)
		iss.Unpublish(ec)
		iss.SetJWKSDelay(time.Second)
		start := time.Now()
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatalf("with the old keys: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("the request waited %v for the background refresh", d)
		}
		synctest.Wait()
		time.Sleep(2 * time.Second)
		if n := iss.JWKSFetches(); n != 2 {
			t.Fatalf("%d JWKS fetches, want 2", n)
		}
		_, err := v.Verify(ctx, tok)
		refused(t, err, CodeInvalidToken, tok)
	})
}

func TestPrefetchReportsAnUnreachableIssuer(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, nil)
	iss.SetDown(true)
	refused(t, v.Prefetch(context.Background()), CodeUnavailable, "")
}
