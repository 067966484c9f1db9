package replica

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mcpvisor/mcpvisor/internal/link"
)

// Ring holds the Keys in force. A reload Sets new ones; what reads the
// Ring (the TLS configs at each handshake, the callers at each stamp)
// sees them from then on. Safe for concurrent use.
type Ring struct {
	keys atomic.Pointer[Keys]

	mu      sync.Mutex // makes the leaf
	leafKey ed25519.PrivateKey
	leaf    atomic.Pointer[leafCert]
}

// leafCert is this process's peer certificate, signed by the CA whose
// public key is ca.
type leafCert struct {
	ca   ed25519.PublicKey
	cert *tls.Certificate
}

// NewRing returns a Ring holding k.
func NewRing(k *Keys) *Ring {
	r := &Ring{}
	r.keys.Store(k)
	return r
}

// Load returns the Keys in force.
func (r *Ring) Load() *Keys { return r.keys.Load() }

// Set puts k in force: the next handshake, stamp or header uses it.
// Connections already made are not handshaken again: to end those made
// under a key no longer accepted (a key removed because it leaked),
// close them — the peers' idle connections (their http.Transport's
// CloseIdleConnections) and the listener's.
func (r *Ring) Set(k *Keys) { r.keys.Store(k) }

var errNoKeys = errors.New("replica peer TLS: no peer keys")

// leafFor returns this process's certificate for k: its leaf key (made
// at the first call) certified by k's signing CA. It is made again when
// the signing key changes.
func (r *Ring) leafFor(k *Keys) (*tls.Certificate, error) {
	if k == nil {
		return nil, errNoKeys
	}
	ca := k.cas[0]
	caPub := ca.key.Public().(ed25519.PublicKey)
	if l := r.leaf.Load(); l != nil && l.ca.Equal(caPub) {
		return l.cert, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.leaf.Load(); l != nil && l.ca.Equal(caPub) {
		return l.cert, nil
	}
	if r.leafKey == nil {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("replica peer TLS: %w", err)
		}
		r.leafKey = priv
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("replica peer TLS: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "mcpvisor replica"},
		NotBefore:    caNotBefore,
		NotAfter:     caNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, r.leafKey.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("replica peer TLS: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("replica peer TLS: %w", err)
	}
	cert := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: r.leafKey, Leaf: leaf}
	r.leaf.Store(&leafCert{ca: caPub, cert: cert})
	return cert, nil
}

// verifyPeer accepts the peer of cs iff its certificate is signed by the
// CA of one of k's keys, for usage.
func (k *Keys) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage) error {
	if k == nil {
		return errNoKeys
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("replica peer TLS: the peer sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	_, err := leaf.Verify(x509.VerifyOptions{Roots: k.pool, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return fmt.Errorf("replica peer TLS: the peer's certificate (issuer %q) is signed by the CA of no accepted key (accepted: %s): %w",
			leaf.Issuer.CommonName, strings.Join(k.ids, ", "), err)
	}
	return nil
}

// nextProtos are offered by both sides: net/http's servers and
// transports pick HTTP/2 or HTTP/1.1 by them. The server offers the
// forwarding hop's link (package link) too, which a client asks for
// alone.
var nextProtos = []string{"h2", "http/1.1"}

// ServerTLS returns the TLS config of a replica's peer listener. It
// requires a client certificate and accepts it iff it is signed by the
// CA of a key accepted when the handshake is made; it presents this
// process's certificate for the signing key of then. Each handshake
// reads the Ring (GetConfigForClient takes one Keys for both), so a Set
// applies to the next connection without a new server.
//
// Session tickets are off: a resumed session would skip the client's
// certificate, and peers keep their connections long enough that a
// full handshake costs nothing. VerifyConnection, which also runs on
// resumption, checks anyway.
func (r *Ring) ServerTLS() *tls.Config {
	c := r.serverConfig(nil)
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		k := r.Load()
		if k == nil {
			return nil, errNoKeys
		}
		return r.serverConfig(k), nil
	}
	return c
}

// serverConfig is the server config for k, or one that reads the Ring
// when k is nil. The latter is only used when GetConfigForClient is
// not: by a caller who clears it, and by http.Server.ServeTLS's check
// that the config has a certificate.
func (r *Ring) serverConfig(k *Keys) *tls.Config {
	keys := func() *Keys {
		if k != nil {
			return k
		}
		return r.Load()
	}
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		NextProtos:             append([]string{link.Proto}, nextProtos...),
		ClientAuth:             tls.RequireAnyClientCert,
		SessionTicketsDisabled: true,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return r.leafFor(keys())
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return keys().verifyPeer(cs, x509.ExtKeyUsageClientAuth)
		},
	}
}

// ClientTLS returns the TLS config of a replica's requests to its
// peers: it presents this process's certificate for the signing key in
// force and accepts the server iff its certificate is signed by the CA
// of an accepted key, both read from the Ring at each handshake.
//
// It offers HTTP/2: an http.Transport using it must have HTTP/2 on
// (ForceAttemptHTTP2, or Protocols with HTTP2), or a server that picks
// it is spoken HTTP/1.1 to; one that speaks HTTP/1.1 only sets
// NextProtos to "http/1.1" in a clone.
func (r *Ring) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: slices.Clone(nextProtos),
		// The server is not checked by name: peers are addressed by pod
		// DNS names or loopback addresses, which no certificate could
		// list ahead of time, and what makes a peer is its key, not its
		// name. So the default verification, which is by name and by
		// the system's roots, is off, and VerifyConnection makes the
		// real check: a certificate signed by the CA of an accepted key.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.leafFor(r.Load())
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return r.Load().verifyPeer(cs, x509.ExtKeyUsageServerAuth)
		},
	}
}
