package oauthclient

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signer holds a parsed private_key_jwt key.
type signer struct {
	key    any
	method jwt.SigningMethod
}

func parseSigner(pemBytes []byte, alg string) (*signer, error) {
	if len(pemBytes) == 0 {
		return nil, errors.New("private_key_jwt needs a private key")
	}
	var key any
	if k, err := jwt.ParseECPrivateKeyFromPEM(pemBytes); err == nil {
		key = k
	} else if k, err := jwt.ParseRSAPrivateKeyFromPEM(pemBytes); err == nil {
		key = k
	} else {
		return nil, errors.New("private key: not a PEM EC or RSA private key")
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if alg == "" {
			alg = "ES256"
		}
		if alg != "ES256" || k.Curve.Params().BitSize != 256 {
			return nil, fmt.Errorf("private key: signing algorithm %s does not fit an EC P-%d key (want ES256 with P-256)", alg, k.Curve.Params().BitSize)
		}
		return &signer{key: k, method: jwt.SigningMethodES256}, nil
	case *rsa.PrivateKey:
		if alg == "" {
			alg = "RS256"
		}
		if alg != "RS256" {
			return nil, fmt.Errorf("private key: signing algorithm %s does not fit an RSA key (want RS256)", alg)
		}
		return &signer{key: k, method: jwt.SigningMethodRS256}, nil
	}
	return nil, errors.New("private key: unsupported key type")
}

// assertion builds a fresh RFC 7523 client assertion: iss = sub = client
// id, aud = the authorization server's issuer, a short life, a unique jti.
func (g *Grant) assertion(ca clientAuth) (string, error) {
	if g.signErr != nil {
		return "", g.signErr
	}
	if g.sign == nil {
		return "", errors.New("private_key_jwt needs a private key")
	}
	now := time.Now()
	jti := make([]byte, 16)
	_, _ = rand.Read(jti)
	claims := jwt.RegisteredClaims{
		Issuer:    ca.id,
		Subject:   ca.id,
		Audience:  jwt.ClaimStrings{ca.audience},
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now.Add(-5 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(60 * time.Second)),
		ID:        hex.EncodeToString(jti),
	}
	s, err := jwt.NewWithClaims(g.sign.method, claims).SignedString(g.sign.key)
	if err != nil {
		return "", fmt.Errorf("signing the client assertion: %v", err)
	}
	return s, nil
}
