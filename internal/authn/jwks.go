package authn

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
)

// jwk is one verification key of the issuer's JWKS (RFC 7517).
type jwk struct {
	kid string
	alg string // the key's "alg", "" if none
	key crypto.PublicKey
}

type rawJWK struct {
	Kty    string   `json:"kty"`
	Kid    string   `json:"kid"`
	Use    string   `json:"use"`
	Alg    string   `json:"alg"`
	KeyOps []string `json:"key_ops"`
	N      string   `json:"n"`
	E      string   `json:"e"`
	Crv    string   `json:"crv"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
	D      string   `json:"d"`
}

// parseJWKS reads a JWKS document, keeping the public signature keys it
// understands (RSA ≥ 2048 bits, EC P-256/P-384/P-521, Ed25519) and
// skipping the rest: keys for encryption (use "enc"), without "verify" in
// key_ops, symmetric keys, private keys, unknown types.
func parseJWKS(data []byte) ([]jwk, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, errorf("JWKS is not JSON: %v", err)
	}
	if doc.Keys == nil {
		return nil, errorf("JWKS has no keys member")
	}
	var out []jwk
	for _, raw := range doc.Keys {
		var k rawJWK
		if json.Unmarshal(raw, &k) != nil {
			continue
		}
		if k.Use != "" && k.Use != "sig" || k.D != "" {
			continue
		}
		if k.KeyOps != nil && !contains(k.KeyOps, "verify") {
			continue
		}
		pub := k.public()
		if pub == nil {
			continue
		}
		out = append(out, jwk{kid: k.Kid, alg: k.Alg, key: pub})
	}
	return out, nil
}

func (k *rawJWK) public() crypto.PublicKey {
	b64 := func(s string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			return nil
		}
		return b
	}
	switch k.Kty {
	case "RSA":
		n, e := b64(k.N), b64(k.E)
		if len(n) < 256 || len(e) == 0 || len(e) > 4 {
			return nil
		}
		ei := new(big.Int).SetBytes(e)
		if !ei.IsInt64() || ei.Int64() < 3 || ei.Int64()%2 == 0 {
			return nil
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(ei.Int64())}
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil
		}
		x, y := b64(k.X), b64(k.Y)
		size := (curve.Params().BitSize + 7) / 8
		if len(x) != size || len(y) != size {
			return nil
		}
		// Check the point is on the curve by the non-deprecated path.
		uncompressed := append(append([]byte{4}, x...), y...)
		pk, err := ecdsa.ParseUncompressedPublicKey(curve, uncompressed)
		if err != nil {
			return nil
		}
		return pk
	case "OKP":
		x := b64(k.X)
		if k.Crv != "Ed25519" || len(x) != ed25519.PublicKeySize {
			return nil
		}
		return ed25519.PublicKey(x)
	}
	return nil
}

// fits reports whether key can verify a signature of algorithm alg: the
// key's type (and curve) must be alg's, and a key that names an alg must
// name this one.
func (k *jwk) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		_, ok := k.key.(*rsa.PublicKey)
		return ok
	case "ES256", "ES384", "ES512":
		pk, ok := k.key.(*ecdsa.PublicKey)
		if !ok {
			return false
		}
		want := map[string]int{"ES256": 256, "ES384": 384, "ES512": 521}[alg]
		return pk.Curve.Params().BitSize == want
	case "EdDSA":
		_, ok := k.key.(ed25519.PublicKey)
		return ok
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
