// Package hydra runs Ory Hydra, a real OAuth 2.1 / OpenID Connect
// authorization server, for tests of mcpvisor as an OAuth resource
// server: one Hydra process on 127.0.0.1 (in-memory store, development
// mode, JWT access tokens with both the scope string and the scp array),
// its login and consent app in the test binary, and helpers that register
// clients and obtain tokens the way real clients do (client credentials;
// authorization code with PKCE and RFC 8707 resource through a headless
// browser).
//
// The binary is .deps/tools/hydra at the module root (or $MCPVISOR_HYDRA),
// built by `make hydra`; make test starts that build in the background
// (scripts/test-deps.sh) and Start waits for it, bounded.
//
// One Hydra per test binary is the expected use: Shared starts it on
// first use, and the package's TestMain stops it after the tests, before
// its goroutine leak check:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		hydra.StopShared()
//		if code == 0 {
//			if err := goleak.Find(); err != nil {
//				fmt.Fprintln(os.Stderr, err)
//				code = 1
//			}
//		}
//		os.Exit(code)
//	}
//
// Start runs a Hydra of its own for one test, with Options.
//
// What Hydra's tokens look like, for the verifier under test: the JWT
// header's typ is "JWT" (not RFC 9068's "at+jwt"); aud is an array; sub
// is the client for client_credentials and the login subject for the
// code flow; scopes are both "scope" (a string) and "scp" (an array); the
// consent's extra claims are under "ext". Discovery is at
// /.well-known/openid-configuration only and advertises no introspection
// endpoint (IntrospectionURL). Hydra does not check a consent-granted
// audience against the client's: the resource server must.
//
// Hydra's in-memory store takes one write at a time and refuses a
// concurrent one with 400 "Unable to serialize access due to a concurrent
// update". The harness serializes and retries its own calls; a test whose
// clients obtain tokens from Hydra themselves, in parallel with other
// tests, must expect that answer.
package hydra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Options configure a Hydra started with Start.
type Options struct {
	// DefaultSubject is the subject the login app accepts when the
	// authorization request has no login_hint. "" refuses such a login.
	DefaultSubject string
	// Claims are extra access-token claims per subject, granted at
	// consent (session.access_token); Hydra puts them under the token's
	// "ext" claim. SetClaims changes them later.
	Claims map[string]map[string]any
	// Env are extra Hydra configuration variables (NAME=value), after
	// the harness's own, for example "TTL_ACCESS_TOKEN=5m".
	Env []string
	// ReadyTimeout bounds the wait for /health/ready (default 30 s).
	ReadyTimeout time.Duration
}

// Server is a running Hydra with its login and consent app.
type Server struct {
	issuer   string // http://127.0.0.1:PUBLIC (no trailing slash)
	adminURL string // http://127.0.0.1:ADMIN
	defSub   string

	hc    *http.Client // to Hydra's admin and public APIs
	tr    *http.Transport
	app   *http.Server
	appLn net.Listener

	cmd  *exec.Cmd
	done chan struct{} // closed when the process is reaped
	logs *testserver.TailBuffer

	// flow serializes the harness's calls that write to Hydra: its
	// in-memory store refuses concurrent writes (see send).
	flow sync.Mutex

	mu     sync.Mutex
	claims map[string]map[string]any
	appErr error // the login/consent app's last failure

	closeOnce sync.Once
	closeErr  error
}

// Issuer is Hydra's issuer, exactly as in its tokens' iss and its
// discovery document: http://127.0.0.1:PORT, no trailing slash.
func (s *Server) Issuer() string { return s.issuer }

// AdminURL is the base of Hydra's admin API.
func (s *Server) AdminURL() string { return s.adminURL }

// IntrospectionURL is Hydra's RFC 7662 endpoint (on the admin port; it
// asks no client authentication). Hydra does not advertise it in its
// discovery document.
func (s *Server) IntrospectionURL() string { return s.adminURL + "/admin/oauth2/introspect" }

// JWKSURL is where Hydra publishes its signing keys.
func (s *Server) JWKSURL() string { return s.issuer + "/.well-known/jwks.json" }

// DiscoveryURL is Hydra's OpenID Connect discovery document (it serves
// no RFC 8414 document).
func (s *Server) DiscoveryURL() string { return s.issuer + "/.well-known/openid-configuration" }

// TokenURL is Hydra's token endpoint.
func (s *Server) TokenURL() string { return s.issuer + "/oauth2/token" }

// AuthURL is Hydra's authorization endpoint.
func (s *Server) AuthURL() string { return s.issuer + "/oauth2/auth" }

// Pid is the Hydra process's id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Logs returns what Hydra wrote (its last 256 KiB).
func (s *Server) Logs() string { return s.logs.String() }

// SetClaims sets the extra access-token claims granted to subject at
// consent (nil removes them).
func (s *Server) SetClaims(subject string, claims map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if claims == nil {
		delete(s.claims, subject)
		return
	}
	s.claims[subject] = claims
}

func (s *Server) claimsFor(subject string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[subject]
}

// Start starts a Hydra for the test and stops it at the test's cleanup,
// showing its logs if the test failed. A missing binary fails the test
// with the command that builds it.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := Binary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartProcess(bin, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hydra logs:\n%s", s.Logs())
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// startAttempts bounds the retries when another process takes a port
// between its choice and Hydra's listen.
const startAttempts = 4

// StartProcess starts Hydra from the binary bin; the caller must Close
// it. Start and Shared are the usual ways in.
func StartProcess(bin string, opts Options) (*Server, error) {
	var err error
	for range startAttempts {
		var s *Server
		s, err = start(bin, opts)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("hydra: %d attempts to start: %w", startAttempts, err)
}

var errPortTaken = errors.New("a port was taken before hydra could listen on it")

func start(bin string, opts Options) (*Server, error) {
	ports, err := choosePorts(2)
	if err != nil {
		return nil, err
	}
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("hydra: the login app's listener: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	s := &Server{
		issuer:   fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		adminURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		defSub:   opts.DefaultSubject,
		tr:       tr,
		hc:       &http.Client{Transport: tr, Timeout: 30 * time.Second},
		appLn:    appLn,
		done:     make(chan struct{}),
		logs:     &testserver.TailBuffer{Max: 256 << 10},
		claims:   map[string]map[string]any{},
	}
	for sub, c := range opts.Claims {
		s.claims[sub] = c
	}
	s.app = &http.Server{Handler: s.appHandler(), ReadHeaderTimeout: 10 * time.Second}
	go s.app.Serve(appLn)

	secret := make([]byte, 24)
	rand.Read(secret)
	app := "http://" + appLn.Addr().String()
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"TMPDIR=" + os.TempDir(),
		"SQA_OPT_OUT=true",
		"DSN=memory",
		"SECRETS_SYSTEM=" + hex.EncodeToString(secret),
		"URLS_SELF_ISSUER=" + s.issuer,
		"URLS_LOGIN=" + app + "/login",
		"URLS_CONSENT=" + app + "/consent",
		"URLS_ERROR=" + app + "/error",
		"SERVE_PUBLIC_HOST=127.0.0.1",
		fmt.Sprintf("SERVE_PUBLIC_PORT=%d", ports[0]),
		"SERVE_ADMIN_HOST=127.0.0.1",
		fmt.Sprintf("SERVE_ADMIN_PORT=%d", ports[1]),
		"STRATEGIES_ACCESS_TOKEN=jwt",
		"STRATEGIES_JWT_SCOPE_CLAIM=both",
		"LOG_LEVEL=warn",
	}
	env = append(env, opts.Env...)
	s.cmd = exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out")
	s.cmd.Env = env
	s.cmd.Stdout = s.logs
	s.cmd.Stderr = s.logs
	s.cmd.SysProcAttr = sysProcAttr()
	// The goroutine that starts Hydra holds its OS thread until Hydra is
	// reaped: the kernel's parent-death signal (Linux) follows the thread
	// that forked, which must not end while Hydra runs.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := s.cmd.Start()
		started <- err
		if err == nil {
			s.cmd.Wait()
		}
		close(s.done)
	}()
	if err := <-started; err != nil {
		s.closeApp()
		return nil, fmt.Errorf("hydra: start %s: %w", bin, err)
	}

	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if err := s.waitReady(timeout); err != nil {
		s.Close()
		if strings.Contains(s.logs.String(), "address already in use") {
			return nil, fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return nil, fmt.Errorf("%w\nhydra logs:\n%s", err, s.logs.String())
	}
	return s, nil
}

// waitReady polls both ports' /health/ready until they answer 200, the
// process exits, or timeout passes.
func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, base := range []string{s.adminURL, s.issuer} {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health/ready", nil)
			resp, err := s.hc.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cancel()
			if err == nil && resp.StatusCode == http.StatusOK {
				break
			}
			select {
			case <-s.done:
				return fmt.Errorf("hydra exited before it was ready (%v)", s.cmd.ProcessState)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("hydra: %s/health/ready did not answer 200 within %v", base, timeout)
			}
		}
	}
	return nil
}

// Close stops Hydra (its process group: SIGTERM, then SIGKILL after 5 s),
// reaps it, and stops the login app. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.stopProcess()
		s.closeApp()
	})
	return s.closeErr
}

func (s *Server) stopProcess() error {
	select {
	case <-s.done:
		return nil // exited (or never became ready): already reaped
	default:
	}
	pgid := s.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-s.done:
		return fmt.Errorf("hydra (pid %d) did not stop within 5 s of SIGTERM: killed", pgid)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("hydra (pid %d) survived SIGKILL for 5 s", pgid)
	}
}

func (s *Server) closeApp() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.app.Shutdown(ctx)
	s.appLn.Close()
	s.tr.CloseIdleConnections()
}

// choosePorts is freePorts; a test replaces it.
var choosePorts = freePorts

// freePorts returns n distinct ports free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("hydra: choose a port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Binary returns the Hydra binary: $MCPVISOR_HYDRA, else .deps/tools/hydra
// at the module root. While a build of it runs (make test starts one in
// the background, at the lowest priority), it waits for it, at most
// BuildWait or until ctx ends.
// A missing binary is an error that names the make target to run.
func Binary(ctx context.Context) (string, error) {
	if os.Getenv("MCPVISOR_HYDRA") != "" {
		return testserver.Tool(ctx, "hydra", "", BuildWait)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return testserver.Tool(ctx, "hydra", root, BuildWait)
}

// BuildWait bounds the wait for a background build of Hydra
// ($MCPVISOR_HYDRA_WAIT, a duration, changes it).
var BuildWait = 4 * time.Minute

// moduleRoot is mcpvisor's module root, from this file's place in it.
func moduleRoot() (string, error) {
	dir := sourceDir()
	if dir == "" {
		return "", errors.New("hydra: cannot locate the module root to find .deps/tools/hydra: set MCPVISOR_HYDRA")
	}
	root := filepath.Clean(filepath.Join(dir, "..", "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("hydra: no go.mod at %s to find .deps/tools/hydra: set MCPVISOR_HYDRA", root)
	}
	return root, nil
}
