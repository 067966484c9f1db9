package authn

import (
	"context"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
)

func benchVerifier(b *testing.B, cacheSize int) (*authntest.Issuer, *Verifier) {
	iss := authntest.Start(b, authntest.Options{InMemory: true})
	v, err := New(Options{Issuer: iss.URL, Audiences: []string{aud}, HTTPClient: iss.Client(), CacheSize: cacheSize})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	return iss, v
}

// BenchmarkVerifyCached is the cost per request of a token verified
// before: a SHA-256 of the token, a map lookup, the exp check.
func BenchmarkVerifyCached(b *testing.B) {
	for _, alg := range []string{"RS256", "ES256"} {
		b.Run(alg, func(b *testing.B) {
			iss, v := benchVerifier(b, 0)
			claims := iss.Claims("alice", aud)
			claims["groups"] = []any{"ops", "dev"}
			tok := iss.Mint(b, claims, authntest.MintOptions{Alg: alg})
			ctx := context.Background()
			if _, err := v.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyFirst is the cost of a token's first verification with
// the JWKS cached: parsing, the signature, the claims, the identity.
func BenchmarkVerifyFirst(b *testing.B) {
	for _, alg := range []string{"RS256", "ES256"} {
		b.Run(alg, func(b *testing.B) {
			iss, v := benchVerifier(b, -1)
			claims := iss.Claims("alice", aud)
			claims["groups"] = []any{"ops", "dev"}
			tok := iss.Mint(b, claims, authntest.MintOptions{Alg: alg})
			ctx := context.Background()
			if _, err := v.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
