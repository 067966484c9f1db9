package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
)

func TestParseJWKSKeepsOnlyPublicSignatureKeys(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{InMemory: true})
	resp, err := iss.Client().Get(iss.JWKSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf [1 << 14]byte
	n, _ := resp.Body.Read(buf[:])
	keys, err := parseJWKS(buf[:n])
	if err != nil || len(keys) != 2 {
		t.Fatalf("fake issuer's JWKS: %d keys, %v", len(keys), err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	raw, _ := ec.PublicKey.Bytes()
	b64 := base64.RawURLEncoding.EncodeToString
	x, y := b64(raw[1:33]), b64(raw[33:])
	badY := []byte(raw[33:])
	badY[31] ^= 1
	doc := `{"keys":[
		{"kty":"EC","crv":"P-256","kid":"good","x":"` + x + `","y":"` + y + `"},
		{"kty":"EC","crv":"P-256","kid":"enc","use":"enc","x":"` + x + `","y":"` + y + `"},
		{"kty":"EC","crv":"P-256","kid":"ops","key_ops":["encrypt"],"x":"` + x + `","y":"` + y + `"},
		{"kty":"EC","crv":"P-256","kid":"private","d":"AAAA","x":"` + x + `","y":"` + y + `"},
		{"kty":"EC","crv":"P-256","kid":"off-curve","x":"` + x + `","y":"` + b64(badY) + `"},
		{"kty":"EC","crv":"secp256k1","kid":"k1","x":"` + x + `","y":"` + y + `"},
		{"kty":"RSA","kid":"short","n":"` + b64(make([]byte, 128)) + `","e":"AQAB"},
		{"kty":"RSA","kid":"even-e","n":"` + b64(append([]byte{1}, make([]byte, 255)...)) + `","e":"Ag"},
		{"kty":"oct","kid":"hmac","k":"c2VjcmV0"},
		{"kty":"OKP","crv":"Ed25519","kid":"ed","x":"` + b64(make([]byte, 32)) + `"},
		"not an object"
	]}`
	keys, err = parseJWKS([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range keys {
		kids = append(kids, k.kid)
	}
	if len(kids) != 2 || kids[0] != "good" || kids[1] != "ed" {
		t.Errorf("kept %v, want [good ed]", kids)
	}
	for _, bad := range []string{"", "[]", `{"keys":null}`, `{"nokeys":[]}`} {
		if _, err := parseJWKS([]byte(bad)); err == nil {
			t.Errorf("JWKS %q accepted", bad)
		}
	}
}

// TestKeyAlgIsRespected: a JWK that names RS256 does not verify a PS256
// token signed by the same RSA key.
func TestKeyAlgIsRespected(t *testing.T) {
	iss, v := setup(t, authntest.Options{}, nil)
	tok := iss.Mint(t, iss.Claims("alice", aud), authntest.MintOptions{Alg: "PS256", Key: iss.RSA()})
	_, err := v.Verify(context.Background(), tok)
	refused(t, err, CodeInvalidToken, tok)
}
