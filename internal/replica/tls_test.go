package replica

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/link"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// refusedByUs is in every refusal of verifyPeer.
const refusedByUs = "signed by the CA of no accepted key"

// peer is a replica's peer listener: an http.Server on 127.0.0.1 with
// its Ring's ServerTLS, which answers who it is and which CA signed the
// client's certificate.
type peer struct {
	name string
	ring *Ring
	url  string
	errs chan string // the server's log: its handshake errors
}

// chanLog sends each line written to it on a channel, dropping what
// the channel has no room for.
type chanLog chan string

func (c chanLog) Write(p []byte) (int, error) {
	select {
	case c <- string(p):
	default:
	}
	return len(p), nil
}

func startPeer(t *testing.T, name string, k *Keys) *peer {
	t.Helper()
	p := &peer{name: name, ring: NewRing(k), errs: make(chan string, 64)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s, to %s", name, r.TLS.PeerCertificates[0].Issuer.CommonName)
		}),
		TLSConfig: p.ring.ServerTLS(),
		ErrorLog:  log.New(chanLog(p.errs), "", 0),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("%s: ServeTLS: %v", name, err)
		}
	})
	p.url = "https://" + ln.Addr().String() + "/"
	return p
}

// drain forgets what p logged so far.
func (p *peer) drain() {
	for {
		select {
		case <-p.errs:
		default:
			return
		}
	}
}

// logged waits for p's server to log a line holding want.
func (p *peer) logged(t *testing.T, want string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case line := <-p.errs:
			if strings.Contains(line, want) {
				return
			}
		case <-timeout.C:
			t.Fatalf("%s logged no %q", p.name, want)
		}
	}
}

// result is what a request saw.
type result struct {
	body   string // the server's answer: its name, and the client's CA
	proto  string
	server *x509.Certificate // the server's certificate
	err    error
}

// get makes one request to url through tr, on a new connection.
func get(t *testing.T, tr *http.Transport, url string) result {
	t.Helper()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{body: string(b), proto: resp.Proto, server: resp.TLS.PeerCertificates[0], err: err}
}

// call is a request from a to b, a's client to b's server.
func call(t *testing.T, a, b *peer) result {
	t.Helper()
	return get(t, transport(a.ring), b.url)
}

func caName(k *Keys) string { return "mcpvisor peer CA " + k.SigningID() }

// works checks that a reaches b, over HTTP/2, each presenting the
// certificate of its signing key's CA.
func works(t *testing.T, step string, a, b *peer) {
	t.Helper()
	r := call(t, a, b)
	if r.err != nil {
		t.Fatalf("%s: %s → %s: %v", step, a.name, b.name, r.err)
	}
	if want := b.name + ", to " + caName(a.ring.Load()); r.body != want {
		t.Errorf("%s: %s → %s: %q, want %q", step, a.name, b.name, r.body, want)
	}
	if got, want := r.server.Issuer.CommonName, caName(b.ring.Load()); got != want {
		t.Errorf("%s: %s → %s: the server's certificate is of %q, want %q", step, a.name, b.name, got, want)
	}
	if r.proto != "HTTP/2.0" {
		t.Errorf("%s: %s → %s: %s", step, a.name, b.name, r.proto)
	}
}

// refusedByClient checks that a's client refuses b's server.
func refusedByClient(t *testing.T, step string, a, b *peer) {
	t.Helper()
	if r := call(t, a, b); r.err == nil || !strings.Contains(r.err.Error(), refusedByUs) {
		t.Errorf("%s: %s → %s: %q %v; want %s's client to refuse", step, a.name, b.name, r.body, r.err, a.name)
	}
}

// refusedByServer checks that b's server refuses a's client, which
// accepts b.
func refusedByServer(t *testing.T, step string, a, b *peer) {
	t.Helper()
	b.drain()
	if r := call(t, a, b); r.err == nil {
		t.Fatalf("%s: %s → %s: %q; want %s's server to refuse", step, a.name, b.name, r.body, b.name)
	}
	b.logged(t, refusedByUs)
}

// A rotation over real TLS: A takes each step first, B follows; at each
// step they talk both ways, until B is left behind.
func TestRotation(t *testing.T) {
	oldK, newK := key("old"), key("new")
	a := startPeer(t, "A", mustKeys(t, oldK))
	b := startPeer(t, "B", mustKeys(t, oldK))
	works(t, "before", a, b)
	works(t, "before", b, a)

	// Step 1: A accepts the new key; B does not know it yet.
	a.ring.Set(mustKeys(t, oldK, newK))
	works(t, "step 1", a, b)
	works(t, "step 1", b, a)

	// Step 2: A signs with the new key, B (which took step 1 since)
	// still with the old; each accepts both.
	b.ring.Set(mustKeys(t, oldK, newK))
	a.ring.Set(mustKeys(t, newK, oldK))
	works(t, "step 2", a, b)
	works(t, "step 2", b, a)
	b.ring.Set(mustKeys(t, newK, oldK))
	works(t, "step 2 done", a, b)
	works(t, "step 2 done", b, a)

	// Step 3 taken by A while B still signs with the old key: A's
	// client refuses B's server, and A's server refuses B's client.
	a.ring.Set(mustKeys(t, newK))
	b.ring.Set(mustKeys(t, oldK, newK))
	refusedByClient(t, "step 3 too soon", a, b)
	refusedByServer(t, "step 3 too soon", b, a)

	// A{new} and B{old only}: refused both ways.
	b.ring.Set(mustKeys(t, oldK))
	refusedByClient(t, "step 3, B on the old key", a, b)
	refusedByClient(t, "step 3, B on the old key", b, a)

	// B takes step 3 too: they talk again, on the new key alone.
	b.ring.Set(mustKeys(t, newK))
	works(t, "step 3", a, b)
	works(t, "step 3", b, a)
}

// A Set applies to the server's next handshake: no new server. The
// server's leaf key is the same, its certificate of the new key's CA.
func TestRingSetAppliesToNextHandshake(t *testing.T) {
	x, y := mustKeys(t, key("x")), mustKeys(t, key("y"))
	s := startPeer(t, "S", x)
	c := startPeer(t, "C", x)
	first := call(t, c, s)
	if first.err != nil || first.server.Issuer.CommonName != caName(x) {
		t.Fatalf("on x: %+v", first)
	}
	s.ring.Set(y)
	refusedByClient(t, "server on y", c, s)
	c.ring.Set(y)
	then := call(t, c, s)
	if then.err != nil || then.server.Issuer.CommonName != caName(y) || then.body != "S, to "+caName(y) {
		t.Fatalf("on y: %+v", then)
	}
	if !first.server.PublicKey.(ed25519.PublicKey).Equal(then.server.PublicKey) {
		t.Error("the leaf key changed with the signing key")
	}
	// The server takes clients signing with x again when it accepts x
	// again.
	c.ring.Set(mustKeys(t, key("x"), key("y")))
	refusedByServer(t, "client back on x", c, s)
	s.ring.Set(mustKeys(t, key("y"), key("x")))
	works(t, "back", c, s)
}

// randomCert returns a leaf certificate for ServerAuth and ClientAuth
// signed by a CA of a random key, named cn (as a real peer CA may be
// named: names prove nothing), followed by that CA's certificate (which
// a verifier must not take as a root).
func randomCert(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	_, caKey, _ := ed25519.GenerateKey(rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: caNotBefore, NotAfter: caNotAfter,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	_, leafKey, _ := ed25519.GenerateKey(rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "mcpvisor replica"},
		NotBefore: caNotBefore, NotAfter: caNotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, leafKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: leafKey}
}

// A client without a certificate, or with one of another CA (even one
// that names itself as the peer CA does), is refused by the server.
func TestServerRefusesStrangers(t *testing.T) {
	k := mustKeys(t, key("k"))
	s := startPeer(t, "S", k)
	stranger := func(certs ...tls.Certificate) *http.Transport {
		return &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: certs,
		}}
	}
	// The stranger reaches the server: only the server refuses.
	s.drain()
	if r := get(t, stranger(), s.url); r.err == nil {
		t.Errorf("no certificate: %q", r.body)
	}
	s.logged(t, "didn't provide a certificate")

	for _, cn := range []string{"some CA", caName(k)} {
		s.drain()
		if r := get(t, stranger(randomCert(t, cn)), s.url); r.err == nil {
			t.Errorf("a certificate of a random CA named %q: %q", cn, r.body)
		}
		s.logged(t, refusedByUs)
	}
	// While a peer is served.
	c := startPeer(t, "C", k)
	works(t, "the real one", c, s)
}

// The client checks the server as the server checks the client, though
// InsecureSkipVerify is set: a server of another CA is refused, though
// it is at the address asked for.
func TestClientRefusesStrangers(t *testing.T) {
	c := startPeer(t, "C", mustKeys(t, key("k")))
	for _, cn := range []string{"some CA", caName(c.ring.Load())} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "stranger")
		}))
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{randomCert(t, cn)}, ClientAuth: tls.RequestClientCert}
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		r := get(t, transport(c.ring), srv.URL)
		srv.Close()
		if r.err == nil || !strings.Contains(r.err.Error(), refusedByUs) {
			t.Errorf("a server of a random CA named %q: %q %v", cn, r.body, r.err)
		}
	}
}

// The configs: TLS 1.3 at least, both HTTP protocols offered (and the
// link by the server), a client
// certificate required, no session tickets; with no keys in the Ring,
// handshakes fail rather than panic.
func TestConfigs(t *testing.T) {
	r := NewRing(mustKeys(t, key("k")))
	srv, cli := r.ServerTLS(), r.ClientTLS()
	inner, err := srv.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[*tls.Config]string{srv: link.Proto + ",h2,http/1.1", inner: link.Proto + ",h2,http/1.1", cli: "h2,http/1.1"} {
		if c.MinVersion != tls.VersionTLS13 || strings.Join(c.NextProtos, ",") != want {
			t.Errorf("config: TLS %x, ALPN %q, want %s", c.MinVersion, c.NextProtos, want)
		}
	}
	for _, c := range []*tls.Config{srv, inner} {
		if c.ClientAuth != tls.RequireAnyClientCert || !c.SessionTicketsDisabled {
			t.Errorf("server config: %v, tickets off %v", c.ClientAuth, c.SessionTicketsDisabled)
		}
	}
	if tr := transport(r); tr.Proxy != nil || !tr.ForceAttemptHTTP2 {
		t.Error("the transport has a proxy, or no HTTP/2")
	}

	empty := NewRing(nil)
	if _, err := empty.ServerTLS().GetConfigForClient(&tls.ClientHelloInfo{}); err == nil {
		t.Error("a server config without keys")
	}
	if _, err := empty.ClientTLS().GetClientCertificate(&tls.CertificateRequestInfo{}); err == nil {
		t.Error("a client certificate without keys")
	}
	if err := empty.ClientTLS().VerifyConnection(tls.ConnectionState{}); err == nil {
		t.Error("a connection verified without keys")
	}
	if err := r.ClientTLS().VerifyConnection(tls.ConnectionState{}); err == nil {
		t.Error("a server without a certificate verified")
	}
}

// Every process derives the same CA from a key, byte for byte: fixed
// serial, validity 2000–2100, a CA that may sign leaves only.
func TestCADerivation(t *testing.T) {
	a1, a2, b := mustKeys(t, key("a")), mustKeys(t, key("a")), mustKeys(t, key("b"))
	ca := a1.cas[0].cert
	if !bytes.Equal(ca.Raw, a2.cas[0].cert.Raw) {
		t.Fatal("two CAs from one key")
	}
	if bytes.Equal(ca.Raw, b.cas[0].cert.Raw) || bytes.Equal(a1.cas[0].key, b.cas[0].key) {
		t.Fatal("one CA from two keys")
	}
	if ca.SerialNumber.Int64() != 1 || !ca.NotBefore.Equal(caNotBefore) || !ca.NotAfter.Equal(caNotAfter) ||
		!ca.IsCA || !ca.MaxPathLenZero || ca.KeyUsage != x509.KeyUsageCertSign || ca.Subject.CommonName != caName(a1) {
		t.Fatalf("CA %+v", ca)
	}
	if err := ca.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("not self-signed: %v", err)
	}
	// Its key is the Ed25519 key of seed HKDF-SHA256(key, no salt,
	// "mcpvisor peer ca v1").
	seed, err := hkdf.Key(sha256.New, key("a"), nil, "mcpvisor peer ca v1", 32)
	if err != nil {
		t.Fatal(err)
	}
	if pub, ok := ca.PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(ed25519.NewKeyFromSeed(seed).Public()) {
		t.Fatalf("CA key %v", ca.PublicKey)
	}
}

// Handshakes while the Ring is Set: each gets a certificate of a key in
// force (run under -race).
func TestRingConcurrent(t *testing.T) {
	x, y := mustKeys(t, key("x")), mustKeys(t, key("y"))
	r := NewRing(x)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				if i == 0 && j%5 == 0 {
					if j%10 == 0 {
						r.Set(y)
					} else {
						r.Set(x)
					}
				}
				k := r.Load()
				cert, err := r.leafFor(k)
				if err != nil {
					t.Error(err)
					return
				}
				if err := cert.Leaf.CheckSignatureFrom(k.cas[0].cert); err != nil {
					t.Errorf("a certificate of another key: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// transport returns an http.Transport for requests to peers: the
// defaults of http.DefaultTransport, ClientTLS, HTTP/2 on, and no proxy
// (a peer is in the cluster; HTTPS_PROXY is for the world outside).
func transport(r *Ring) *http.Transport {
	t := &http.Transport{}
	if d, ok := http.DefaultTransport.(*http.Transport); ok {
		t = d.Clone()
	}
	t.Proxy = nil
	t.TLSClientConfig = r.ClientTLS()
	t.ForceAttemptHTTP2 = true
	return t
}
