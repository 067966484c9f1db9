package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
	"github.com/mcpvisor/mcpvisor/internal/telemetry/otlptest"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/internal/testserver/confclient"
)

// Remote servers behind OAuth, through the real binaries: mcpvisor serve
// in front of oauthtest's authorization server and protected MCP
// resource, `mcpvisor login` with the conformance-client harness as its
// browser, and go-sdk clients on serve's endpoints.

// oauthResource is a protected MCP resource: a go-sdk server with one
// tool ("hello") behind oauthtest's bearer check, recording the
// Authorization headers of the requests that passed it.
type oauthResource struct {
	*oauthtest.Server
	mu    sync.Mutex
	auths [][]string // the Authorization values of each request that reached the MCP server
}

func newOAuthResource(t *testing.T, o oauthtest.Options) *oauthResource {
	t.Helper()
	r := &oauthResource{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hello", Description: "says hello"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello from behind OAuth"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	o.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auths = append(r.auths, slices.Clone(req.Header.Values("Authorization")))
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
	r.Server = oauthtest.New(t, o)
	return r
}

// seen are the Authorization values of every request that reached the
// MCP server behind the bearer check.
func (r *oauthResource) seen() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.auths)
}

// startServeEnv runs `mcpvisor serve` on config with its state in
// stateDir, env added to its environment, and waits for its address; it
// is killed when the test ends (stopAtCleanup checks a clean exit). Its
// whole stderr is in the lines of what it returns.
func startServeEnv(t *testing.T, config, stateDir string, env []string, args ...string) *started {
	t.Helper()
	bin, _ := binaries(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &started{marker: testserver.NewMarker(t), waited: make(chan error, 1)}
	s.cmd = exec.Command(bin, append([]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--state-dir", stateDir, "--log-level", "warn"}, args...)...)
	s.cmd.Env = append(os.Environ(), append(env, testserver.MarkerEnv+"="+s.marker)...)
	stderr, _ := s.cmd.StderrPipe()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
			if _, rest, ok := strings.Cut(sc.Text(), " servers at "); ok {
				select {
				case addr <- strings.TrimSuffix(rest, "/mcp"):
				default:
				}
			} else if testing.Verbose() {
				t.Log("mcpvisor:", sc.Text())
			}
		}
		s.waited <- s.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		testserver.KillProcesses(s.marker)
	})
	select {
	case s.base = <-addr:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start")
	}
	return s
}

// stderrText is what serve wrote to stderr so far.
func (s *started) stderrText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// noKeyring keeps serve and the CLI off any session keyring: the secrets
// go to the state directory's secrets.json, which the tests read.
var noKeyring = []string{"DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR="}

// cliResult is one run of the mcpvisor CLI.
type cliResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runCLI runs the mcpvisor binary with env added, bounded by limit.
func runCLI(t *testing.T, env []string, limit time.Duration, args ...string) cliResult {
	t.Helper()
	bin, _ := binaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), append(noKeyring, env...)...)
	cmd.WaitDelay = 2 * time.Second
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("mcpvisor %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("mcpvisor %s did not end within %v: %s%s", strings.Join(args, " "), limit, r.stdout, r.stderr)
	}
	return r
}

// browserEnv makes the conformance-client harness the browser of
// `mcpvisor login`: it GETs the authorization URL and follows the
// authorization server's redirect to the login's loopback listener.
func browserEnv(t *testing.T) []string {
	harness := testserver.BuildPackage(t, "github.com/mcpvisor/mcpvisor/internal/testserver/cmd/conformance-client", "conformance-client")
	return []string{"BROWSER=" + harness, confclient.BrowseEnv + "=1"}
}

// getBody GETs base+path and returns the body, failing t unless it is 200.
func getBody(t *testing.T, base, path string) string {
	t.Helper()
	code, b := getStatus(t, base, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	return b
}

func getStatus(t *testing.T, base, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// apiServerState is the state /api/servers gives the server named.
func apiServerState(t *testing.T, base, name string) string {
	t.Helper()
	var v struct {
		Servers []struct{ Name, State string }
	}
	if err := json.Unmarshal([]byte(getBody(t, base, "/api/servers")), &v); err != nil {
		t.Fatal(err)
	}
	for _, s := range v.Servers {
		if s.Name == name {
			return s.State
		}
	}
	t.Fatalf("no server %s in /api/servers", name)
	return ""
}

// waitState waits (bounded) until the server named is in state want.
func waitState(t *testing.T, base, name, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := apiServerState(t, base, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s is %q after 10 s, want %q", name, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type oauthEvent struct {
	Server  string
	Type    string
	Details map[string]any
}

// eventsOf are serve's kept events of type typ for server.
func eventsOf(t *testing.T, base, server, typ string) []oauthEvent {
	t.Helper()
	var v struct{ Events []oauthEvent }
	if err := json.Unmarshal([]byte(getBody(t, base, "/api/events")), &v); err != nil {
		t.Fatal(err)
	}
	var out []oauthEvent
	for _, e := range v.Events {
		if e.Server == server && e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// waitEvents waits (bounded) until serve kept n events of type typ for
// server, and returns them.
func waitEvents(t *testing.T, base, server, typ string, n int) []oauthEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := eventsOf(t, base, server, typ)
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s events of %s after 10 s, want %d", len(evs), typ, server, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bearerTransport sends the client's own Authorization header.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connectWithToken connects a go-sdk client to url that sends its own
// bearer token to mcpvisor.
func connectWithToken(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-oauth", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: bearerTransport{token}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// needsLoginCall calls tool on sess and checks that it fails at once
// with the needs-login JSON-RPC error naming the login command; it
// returns the error's data.
func needsLoginCall(t *testing.T, sess *mcp.ClientSession, tool string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool})
	took := time.Since(start)
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("%s: %+v, %v after %v; want a JSON-RPC error at once", tool, res, err, took)
	}
	var data map[string]any
	_ = json.Unmarshal(we.Data, &data)
	if data["needsLogin"] != true || data["command"] != "mcpvisor login remote" || data["server"] != "remote" {
		t.Errorf("%s: error %d %q, data %s; want needsLogin and the command", tool, we.Code, we.Message, we.Data)
	}
	if took > 5*time.Second {
		t.Errorf("%s: the needs-login error took %v", tool, took)
	}
	return data
}

// waitTool waits (bounded) until sess lists tool.
func waitTool(t *testing.T, sess *mcp.ClientSession, tool string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := sess.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range res.Tools {
			if tl.Name == tool {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listed after 5 s: %d tools", tool, len(res.Tools))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func callOK(t *testing.T, sess *mcp.ClientSession, tool string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool})
	if err != nil || res.IsError || text(res) != "hello from behind OAuth" {
		t.Fatalf("%s: %+v %v", tool, res, err)
	}
}

// secretsJSON is the state directory's secrets.json ("" when absent).
func secretsJSON(t *testing.T, stateDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "secrets.json"))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// authState is the state GET /api/servers/NAME/auth gives.
func authState(t *testing.T, base, name string) string {
	t.Helper()
	var v struct {
		Auth struct{ State, Reason string }
	}
	if err := json.Unmarshal([]byte(getBody(t, base, "/api/servers/"+name+"/auth")), &v); err != nil {
		t.Fatal(err)
	}
	return v.Auth.State
}

// TestOAuthLoginEndToEnd: a remote server with only its url (no oauth,
// no protocol key), behind OAuth. Before a login, a request through
// serve's endpoints fails at once with the JSON-RPC error that names
// `mcpvisor login remote`, and the server is "needs-login" in
// /api/servers and ps, with an event. `mcpvisor login` with a browser
// logs in; calls then reach the resource with the authorization server's
// token, never the client's own bearer token; an expired access token is
// refreshed unseen; a refresh the authorization server refuses puts the
// server back in needs-login, with the reason; `mcpvisor logout` revokes.
func TestOAuthLoginEndToEnd(t *testing.T) {
	t.Parallel()
	rs := newOAuthResource(t, oauthtest.Options{RefreshTokens: true, Revocation: true})
	state := filepath.Join(t.TempDir(), "state")
	s := startServeEnv(t, fmt.Sprintf(`{"servers":{"remote":{"url":%q}}}`, rs.URL), state, noKeyring)
	stopAtCleanup(t, s)
	addr := strings.TrimPrefix(s.base, "http://")
	browser := browserEnv(t)

	// Before any login. The per-server endpoint refuses the handshake
	// itself with the needs-login error; the aggregated one leaves the
	// server out of its lists, and a call of its tool is refused with it.
	start := time.Now()
	init := rawCall(s.base+"/servers/remote/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	var initResp struct {
		Error *jsonrpc.Error
	}
	if err := json.Unmarshal([]byte(init), &initResp); err != nil || initResp.Error == nil ||
		!strings.Contains(string(initResp.Error.Data), `"needsLogin":true`) || !strings.Contains(string(initResp.Error.Data), `"command":"mcpvisor login remote"`) {
		t.Errorf("initialize on /servers/remote/mcp before a login: %s", init)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the needs-login answer took %v", took)
	}
	agg := connectWithToken(t, s.base+"/mcp", "client-own-token")
	t.Run("aggregated call before login", func(t *testing.T) {
		// The tool was never learned, but its name names the server:
		// the answer should say what to do, not "unknown tool".
		needsLoginCall(t, agg, "remote__hello")
	})
	waitState(t, s.base, "remote", "needs-login")
	if ev := waitEvents(t, s.base, "remote", "needs-login", 1); ev[0].Details["reason"] != "no credentials" {
		t.Errorf("needs-login event %+v", ev[0])
	}
	r := runCLI(t, nil, 20*time.Second, "ps", "--addr", addr, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"state": "needs-login"`) {
		t.Errorf("ps --json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, 20*time.Second, "ps", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "needs login") || !strings.Contains(r.stdout, "mcpvisor login remote") {
		t.Errorf("ps: %d %s %s", r.code, r.stdout, r.stderr)
	}

	// The login, with the harness as the browser.
	r = runCLI(t, browser, 30*time.Second, "login", "remote", "--addr", addr, "--timeout", "15s")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Logged in to remote") || !strings.Contains(r.stdout, rs.Issuer) {
		t.Fatalf("login: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("login took %v: %s", r.took.Round(time.Millisecond), strings.TrimSpace(r.stdout))
	if ev := waitEvents(t, s.base, "remote", "logged-in", 1); ev[0].Details["issuer"] != rs.Issuer {
		t.Errorf("logged-in event %+v", ev[0])
	}
	if st := authState(t, s.base, "remote"); st != "logged-in" {
		t.Errorf("auth state %q after the login", st)
	}
	if sj := secretsJSON(t, state); !strings.Contains(sj, "oauth/remote") {
		t.Errorf("the login is not kept in the state directory's secrets.json: %q", sj)
	}
	if fi, err := os.Stat(filepath.Join(state, "secrets.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets.json: %v %v", fi, err)
	}
	single := connectWithToken(t, s.base+"/servers/remote/mcp", "client-own-token")
	callOK(t, single, "hello")
	aggOK := t.Run("aggregated list after login", func(t *testing.T) {
		// Left out of /mcp's lists while it needed a login, the server
		// is listed once logged in.
		waitTool(t, agg, "remote__hello")
		callOK(t, agg, "remote__hello")
	})
	waitState(t, s.base, "remote", "running")

	// An expired access token is refreshed without a word.
	rs.ExpireAccessTokens()
	callOK(t, single, "hello")
	if n := rs.Count("refresh"); n != 1 {
		t.Errorf("%d refreshes after the access token expired, want 1", n)
	}
	// And again: the token a refresh gave, once it worked, is an
	// ordinary one; its own expiry is refreshed too.
	t.Run("second early expiry refreshed", func(t *testing.T) {
		rs.ExpireAccessTokens()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		res, err := single.CallTool(ctx, &mcp.CallToolParams{Name: "hello"})
		if err != nil || res.IsError {
			t.Errorf("a call after the refreshed token expired too: %v %v (%d refreshes)", res, err, rs.Count("refresh"))
		}
	})
	if authState(t, s.base, "remote") != "logged-in" {
		// The defect above dropped the tokens: log in again to go on.
		if r = runCLI(t, browser, 30*time.Second, "login", "remote", "--addr", addr, "--timeout", "15s"); r.code != 0 {
			t.Fatalf("login: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		single = connectWithToken(t, s.base+"/servers/remote/mcp", "client-own-token")
	}
	callOK(t, single, "hello")

	// Every request that reached the MCP server carried one token, the
	// authorization server's: never the client's own.
	issued := rs.IssuedTokens()
	seen := rs.seen()
	if len(seen) == 0 {
		t.Fatal("no request reached the resource")
	}
	for _, a := range seen {
		if len(a) != 1 || !slices.Contains(issued, strings.TrimPrefix(a[0], "Bearer ")) {
			t.Errorf("the resource saw Authorization %q; want one token the authorization server issued", a)
		}
		if strings.Contains(strings.Join(a, " "), "client-own-token") {
			t.Errorf("the client's own bearer token reached the resource: %q", a)
		}
	}

	// Revoked at the authorization server: the refresh is refused, the
	// server needs a login again, and says why.
	nBefore := len(eventsOf(t, s.base, "remote", "needs-login"))
	rs.RevokeAll()
	data := needsLoginCall(t, single, "hello")
	if data["reason"] != "refresh token expired or revoked" {
		t.Errorf("after a refused refresh: reason %v", data["reason"])
	}
	if aggOK {
		needsLoginCall(t, agg, "remote__hello")
	}
	ev := waitEvents(t, s.base, "remote", "needs-login", nBefore+1)
	if last := ev[len(ev)-1]; last.Details["reason"] != "refresh token expired or revoked" {
		t.Errorf("needs-login event after a refused refresh: %+v", last)
	}
	waitState(t, s.base, "remote", "needs-login")

	// Logged in again, then out: the tokens are revoked.
	if r = runCLI(t, browser, 30*time.Second, "login", "remote", "--addr", addr, "--timeout", "15s"); r.code != 0 {
		t.Fatalf("second login: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	single = connectWithToken(t, s.base+"/servers/remote/mcp", "client-own-token")
	callOK(t, single, "hello")
	before := len(rs.Revocations())
	r = runCLI(t, nil, 20*time.Second, "logout", "remote", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "revoked") || strings.Contains(r.stdout, "not revoked") {
		t.Errorf("logout: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	revs := rs.Revocations()[before:]
	if len(revs) == 0 {
		t.Error("the authorization server saw no revocation")
	}
	for _, f := range revs {
		if !slices.Contains(issued, f.Get("token")) && !slices.Contains(rs.IssuedTokens(), f.Get("token")) {
			t.Errorf("revocation of %q, not a token it issued", f.Get("token"))
		}
	}
	waitEvents(t, s.base, "remote", "logged-out", 1)
	if st := authState(t, s.base, "remote"); st == "logged-in" {
		t.Errorf("auth state %q after the logout", st)
	}
	if sj := secretsJSON(t, state); strings.Contains(sj, "tok-") || strings.Contains(sj, "ref-") {
		t.Errorf("tokens kept after the logout: %q", sj)
	}
	needsLoginCall(t, single, "hello")
	waitState(t, s.base, "remote", "needs-login")
}

// found are those of secrets that text holds.
func found(secrets []string, text string) []string {
	var out []string
	for _, sec := range secrets {
		if sec != "" && strings.Contains(text, sec) {
			out = append(out, sec)
		}
	}
	return out
}

// TestOAuthTokensNeverLeak logs in, calls, has an access token refreshed
// and a refresh refused, with serve at debug level exporting traces, and
// a stdio server beside the remote one; then greps for every token the
// authorization server issued, every authorization code, PKCE verifier
// and client secret of the token requests, in serve's whole log, the
// admin API, /metrics, the spans, the CLI's output, and the environment
// of the stdio server's process. The grep is shown to find what is there.
func TestOAuthTokensNeverLeak(t *testing.T) {
	t.Parallel()
	rs := newOAuthResource(t, oauthtest.Options{RefreshTokens: true, Revocation: true})
	rcv := otlptest.New(t)
	state := filepath.Join(t.TempDir(), "state")
	cfg := fmt.Sprintf(`{"servers":{"remote":{"url":%q},"local":{"command":%q,"env":{"LOCAL_SETTING":"plain-local-value"}}}}`, rs.URL, testserver.Build(t))
	s := startServeEnv(t, cfg, state, noKeyring, "--otlp-endpoint", strings.TrimSuffix(rcv.URL, "/v1/traces"), "--log-level", "debug")
	addr := strings.TrimPrefix(s.base, "http://")

	agg := connectWithToken(t, s.base+"/mcp", "client-own-token")
	ctx := t.Context()
	if out, err := agg.CallTool(ctx, &mcp.CallToolParams{Name: "local__echo", Arguments: map[string]any{"text": "x"}}); err != nil || text(out) != "x" {
		t.Fatalf("local__echo: %v %v", out, err)
	}
	browser := browserEnv(t)
	login := runCLI(t, browser, 30*time.Second, "login", "remote", "--addr", addr, "--timeout", "15s")
	if login.code != 0 {
		t.Fatalf("login: exit %d\n%s\n%s", login.code, login.stdout, login.stderr)
	}
	single := connectWithToken(t, s.base+"/servers/remote/mcp", "client-own-token")
	callOK(t, single, "hello")
	// A refresh refused: the server needs a login again.
	rs.RevokeAll()
	if data := needsLoginCall(t, single, "hello"); data["reason"] != "refresh token expired or revoked" || rs.Count("refresh") != 1 {
		t.Errorf("after a revocation: %v, %d refreshes; want one refused", data, rs.Count("refresh"))
	}
	waitEvents(t, s.base, "remote", "needs-login", 2)
	// Logged in again, and a refresh that works.
	login2 := runCLI(t, browser, 30*time.Second, "login", "remote", "--addr", addr, "--timeout", "15s")
	if login2.code != 0 {
		t.Fatalf("second login: exit %d\n%s\n%s", login2.code, login2.stdout, login2.stderr)
	}
	single = connectWithToken(t, s.base+"/servers/remote/mcp", "client-own-token")
	callOK(t, single, "hello")
	rs.ExpireAccessTokens()
	callOK(t, single, "hello")
	if n := rs.Count("refresh"); n != 2 {
		t.Errorf("%d refreshes, want 2 (one refused, one done)", n)
	}

	// What is secret: every token issued, and what the token requests
	// carried — codes, PKCE verifiers, refresh tokens, client secrets.
	secrets := rs.IssuedTokens()
	for _, tr := range rs.TokenRequests() {
		for _, k := range []string{"code", "code_verifier", "refresh_token", "client_secret"} {
			if v := tr.Form.Get(k); v != "" {
				secrets = append(secrets, v)
			}
		}
		if user, pass, ok := (&http.Request{Header: http.Header{"Authorization": {tr.Authorization}}}).BasicAuth(); ok {
			_ = user
			secrets = append(secrets, pass)
		}
	}
	kinds := map[string]int{}
	for _, sec := range secrets {
		kinds[strings.SplitN(sec, "-", 2)[0]]++
	}
	if kinds["tok"] < 3 || kinds["ref"] < 3 || kinds["code"] < 2 {
		t.Fatalf("too few secrets to look for: %v", kinds)
	}
	t.Logf("looking for %d secrets: %v", len(secrets), kinds)

	places := map[string]string{}
	for _, p := range []string{"/api/servers", "/api/servers/remote", "/api/servers/remote/auth", "/api/servers/local", "/api/events", "/metrics", "/api/servers/local/logs"} {
		code, body := getStatus(t, s.base, p)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
		places["GET "+p] = body
	}
	for _, args := range [][]string{{"ps"}, {"ps", "--json"}, {"inspect", "remote"}, {"inspect", "remote", "--json"}, {"logs", "local"}} {
		r := runCLI(t, nil, 20*time.Second, append(args, "--addr", addr)...)
		if r.code != 0 {
			t.Errorf("mcpvisor %s: exit %d %s", strings.Join(args, " "), r.code, r.stderr)
		}
		places["mcpvisor "+strings.Join(args, " ")] = r.stdout + r.stderr
	}
	places["mcpvisor login's output"] = login.stdout + login.stderr + login2.stdout + login2.stderr
	// The stdio server's environment.
	var local struct{ PID int }
	if err := json.Unmarshal([]byte(places["GET /api/servers/local"]), &local); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		if local.PID == 0 {
			// Asleep: wake it.
			if _, err := agg.CallTool(ctx, &mcp.CallToolParams{Name: "local__echo", Arguments: map[string]any{"text": "y"}}); err != nil {
				t.Fatal(err)
			}
			json.Unmarshal([]byte(getBody(t, s.base, "/api/servers/local")), &local)
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", local.PID))
		if err != nil {
			t.Fatalf("the stdio server's environment (pid %d): %v", local.PID, err)
		}
		if !strings.Contains(string(env), "LOCAL_SETTING=plain-local-value") {
			t.Fatalf("read the environment of another process than the stdio server's: %q", env)
		}
		places["the stdio server's environment"] = string(env)
	}

	// Serve exits, its spans exported.
	sent := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := s.exit(t, sent, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	spans := rcv.Spans()
	if len(spans) == 0 {
		t.Error("no span exported")
	}
	b, _ := json.Marshal(spans)
	places["the exported spans"] = string(b) + fmt.Sprint(rcv.Headers())
	places["serve's log"] = s.stderrText()

	// The grep finds what is there: the issuer in the logged-in event,
	// the resource's URL in the server's detail, the calls in the spans.
	if len(found([]string{"absent-" + rs.Issuer, rs.Issuer}, places["GET /api/events"])) != 1 {
		t.Errorf("the grep does not find the issuer in /api/events: %s", places["GET /api/events"])
	}
	if len(found([]string{rs.URL}, places["GET /api/servers/remote"])) != 1 {
		t.Errorf("the grep does not find the resource's URL in /api/servers/remote: %s", places["GET /api/servers/remote"])
	}
	for _, want := range []struct{ where, what string }{
		{"serve's log", "remote"}, {"the exported spans", "hello"}, {"GET /metrics", "mcpvisor_"}, {"GET /api/events", "logged-in"},
	} {
		if !strings.Contains(places[want.where], want.what) {
			t.Errorf("%s lacks %q: read the wrong thing?", want.where, want.what)
		}
	}
	for where, what := range places {
		if leaked := found(secrets, what); len(leaked) > 0 {
			t.Errorf("%s holds %d secrets: %q", where, len(leaked), leaked)
		}
	}
	t.Logf("%d secrets looked for in %d places (serve's log: %d lines, %d spans)", len(secrets), len(places), strings.Count(places["serve's log"], "\n")+1, len(spans))
}

// bgLogin is a `mcpvisor login` running in the background, its stderr
// read line by line.
type bgLogin struct {
	cmd    *exec.Cmd
	out    strings.Builder
	mu     sync.Mutex
	errs   []string
	lines  chan string
	waited chan error
}

// startLogin starts `mcpvisor login` with args and env added.
func startLogin(t *testing.T, env []string, args ...string) *bgLogin {
	t.Helper()
	bin, _ := binaries(t)
	l := &bgLogin{lines: make(chan string, 100), waited: make(chan error, 1)}
	l.cmd = exec.Command(bin, append([]string{"login"}, args...)...)
	l.cmd.Env = append(os.Environ(), append(noKeyring, env...)...)
	l.cmd.Stdout = &l.out
	stderr, _ := l.cmd.StderrPipe()
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l.mu.Lock()
			l.errs = append(l.errs, sc.Text())
			l.mu.Unlock()
			select {
			case l.lines <- sc.Text():
			default:
			}
		}
		l.waited <- l.cmd.Wait()
	}()
	return l
}

// waitLine waits (bounded) for a line of stderr that contains substr.
func (l *bgLogin) waitLine(t *testing.T, substr string) string {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case line := <-l.lines:
			if strings.Contains(line, substr) {
				return line
			}
		case <-timer.C:
			t.Fatalf("login wrote no line with %q in 10 s: %s", substr, l.stderr())
		}
	}
}

// authURL waits for the authorization URL the login prints.
func (l *bgLogin) authURL(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(l.waitLine(t, "/authorize?"))
}

func (l *bgLogin) stderr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.errs, "\n")
}

// wait waits (bounded by limit) for the login to exit, and returns its
// exit code (-1 for a signal) and how long it took from since.
func (l *bgLogin) wait(t *testing.T, since time.Time, limit time.Duration) (int, time.Duration) {
	t.Helper()
	select {
	case err := <-l.waited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), time.Since(since)
		}
		return 0, time.Since(since)
	case <-time.After(limit):
		t.Fatalf("login did not exit within %v: %s", limit, l.stderr())
	}
	return 0, 0
}

// browse GETs u, following redirects, as a browser does.
func browse(t *testing.T, u string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// apiRecorder is a reverse proxy in front of serve's API that keeps the
// login flows begun through it and the paths posted.
type apiRecorder struct {
	mu    sync.Mutex
	flows []string
	posts []string
}

func newAPIRecorder(t *testing.T, base string) (*apiRecorder, string) {
	t.Helper()
	target, _ := url.Parse(base)
	rec := &apiRecorder{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			rec.mu.Lock()
			if r.In.Method == http.MethodPost {
				rec.posts = append(rec.posts, r.In.URL.Path)
			}
			rec.mu.Unlock()
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method != http.MethodPost || !strings.HasSuffix(resp.Request.URL.Path, "/login") {
				return nil
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(strings.NewReader(string(b)))
			if err != nil {
				return err
			}
			var started struct{ Flow string }
			if json.Unmarshal(b, &started) == nil && started.Flow != "" {
				rec.mu.Lock()
				rec.flows = append(rec.flows, started.Flow)
				rec.mu.Unlock()
			}
			return nil
		},
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return rec, strings.TrimPrefix(srv.URL, "http://")
}

func (r *apiRecorder) lastFlow() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.flows) == 0 {
		return ""
	}
	return r.flows[len(r.flows)-1]
}

// post POSTs body to base+path and returns the status and body.
func post(t *testing.T, base, path, body string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// closedPort is a 127.0.0.1 port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestOAuthLoginBadInput runs `mcpvisor login` into what goes wrong, each
// bounded, each with a clear message, and each storing nothing: an
// authorization refused with error=access_denied, a redirect that never
// comes, an unreachable authorization server, a redirect with another
// state (ignored: the real one then completes), Ctrl-C (serve forgets
// the flow), and --no-browser (the URL printed, visited by hand).
func TestOAuthLoginBadInput(t *testing.T) {
	t.Parallel()
	rs := newOAuthResource(t, oauthtest.Options{RefreshTokens: true, Revocation: true})
	deadAS := closedPort(t)
	dead := newOAuthResource(t, oauthtest.Options{AuthorizationServers: []string{"http://" + deadAS}})
	state := filepath.Join(t.TempDir(), "state")
	s := startServeEnv(t, fmt.Sprintf(`{"servers":{"remote":{"url":%q},"dead":{"url":%q}}}`, rs.URL, dead.URL), state, noKeyring)
	stopAtCleanup(t, s)
	addr := strings.TrimPrefix(s.base, "http://")
	browser := browserEnv(t)
	nothingStored := func(t *testing.T, name string) {
		t.Helper()
		if st := authState(t, s.base, name); st == "logged-in" {
			t.Errorf("%s: auth state %q", name, st)
		}
		if sj := secretsJSON(t, state); strings.Contains(sj, "oauth/"+name) {
			t.Errorf("%s: stored in secrets.json: %s", name, sj)
		}
	}
	login := func(t *testing.T, env []string, limit time.Duration, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, env, limit, append([]string{"login"}, append(args, "--addr", addr)...)...)
		t.Logf("login %s: exit %d after %v\n%s%s", strings.Join(args, " "), r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
		return r
	}

	t.Run("access denied", func(t *testing.T) {
		rs.Set(func(o *oauthtest.Options) {
			o.AuthorizeError, o.AuthorizeErrorDesc = "access_denied", "the user said no"
		})
		defer rs.Set(func(o *oauthtest.Options) { o.AuthorizeError, o.AuthorizeErrorDesc = "", "" })
		r := login(t, browser, 20*time.Second, "remote", "--timeout", "10s")
		if r.code == 0 || !strings.Contains(r.stderr, "access_denied") || r.took > 5*time.Second {
			t.Errorf("a denied authorization: exit %d after %v: %s", r.code, r.took, r.stderr)
		}
		nothingStored(t, "remote")
	})

	t.Run("no redirect", func(t *testing.T) {
		r := login(t, []string{"BROWSER=true"}, 20*time.Second, "remote", "--timeout", "2s")
		if r.code == 0 || !strings.Contains(r.stderr, "no redirect came within 2s") || r.took > 6*time.Second {
			t.Errorf("no redirect: exit %d after %v: %s", r.code, r.took, r.stderr)
		}
		nothingStored(t, "remote")
	})

	t.Run("authorization server unreachable", func(t *testing.T) {
		r := login(t, browser, 30*time.Second, "dead", "--timeout", "10s")
		if r.code == 0 || r.took > 10*time.Second || !strings.Contains(r.stderr, "dead") || !strings.Contains(r.stderr, deadAS) {
			t.Errorf("an unreachable authorization server: exit %d after %v: %s", r.code, r.took, r.stderr)
		}
		nothingStored(t, "dead")
	})

	t.Run("ctrl-c", func(t *testing.T) {
		rec, proxied := newAPIRecorder(t, s.base)
		l := startLogin(t, nil, "remote", "--no-browser", "--timeout", "30s", "--addr", proxied)
		auth := l.authURL(t)
		l.waitLine(t, "Waiting for")
		sent := time.Now()
		_ = l.cmd.Process.Signal(os.Interrupt)
		code, took := l.wait(t, sent, 5*time.Second)
		if code == 0 || took > 3*time.Second {
			t.Errorf("after SIGINT: exit %d after %v", code, took)
		}
		flow := rec.lastFlow()
		if flow == "" {
			t.Fatal("no flow was begun through the API")
		}
		// The code the authorization server would have given: serve must
		// no longer know the flow.
		q, err := rs.Approve(auth)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]string{"query": q.Encode()})
		st, body := post(t, s.base, "/api/servers/remote/login/"+flow, string(b))
		if st != http.StatusNotFound {
			t.Errorf("completing the flow of a login ended by Ctrl-C: %d %s (posted: %v); want 404, the flow forgotten", st, body, rec.posts)
			if st == http.StatusOK {
				post(t, s.base, "/api/servers/remote/logout", "") // what the forgotten flow did, undone
			}
		}
		nothingStored(t, "remote")
		t.Logf("exit %d after %v; stderr: %s", code, took, l.stderr())
	})

	t.Run("cancel through the API", func(t *testing.T) {
		st, body := post(t, s.base, "/api/servers/remote/login", `{"redirectUri":"http://127.0.0.1:9/callback"}`)
		var started struct{ Flow, AuthorizationURL string }
		if st != http.StatusOK || json.Unmarshal([]byte(body), &started) != nil || started.Flow == "" {
			t.Fatalf("begin: %d %s", st, body)
		}
		if st, body := post(t, s.base, "/api/servers/remote/login/"+started.Flow+"/cancel", ""); st != http.StatusOK {
			t.Fatalf("cancel: %d %s", st, body)
		}
		q, err := rs.Approve(started.AuthorizationURL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]string{"query": q.Encode()})
		st, body = post(t, s.base, "/api/servers/remote/login/"+started.Flow, string(b))
		if st != http.StatusNotFound || !strings.Contains(body, "flow") {
			t.Errorf("completing a cancelled flow: %d %s", st, body)
		}
		nothingStored(t, "remote")
	})

	t.Run("tampered state", func(t *testing.T) {
		l := startLogin(t, nil, "remote", "--no-browser", "--timeout", "20s", "--addr", addr)
		auth := l.authURL(t)
		l.waitLine(t, "Waiting for")
		u, _ := url.Parse(auth)
		q := u.Query()
		cb, _ := url.Parse(q.Get("redirect_uri"))
		cb.RawQuery = url.Values{"code": {"code-forged"}, "state": {"x" + q.Get("state")}}.Encode()
		if st, body := browse(t, cb.String()); st == http.StatusOK || !strings.Contains(body, "does not belong") {
			t.Errorf("a redirect with another state: %d %s", st, body)
		}
		l.waitLine(t, "Ignored a redirect")
		nothingStored(t, "remote")
		// The real redirect then completes the login.
		if st, body := browse(t, auth); st != http.StatusOK || !strings.Contains(body, "Logged in to remote") {
			t.Errorf("the real redirect: %d %s", st, body)
		}
		if code, _ := l.wait(t, time.Now(), 10*time.Second); code != 0 || !strings.HasPrefix(l.out.String(), "Logged in to remote") {
			t.Errorf("login: exit %d: %s %s", code, l.out.String(), l.stderr())
		}
		if st := authState(t, s.base, "remote"); st != "logged-in" {
			t.Errorf("auth state %q", st)
		}
	})

	if r := runCLI(t, nil, 20*time.Second, "logout", "remote", "--addr", addr); r.code != 0 {
		t.Fatalf("logout: %d %s", r.code, r.stderr)
	}

	t.Run("no browser", func(t *testing.T) {
		l := startLogin(t, []string{"BROWSER=false"}, "remote", "--no-browser", "--timeout", "20s", "--addr", addr)
		auth := l.authURL(t)
		if !strings.HasPrefix(auth, rs.Issuer+"/authorize?") {
			t.Errorf("printed %q", auth)
		}
		if st, body := browse(t, auth); st != http.StatusOK || !strings.Contains(body, "Logged in to remote") {
			t.Errorf("visiting the printed URL: %d %s", st, body)
		}
		if code, _ := l.wait(t, time.Now(), 10*time.Second); code != 0 || !strings.HasPrefix(l.out.String(), "Logged in to remote") {
			t.Errorf("login: exit %d: %s %s", code, l.out.String(), l.stderr())
		}
		if st := authState(t, s.base, "remote"); st != "logged-in" {
			t.Errorf("auth state %q", st)
		}
	})
}

// TestOAuthClientCredentials: a remote server configured with the
// client_credentials grant and a client secret read from a file works
// with no login; `mcpvisor login` says there is nothing to log in to;
// a server whose secret file is missing fails its start naming the
// reference, and the secret is nowhere to be read.
func TestOAuthClientCredentials(t *testing.T) {
	t.Parallel()
	const secretValue = "cc-secret-7f3a9d"
	rs := newOAuthResource(t, oauthtest.Options{ClientID: "cc-client", ClientSecret: secretValue, AuthMethods: []string{"client_secret_basic"}, NoRegistration: true})
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "client-secret")
	if err := os.WriteFile(secretFile, []byte(secretValue+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-secret")
	oauth := func(file string) string {
		return fmt.Sprintf(`{"clientId":"cc-client","clientSecret":"${file:%s}","grant":"client_credentials","tokenEndpointAuthMethod":"client_secret_basic"}`, file)
	}
	state := filepath.Join(dir, "state")
	// mcpvisor's own format: a top-level "servers" is VS Code's mcp.json,
	// whose entries have no such oauth object.
	s := startServeEnv(t, fmt.Sprintf(`{"mcpServers":{"remote":{"url":%q,"oauth":%s},"broken":{"url":%q,"oauth":%s}}}`, rs.URL, oauth(secretFile), rs.URL, oauth(missing)), state, noKeyring)
	stopAtCleanup(t, s)
	addr := strings.TrimPrefix(s.base, "http://")

	sess := connectWithToken(t, s.base+"/servers/remote/mcp", "client-own-token")
	callOK(t, sess, "hello")
	if rs.Count("client-credentials") == 0 || rs.Count("authorize") != 0 {
		t.Errorf("client credentials grants %d, authorizations %d", rs.Count("client-credentials"), rs.Count("authorize"))
	}
	for _, tr := range rs.TokenRequests() {
		if id, sec, ok := (&http.Request{Header: http.Header{"Authorization": {tr.Authorization}}}).BasicAuth(); !ok || id != "cc-client" || sec != secretValue {
			t.Errorf("token request without client_secret_basic: %q %v", tr.Authorization, tr.Form)
		}
	}
	if st := authState(t, s.base, "remote"); st != "client-credentials" {
		t.Errorf("auth state %q", st)
	}
	// A token the resource stops taking is replaced, each time.
	for i := range 2 {
		rs.ExpireAccessTokens()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "hello"})
		cancel()
		if err != nil || res.IsError {
			t.Errorf("call %d after the resource dropped the token: %v %v (%d client credentials grants)", i+1, res, err, rs.Count("client-credentials"))
		}
	}

	r := runCLI(t, nil, 20*time.Second, "login", "remote", "--addr", addr, "--timeout", "5s")
	if r.code == 0 || !strings.Contains(r.stderr, "nothing to log in to") || r.took > 5*time.Second {
		t.Errorf("login of a client credentials server: exit %d after %v: %s%s", r.code, r.took, r.stdout, r.stderr)
	}

	// The server whose secret file is missing: its start fails, naming
	// the reference.
	init := rawCall(s.base+"/servers/broken/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if !strings.Contains(init, `"error"`) || !strings.Contains(init, "${file:"+missing+"}") {
		t.Errorf("initialize on a server whose secret file is missing: %s", init)
	}
	var detail struct{ State, LastError string }
	body := getBody(t, s.base, "/api/servers/broken")
	json.Unmarshal([]byte(body), &detail)
	if !strings.Contains(detail.LastError, "${file:"+missing+"}") {
		t.Errorf("broken: state %q, last error %q; want the reference named", detail.State, detail.LastError)
	}
	insp := runCLI(t, nil, 20*time.Second, "inspect", "remote", "--addr", addr)
	if !strings.Contains(insp.stdout, "${file:"+secretFile+"}") {
		t.Errorf("inspect does not show the reference: %s", insp.stdout)
	}
	for where, what := range map[string]string{
		"serve's log": s.stderrText(), "GET /api/servers": getBody(t, s.base, "/api/servers"), "GET /api/servers/broken": body,
		"GET /api/servers/remote": getBody(t, s.base, "/api/servers/remote"), "GET /api/events": getBody(t, s.base, "/api/events"),
		"inspect remote": insp.stdout + insp.stderr, "login": r.stdout + r.stderr, "initialize": init,
	} {
		if leaked := found(append([]string{secretValue}, rs.IssuedTokens()...), what); len(leaked) > 0 {
			t.Errorf("%s holds %q", where, leaked)
		}
	}
}
