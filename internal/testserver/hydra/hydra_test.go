package hydra

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// TestMain stops the shared Hydra after the tests, checks that its
// process is gone, then that no goroutine leaked.
func TestMain(m *testing.M) {
	code := m.Run()
	pid := 0
	shared.mu.Lock()
	if shared.srv != nil {
		pid = shared.srv.Pid()
	}
	shared.mu.Unlock()
	if err := StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "StopShared:", err)
		code = 1
	}
	if pid != 0 && processExists(pid) {
		fmt.Fprintf(os.Stderr, "the shared hydra (pid %d) is still there after StopShared\n", pid)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// processExists reports whether pid or its process group still has a
// process (a zombie counts).
func processExists(pid int) bool {
	return syscall.Kill(pid, 0) == nil || syscall.Kill(-pid, 0) == nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// verify checks tok's signature against Hydra's JWKS (RS256 only) and
// returns its header and claims.
func verify(t *testing.T, s *Server, tok string) (map[string]any, jwt.MapClaims) {
	t.Helper()
	keys := fetchJWKS(t, s)
	claims := jwt.MapClaims{}
	parsed, err := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(s.Issuer()),
		jwt.WithExpirationRequired()).ParseWithClaims(tok, claims, func(tk *jwt.Token) (any, error) {
		kid, _ := tk.Header["kid"].(string)
		k, ok := keys[kid]
		if !ok {
			return nil, fmt.Errorf("kid %q not in the JWKS", kid)
		}
		return k, nil
	})
	if err != nil {
		t.Fatalf("the access token does not verify against %s: %v", s.JWKSURL(), err)
	}
	return parsed.Header, claims
}

func fetchJWKS(t *testing.T, s *Server) map[string]*rsa.PublicKey {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, s.JWKSURL(), nil)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set struct {
		Keys []struct {
			Kty, Kid, Alg, Use, N, E string
		} `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil {
			t.Fatalf("JWKS key %s: bad n or e", k.Kid)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	if len(keys) == 0 {
		t.Fatalf("no RSA key in %s", s.JWKSURL())
	}
	return keys
}

func strs(v any) []string {
	var out []string
	switch v := v.(type) {
	case []any:
		for _, x := range v {
			s, _ := x.(string)
			out = append(out, s)
		}
	case string:
		out = []string{v}
	}
	return out
}

func TestClientCredentialsJWT(t *testing.T) {
	s := Shared(t)
	ctx := ctxT(t)
	const aud = "http://127.0.0.1:8080/mcp"
	c, err := s.CreateClient(ctx, ClientSpec{
		GrantTypes: []string{"client_credentials"},
		Scopes:     []string{"mcp:tools", "admin"},
		Audiences:  []string{aud, "http://127.0.0.1:8080/servers/x/mcp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fmt.Sprintf("%v %+v %#v %s", c, c, c, c), c.Secret) {
		t.Fatal("the client's formatting shows its secret")
	}
	tok, err := s.ClientCredentials(ctx, c, []string{aud}, []string{"mcp:tools"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok), tok.AccessToken) {
		t.Fatal("the token's formatting shows the access token")
	}
	hdr, claims := verify(t, s, tok.AccessToken)
	if hdr["alg"] != "RS256" || hdr["typ"] != "JWT" {
		t.Errorf("header = %v, want alg RS256, typ JWT", hdr)
	}
	if got := strs(claims["aud"]); !slices.Equal(got, []string{aud}) {
		t.Errorf("aud = %q, want [%q]", got, aud)
	}
	if claims["sub"] != c.ID || claims["client_id"] != c.ID {
		t.Errorf("sub = %v, client_id = %v, want both %q", claims["sub"], claims["client_id"], c.ID)
	}
	if claims["scope"] != "mcp:tools" || !slices.Equal(strs(claims["scp"]), []string{"mcp:tools"}) {
		t.Errorf("scope = %v, scp = %v, want mcp:tools both", claims["scope"], claims["scp"])
	}

	// A tampered token does not verify: the check above can fail.
	parts := strings.Split(tok.AccessToken, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload = []byte(strings.Replace(string(payload), c.ID, c.ID+"x", 1))
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
	if _, err := jwt.Parse(tampered, func(tk *jwt.Token) (any, error) {
		return fetchJWKS(t, s)[tk.Header["kid"].(string)], nil
	}, jwt.WithValidMethods([]string{"RS256"})); !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		t.Errorf("tampered token: err = %v, want an invalid signature", err)
	}

	// An audience the client was not registered with is refused.
	if _, err := s.ClientCredentials(ctx, c, []string{"http://127.0.0.1:9/other"}, nil); err == nil {
		t.Error("a token for an unregistered audience was issued")
	} else if strings.Contains(err.Error(), c.Secret) {
		t.Errorf("the error shows the secret: %v", err)
	}
}

func TestAuthorizationCodeJWT(t *testing.T) {
	s := Shared(t)
	ctx := ctxT(t)
	const resource = "http://127.0.0.1:8080/mcp"
	s.SetClaims("alice", map[string]any{"groups": []string{"ops"}})
	t.Cleanup(func() { s.SetClaims("alice", nil) })
	for _, method := range []string{AuthSecretPost, AuthSecretBasic, AuthNone} {
		t.Run(method, func(t *testing.T) {
			c, err := s.CreateClient(ctx, ClientSpec{
				GrantTypes: []string{"authorization_code", "refresh_token"},
				Scopes:     []string{"mcp:tools", "offline_access"},
				AuthMethod: method,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, sub := range []string{"alice", "bob"} {
				tok, err := s.AuthorizationCode(ctx, c, sub, []string{resource}, []string{"mcp:tools", "offline_access"})
				if err != nil {
					t.Fatalf("%s: %v", sub, err)
				}
				_, claims := verify(t, s, tok.AccessToken)
				if got := strs(claims["aud"]); !slices.Equal(got, []string{resource}) {
					t.Errorf("%s: aud = %q, want [%q] (the resource)", sub, got, resource)
				}
				if claims["sub"] != sub || claims["client_id"] != c.ID {
					t.Errorf("sub = %v, client_id = %v, want %s, %s", claims["sub"], claims["client_id"], sub, c.ID)
				}
				if claims["scope"] != "mcp:tools offline_access" {
					t.Errorf("%s: scope = %v", sub, claims["scope"])
				}
				ext, _ := claims["ext"].(map[string]any)
				groups := strs(ext["groups"])
				if want := map[string][]string{"alice": {"ops"}}[sub]; !slices.Equal(groups, want) {
					t.Errorf("%s: ext.groups = %q, want %q", sub, groups, want)
				}
				if tok.RefreshToken == "" {
					t.Errorf("%s: no refresh token with offline_access", sub)
				}
			}
		})
	}
}

func introspect(t *testing.T, s *Server, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, s.IntrospectionURL(),
		strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("introspection: %s", resp.Status)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpaqueTokenIntrospection(t *testing.T) {
	s := Shared(t)
	ctx := ctxT(t)
	const aud = "http://127.0.0.1:8080/mcp"
	c, err := s.CreateClient(ctx, ClientSpec{
		GrantTypes: []string{"client_credentials"}, Scopes: []string{"mcp:tools"},
		Audiences: []string{aud}, AuthMethod: AuthSecretBasic, Opaque: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.ClientCredentials(ctx, c, []string{aud}, []string{"mcp:tools"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.AccessToken, "ory_at_") || strings.Count(tok.AccessToken, ".") == 2 {
		t.Fatalf("the opaque client's token is not opaque (%d chars, prefix %.7q)", len(tok.AccessToken), tok.AccessToken)
	}
	got := introspect(t, s, tok.AccessToken)
	if got["active"] != true || got["client_id"] != c.ID || got["scope"] != "mcp:tools" ||
		!slices.Equal(strs(got["aud"]), []string{aud}) || got["iss"] != s.Issuer() {
		t.Errorf("introspection = %v", got)
	}
	if got := introspect(t, s, "ory_at_not-a-token"); got["active"] != false {
		t.Errorf("a made-up token introspects as %v", got)
	}
}

func TestShortLifespanExpires(t *testing.T) {
	s := Shared(t)
	for _, opaque := range []bool{false, true} {
		t.Run(fmt.Sprint("opaque=", opaque), func(t *testing.T) {
			t.Parallel()
			expires(t, s, opaque)
		})
	}
}

// expires checks that the token of a client with a 2 s lifespan says so
// and becomes inactive once expired.
func expires(t *testing.T, s *Server, opaque bool) {
	ctx := ctxT(t)
	const aud = "http://127.0.0.1:8080/mcp"
	c, err := s.CreateClient(ctx, ClientSpec{GrantTypes: []string{"client_credentials"},
		Audiences: []string{aud}, Opaque: opaque})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetLifespan(ctx, c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	tok, err := s.ClientCredentials(ctx, c, []string{aud}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.ExpiresIn > 2 {
		t.Errorf("expires_in = %d, want ≤ 2", tok.ExpiresIn)
	}
	if !opaque {
		_, claims := verify(t, s, tok.AccessToken)
		exp, _ := claims.GetExpirationTime()
		iat, _ := claims.GetIssuedAt()
		// Hydra's iat and exp are whole seconds, taken apart.
		if d := exp.Sub(iat.Time); d < time.Second || d > 2*time.Second {
			t.Errorf("exp - iat = %v, want 2s (±1s)", d)
		}
	}
	// Active now, inactive once expired (polled, bounded).
	if got := introspect(t, s, tok.AccessToken); got["active"] != true {
		t.Fatalf("the fresh token introspects as %v", got)
	}
	deadline := time.Now().Add(15 * time.Second)
	for introspect(t, s, tok.AccessToken)["active"] == true {
		if time.Now().After(deadline) {
			t.Fatal("the 2 s token is still active after 15 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if d := time.Until(tok.Expiry); d > time.Second {
		t.Errorf("inactive %v before its expiry", d)
	}
}

// TestConcurrentCalls: calls from parallel tests all succeed, although
// Hydra's in-memory store refuses concurrent writes.
func TestConcurrentCalls(t *testing.T) {
	s := Shared(t)
	ctx := ctxT(t)
	const aud = "http://127.0.0.1:8080/mcp"
	errs := make(chan error, 16)
	for i := range cap(errs) {
		go func() {
			c, err := s.CreateClient(ctx, ClientSpec{
				GrantTypes: []string{"client_credentials", "authorization_code"},
				Audiences:  []string{aud}, Opaque: i%2 == 0,
			})
			if err == nil {
				_, err = s.ClientCredentials(ctx, c, []string{aud}, nil)
			}
			if err == nil && i%4 == 0 {
				_, err = s.AuthorizationCode(ctx, c, "dave", []string{aud}, nil)
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestStartStop starts a Hydra of the test's own and checks that Close
// leaves no process of its group.
func TestStartStop(t *testing.T) {
	s := Start(t, Options{DefaultSubject: "carol", Claims: map[string]map[string]any{"carol": {"groups": []string{"dev"}}}})
	pid := s.Pid()
	if !processExists(pid) {
		t.Fatal("hydra is not running after Start")
	}
	ctx := ctxT(t)
	c, err := s.CreateClient(ctx, ClientSpec{GrantTypes: []string{"authorization_code"}, Scopes: []string{"mcp:tools"}})
	if err != nil {
		t.Fatal(err)
	}
	// No login_hint: the default subject, with Options.Claims.
	tok, err := s.authorizationCode(ctx, c, "", nil, []string{"mcp:tools"})
	if err != nil {
		t.Fatal(err)
	}
	_, claims := verify(t, s, tok.AccessToken)
	if ext, _ := claims["ext"].(map[string]any); claims["sub"] != "carol" || !slices.Equal(strs(ext["groups"]), []string{"dev"}) {
		t.Errorf("sub = %v, ext = %v", claims["sub"], claims["ext"])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if processExists(pid) {
		t.Fatalf("hydra (pid %d) or its group is still there after Close", pid)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// TestStartRetriesTakenPort: a port taken between its choice and
// Hydra's listen makes Hydra exit; Start chooses others.
func TestStartRetriesTakenPort(t *testing.T) {
	bin, err := Binary(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	choosePorts = func(n int) ([]int, error) {
		calls++
		ports, err := freePorts(n)
		if calls == 1 && err == nil {
			ports[0] = taken.Addr().(*net.TCPAddr).Port
		}
		return ports, err
	}
	defer func() { choosePorts = freePorts }()
	s, err := StartProcess(bin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if calls != 2 {
		t.Errorf("ports chosen %d times, want 2", calls)
	}
	if strings.HasSuffix(s.Issuer(), fmt.Sprint(":", taken.Addr().(*net.TCPAddr).Port)) {
		t.Error("hydra claims the taken port")
	}
}

// TestLoginWithoutSubjectRefused: with no login_hint and no default
// subject the login app refuses, and the error says so.
func TestLoginWithoutSubjectRefused(t *testing.T) {
	s := Shared(t)
	ctx := ctxT(t)
	c, err := s.CreateClient(ctx, ClientSpec{GrantTypes: []string{"authorization_code"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthorizationCode(ctx, c, "", nil, nil); err == nil || !strings.Contains(err.Error(), "no subject") {
		t.Fatalf("AuthorizationCode without a subject: err = %v", err)
	}
	// The login app itself refuses a login without a hint when there is
	// no default subject (the shared Hydra has none).
	_, err = s.authorizationCode(ctx, c, "", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "login_required") {
		t.Fatalf("err = %v, want login_required", err)
	}
}

func TestBinaryWaitsForBuild(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hydra")

	// Missing, no build: the error names the make target.
	if _, err := testserver.WaitBuilt(ctxT(t), "hydra", bin, time.Second); err == nil || !strings.Contains(err.Error(), "make hydra") {
		t.Fatalf("err = %v, want one naming `make hydra`", err)
	}

	// A build that runs too long: bounded.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	os.WriteFile(bin+".building", []byte(fmt.Sprint(cmd.Process.Pid)), 0o644)
	start := time.Now()
	if _, err := testserver.WaitBuilt(ctxT(t), "hydra", bin, 500*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not finish within") {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the bounded wait took %v", d)
	}

	// A build that finishes: the binary is returned once it ends.
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
		cmd.Process.Kill()
		cmd.Wait()
	}()
	got, err := testserver.WaitBuilt(ctxT(t), "hydra", bin, 30*time.Second)
	<-done
	if err != nil || got != bin {
		t.Fatalf("WaitBuilt = %q, %v", got, err)
	}
}
