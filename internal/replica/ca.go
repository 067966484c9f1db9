package replica

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"
)

// The peer CAs' validity: fixed, so that every process derives the
// same certificate from a key, and wide, so that neither a pod's clock
// nor the passing years refuse it. Leaves have it too.
var (
	caNotBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	caNotAfter  = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// caInfo is the HKDF info of a CA's key: a new scheme gets a new one.
const caInfo = "mcpvisor peer ca v1"

// peerCA is the CA derived from one key.
type peerCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

// deriveCA derives key's CA: an Ed25519 key from HKDF-SHA256(key, no
// salt, caInfo), and a self-signed certificate of fixed serial, validity
// and subject (which names the key's id). Ed25519 signatures are
// deterministic: every process derives the same certificate, byte for
// byte.
func deriveCA(key []byte) (*peerCA, error) {
	seed, err := hkdf.Key(sha256.New, key, nil, caInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mcpvisor peer CA " + keyID(key)},
		NotBefore:             caNotBefore,
		NotAfter:              caNotAfter,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	return &peerCA{key: priv, cert: cert}, nil
}
