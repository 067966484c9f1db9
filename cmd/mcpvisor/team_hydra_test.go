package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/internal/testserver/hydra"
)

// End to end with a real authorization server: `mcpvisor serve` as an
// OAuth resource server for Ory Hydra's tokens, reached by the go-sdk and
// TypeScript SDK v2 clients that discover everything from the 401 the way
// the MCP specification says.

// teamRig is one serve with auth against the shared Hydra: the fixture
// as "demo" (stdio) and a recording remote HTTP server as "rec". All the
// cases share it (and the one Hydra), to keep the run short.
type teamRig struct {
	hydra *hydra.Server
	base  string // serve's base URL, which is also its auth.publicUrl
	rec   *recordingServer
	serve *started
	audit string // the audit file

	mu      sync.Mutex
	clients []*tokenRecorder // of every client connected
}

// connect is connectOAuth, its client's tokens kept for the leak check.
func (r *teamRig) connect(t *testing.T, url, era string, h auth.OAuthHandler) *teamClient {
	t.Helper()
	cl := connectOAuth(t, url, era, h)
	r.mu.Lock()
	r.clients = append(r.clients, cl.tokens)
	r.mu.Unlock()
	return cl
}

// tokens are every token the rig's clients sent.
func (r *teamRig) tokens() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []string
	for _, c := range r.clients {
		_, toks := c.seen()
		all = append(all, toks...)
	}
	return all
}

// The policy: everyone may call everything but demo's pid, which only
// the ops group may call.
const teamGuardedTool = "pid"

// freeLoopbackPort returns a port on 127.0.0.1 that was free a moment ago:
// serve must know its public URL (its own address) before it listens.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newTeamRig starts Hydra (shared) and one serve whose auth block names
// it, with the ops policy and introspection on; it is stopped when t
// ends.
func newTeamRig(t *testing.T) *teamRig {
	t.Helper()
	t0 := time.Now()
	h := hydra.Shared(t)
	warmHydra(t, h)
	t.Logf("hydra up and warm in %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	binaries(t) // built once per test binary: not this test's cost
	fixture := testserver.Build(t)
	t.Logf("binaries in %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	defer func() { t.Logf("serve up in %v", time.Since(t0).Round(time.Millisecond)) }()
	rec := newRecordingServer(t)
	port := freeLoopbackPort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg := fmt.Sprintf(`{
  "auth": {"issuer": %q, "publicUrl": %q, "scopes": ["mcp"], "serverScopes": {"rec": ["rec:use"]}, "groupsClaim": "ext.groups",
           "introspection": {"url": %q}},
  "audit": {"file": %q},
  "policy": [
    {"name": "everyone", "effect": "allow", "when": "!(server == 'demo' && tool == '%s')"},
    {"name": "ops-pid", "effect": "allow", "when": "server == 'demo' && tool == '%s' && 'ops' in identity.groups"}
  ],
  "mcpServers": {"demo": {"command": %q}, "rec": {"url": %q}}}`,
		h.Issuer(), base, h.IntrospectionURL(), auditFile, teamGuardedTool, teamGuardedTool, fixture, rec.url)
	// Debug logs: the leak check reads everything serve says.
	s := startServe(t, cfg, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--log-level", "debug")
	stopAtCleanup(t, s)
	if s.base != base {
		t.Fatalf("serve listens at %s, want %s", s.base, base)
	}
	return &teamRig{hydra: h, base: base, rec: rec, serve: s, audit: auditFile}
}

// warmHydra has Hydra sign one access token before serve starts. Hydra
// creates its access-token signing key at its first token, so a JWKS read
// before lacks it; serve reads the JWKS when it starts, and refetches it
// for an unknown kid at most every 5 s — a token signed with the new key
// within 5 s of that first read would be refused ("token signed by an
// unknown key"), which is what a fresh Hydra does, not what these tests
// are about.
func warmHydra(t *testing.T, h *hydra.Server) {
	t.Helper()
	c, err := h.CreateClient(t.Context(), hydra.ClientSpec{GrantTypes: []string{"client_credentials"}})
	if err == nil {
		_, err = h.ClientCredentials(t.Context(), c, nil, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// auditLine is a line of the audit file, as far as these tests read it.
type auditLine struct {
	Identity, Issuer, Kind, Client, Endpoint, Server, Method, Target, Outcome, Reason string
	Code                                                                              int
}

// waitAudit waits (at most 10 s: the audit is written behind the
// requests) until the audit file holds a line for which match is true,
// and returns it.
func (r *teamRig) waitAudit(t *testing.T, what string, match func(auditLine) bool) auditLine {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(r.audit)
		for line := range strings.SplitSeq(string(b), "\n") {
			var l auditLine
			if json.Unmarshal([]byte(line), &l) == nil && match(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit has no line for %s after 10 s:\n%s", what, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recordingServer is a remote MCP server (streamable HTTP, go-sdk) with
// one tool, "whoami", recording the Authorization header of every request
// it receives.
type recordingServer struct {
	url   string
	mu    sync.Mutex
	auths []string
	n     int
}

func newRecordingServer(t *testing.T) *recordingServer {
	t.Helper()
	r := &recordingServer{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "rec", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "names the server"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "rec"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.n++
		r.auths = append(r.auths, req.Header.Values("Authorization")...)
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(hs.Close)
	r.url = hs.URL + "/mcp"
	return r
}

// seen returns how many requests reached the server and every
// Authorization value among them.
func (r *recordingServer) seen() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, slices.Clone(r.auths)
}

// tokenRecorder is the MCP client's transport: it keeps every bearer
// token the client sent to mcpvisor.
type tokenRecorder struct {
	mu     sync.Mutex
	tokens []string
	sent   int // requests sent with a token
}

func (tr *tokenRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		tr.mu.Lock()
		tr.sent++
		if !slices.Contains(tr.tokens, tok) {
			tr.tokens = append(tr.tokens, tok)
		}
		tr.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (tr *tokenRecorder) seen() (int, []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.sent, slices.Clone(tr.tokens)
}

// audienceTransport adds Hydra's audience parameter to client
// credentials requests at Hydra's token endpoint: the go-sdk's client
// credentials handler sends neither RFC 8707's resource nor an audience,
// and Hydra puts in a token's aud only what the audience parameter asks.
type audienceTransport struct {
	tokenURL string
	audience string
	asked    int
	mu       sync.Mutex
}

func (a *audienceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.URL.String() == a.tokenURL && r.Body != nil {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		form, err := url.ParseQuery(string(b))
		if err != nil {
			return nil, err
		}
		if form.Get("grant_type") == "client_credentials" {
			form.Set("audience", a.audience)
			a.mu.Lock()
			a.asked++
			a.mu.Unlock()
		}
		enc := form.Encode()
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(strings.NewReader(enc))
		r.ContentLength = int64(len(enc))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(enc)), nil }
	}
	return http.DefaultTransport.RoundTrip(r)
}

// teamClient is a go-sdk client connected through an OAuth handler.
type teamClient struct {
	sess   *mcp.ClientSession
	tokens *tokenRecorder
}

// connectOAuth connects a go-sdk client to url in era ("2025-11-25", or
// "" for the SDK's default, 2026-07-28) with h as its OAuth handler; it
// checks the negotiated version.
func connectOAuth(t *testing.T, url, era string, h auth.OAuthHandler) *teamClient {
	t.Helper()
	tr := &tokenRecorder{}
	client := mcp.NewClient(&mcp.Implementation{Name: "team-e2e", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if era != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: era}
	}
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, OAuthHandler: h, HTTPClient: &http.Client{Transport: tr}}, opts)
	if err != nil {
		t.Fatalf("connect %s (era %q): %v", url, era, err)
	}
	t.Cleanup(func() { sess.Close() })
	want := era
	if want == "" {
		want = "2026-07-28"
	}
	if v := sess.InitializeResult().ProtocolVersion; v != want {
		t.Fatalf("%s: negotiated %q, want %q", url, v, want)
	}
	if n, toks := tr.seen(); n == 0 || len(toks) == 0 {
		t.Fatalf("%s: the client connected without sending a token", url)
	}
	return &teamClient{sess: sess, tokens: tr}
}

// clientCredentialsHandler is the go-sdk's client credentials handler for
// c, its token requests given Hydra's audience for endpoint.
func clientCredentialsHandler(t *testing.T, h *hydra.Server, c hydra.Client, endpoint string) (auth.OAuthHandler, *audienceTransport) {
	t.Helper()
	at := &audienceTransport{tokenURL: h.TokenURL(), audience: endpoint}
	handler, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{
		Credentials: &oauthex.ClientCredentials{ClientID: c.ID, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: c.Secret}, Issuer: h.Issuer()},
		HTTPClient:  &http.Client{Transport: at, Timeout: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return handler, at
}

// headlessBrowser follows an authorization URL through Hydra's login and
// consent (the harness's app logs in the login_hint, subject) until the
// redirect to redirectURI, and returns that redirect's query.
func headlessBrowser(ctx context.Context, authURL, subject, redirectURI string) (url.Values, error) {
	u, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("login_hint", subject)
	u.RawQuery = q.Encode()
	jar, _ := cookiejar.New(nil)
	var callback *url.URL
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirectURI) {
			callback = req.URL
			return http.ErrUseLastResponse
		}
		if len(via) >= 20 {
			return errors.New("more than 20 redirects")
		}
		return nil
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := browser.Do(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	resp.Body.Close()
	if callback == nil {
		return nil, fmt.Errorf("the browser stopped at %s (%s) before the redirect: %s", resp.Request.URL.Path, resp.Status, body)
	}
	cb := callback.Query()
	if e := cb.Get("error"); e != "" {
		return nil, fmt.Errorf("the authorization server answered %s: %s", e, cb.Get("error_description"))
	}
	return cb, nil
}

// authorizationCodeHandler is the go-sdk's authorization code handler for
// the pre-registered client c, whose browser step logs subject in.
func authorizationCodeHandler(t *testing.T, c hydra.Client, subject string) auth.OAuthHandler {
	t.Helper()
	handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		PreregisteredClient: &oauthex.ClientCredentials{ClientID: c.ID, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: c.Secret}},
		RedirectURL:         hydra.DefaultRedirectURI,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			cb, err := headlessBrowser(ctx, args.URL, subject, hydra.DefaultRedirectURI)
			if err != nil {
				return nil, err
			}
			return &auth.AuthorizationResult{Code: cb.Get("code"), State: cb.Get("state"), Iss: cb.Get("iss")}, nil
		},
		// Hydra sends RFC 9207's iss without advertising it.
		AcceptUnadvertisedIss: true,
		Client:                &http.Client{Timeout: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return handler
}

// callText calls tool with args and returns its text; a failure fails t.
func (c *teamClient) callText(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: a tool error: %s", tool, text(res))
	}
	return text(res)
}

// callErrAny calls tool and returns its error, whatever it is.
func (c *teamClient) callErrAny(t *testing.T, tool string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	return err
}

// callErr calls tool and returns the JSON-RPC error it must fail with.
func (c *teamClient) callErr(t *testing.T, tool string) *jsonrpc.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := c.sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("%s: %+v, %v; want a JSON-RPC error", tool, res, err)
	}
	return we
}

func (c *teamClient) toolNames(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := c.sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// eras are the two protocol eras a client may speak: the legacy session
// and 2026-07-28 (the go-sdk's default).
var eras = []struct{ name, version string }{{"2025-11-25", "2025-11-25"}, {"2026-07-28", ""}}

// TestTeamHydra runs every end-to-end case of team identity against one
// Hydra and one serve: clients of both SDKs and both eras, on /mcp and
// on a server's own endpoint, with client credentials, the authorization
// code flow, opaque tokens by introspection, and the policy deciding by
// the groups Hydra put in the token.
func TestTeamHydra(t *testing.T) {
	// Its own Hydra and serve: it may run beside the package's other
	// parallel tests.
	t.Parallel()
	start := time.Now()
	rig := newTeamRig(t)
	t.Logf("hydra and serve up in %v", time.Since(start).Round(time.Millisecond))
	h := rig.hydra
	ctx := t.Context()
	demoURL, mcpURL, recURL := rig.base+"/servers/demo/mcp", rig.base+"/mcp", rig.base+"/servers/rec/mcp"
	audiences := []string{mcpURL, demoURL, recURL}

	// Without a token: the 401 that starts discovery names the metadata
	// of the endpoint, built from the public URL.
	t.Run("challenge", func(t *testing.T) {
		for _, ep := range []string{"/mcp", "/servers/demo/mcp"} {
			req, _ := http.NewRequestWithContext(ctx, "POST", rig.base+ep, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			www := resp.Header.Get("WWW-Authenticate")
			if resp.StatusCode != 401 || !strings.Contains(www, `resource_metadata="`+rig.base+"/.well-known/oauth-protected-resource"+ep+`"`) {
				t.Errorf("%s without a token: %d %q", ep, resp.StatusCode, www)
			}
		}
	})

	t.Run("go-sdk client credentials", func(t *testing.T) {
		c, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"client_credentials"}, Scopes: []string{"mcp"}, Audiences: audiences})
		if err != nil {
			t.Fatal(err)
		}
		for _, era := range eras {
			t.Run(era.name+" /mcp", func(t *testing.T) {
				handler, at := clientCredentialsHandler(t, h, c, mcpURL)
				cl := rig.connect(t, mcpURL, era.version, handler)
				if got := cl.callText(t, "demo__echo", map[string]any{"text": "hi " + era.name}); got != "hi "+era.name {
					t.Errorf("demo__echo: %q", got)
				}
				if at.asked == 0 {
					t.Error("the client never asked Hydra for a token")
				}
				// The identity is the token's: a client credentials
				// token's subject is the client.
				rig.waitAudit(t, "the client's echo on /mcp", func(l auditLine) bool {
					return l.Identity == c.ID && l.Client == c.ID && l.Issuer == h.Issuer() && l.Kind == "token" &&
						l.Endpoint == "/mcp" && l.Server == "demo" && l.Target == "echo" && l.Outcome == "ok"
				})
			})
			t.Run(era.name+" /servers/demo/mcp", func(t *testing.T) {
				handler, _ := clientCredentialsHandler(t, h, c, demoURL)
				cl := rig.connect(t, demoURL, era.version, handler)
				if got := cl.callText(t, "echo", map[string]any{"text": "direct"}); got != "direct" {
					t.Errorf("echo: %q", got)
				}
				rig.waitAudit(t, "the client's echo on demo's endpoint", func(l auditLine) bool {
					return l.Identity == c.ID && l.Endpoint == "/servers/demo/mcp" && l.Target == "echo" && l.Outcome == "ok"
				})
			})
		}
		// A token for one endpoint is no key to another: a client whose
		// token is for /mcp is refused on demo's endpoint (after its one
		// authorization the retry is 401 again, and the SDK gives up).
		t.Run("another endpoint's audience", func(t *testing.T) {
			handler, _ := clientCredentialsHandler(t, h, c, mcpURL)
			client := mcp.NewClient(&mcp.Implementation{Name: "team-e2e", Version: "0"}, nil)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			sess, err := client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: demoURL, MaxRetries: -1, OAuthHandler: handler}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err == nil {
				sess.Close()
				t.Fatal("a token for /mcp opened /servers/demo/mcp")
			}
			if !strings.Contains(err.Error(), "Unauthorized") {
				t.Fatalf("a token for /mcp on /servers/demo/mcp: %v; want Unauthorized", err)
			}
		})
	})

	t.Run("go-sdk authorization code", func(t *testing.T) {
		c, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"authorization_code", "refresh_token"}, Scopes: []string{"mcp"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, era := range eras {
			for _, ep := range []struct{ url, tool string }{{mcpURL, "demo__echo"}, {demoURL, "echo"}} {
				t.Run(era.name+" "+strings.TrimPrefix(ep.url, rig.base), func(t *testing.T) {
					cl := rig.connect(t, ep.url, era.version, authorizationCodeHandler(t, c, "carol"))
					if got := cl.callText(t, ep.tool, map[string]any{"text": "code"}); got != "code" {
						t.Errorf("%s: %q", ep.tool, got)
					}
					// The identity is the user who logged in, the client
					// the one the token was issued to.
					rig.waitAudit(t, "carol's echo", func(l auditLine) bool {
						return l.Identity == "carol" && l.Client == c.ID && l.Endpoint == strings.TrimPrefix(ep.url, rig.base) && l.Target == "echo" && l.Outcome == "ok"
					})
				})
			}
		}
	})

	// Opaque tokens, verified by introspection; the remote server sees
	// none of them (it has no credentials of its own, so no Authorization
	// at all). rec's own endpoint asks for its server scope too, in the
	// one challenge the client gets its token by.
	t.Run("introspection", func(t *testing.T) {
		c, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"client_credentials"}, Scopes: []string{"mcp", "rec:use"}, Audiences: audiences, Opaque: true})
		if err != nil {
			t.Fatal(err)
		}
		var sent []string
		for _, era := range eras {
			for _, ep := range []struct{ url, tool string }{{mcpURL, "rec__whoami"}, {recURL, "whoami"}} {
				handler, at := clientCredentialsHandler(t, h, c, ep.url)
				cl := rig.connect(t, ep.url, era.version, handler)
				if ep.url == mcpURL {
					// /mcp's challenge asked for mcp alone; a call of rec
					// needs rec:use too: 403 insufficient_scope naming both,
					// the client's handler gets a token with them, and the
					// call made again is served (the go-sdk's client does
					// not retry the refused call itself).
					// A legacy session's refused call fails, and its
					// connection keeps the token source it began with: a
					// new one uses the handler's new token. A 2026-07-28
					// call is sent again with it at once.
					if err := cl.callErrAny(t, ep.tool); err != nil {
						if !strings.Contains(err.Error(), "insufficient scope") {
							t.Errorf("%s %s before the step-up: %v", era.name, ep.tool, err)
						}
						cl = rig.connect(t, ep.url, era.version, handler)
					}
					at.mu.Lock()
					asked := at.asked
					at.mu.Unlock()
					if asked != 2 {
						t.Errorf("%s %s: %d token requests, want 2 (the first, and the step-up to rec:use)", era.name, ep.tool, asked)
					}
				}
				if got := cl.callText(t, ep.tool, nil); got != "rec" {
					t.Errorf("%s %s: %q", era.name, ep.tool, got)
				}
				_, toks := cl.tokens.seen()
				for _, tok := range toks {
					if strings.Count(tok, ".") == 2 {
						t.Errorf("%s: the client sent a JWT, not an opaque token", era.name)
					}
				}
				sent = append(sent, toks...)
			}
		}
		rig.waitAudit(t, "the opaque token's call", func(l auditLine) bool {
			return l.Identity == c.ID && l.Client == c.ID && l.Server == "rec" && l.Target == "whoami" && l.Outcome == "ok"
		})
		n, auths := rig.rec.seen()
		if n == 0 {
			t.Fatal("no request reached the remote server")
		}
		for _, a := range auths {
			for _, tok := range sent {
				if strings.Contains(a, tok) {
					t.Fatalf("the remote server received the client's token")
				}
			}
		}
		if len(auths) != 0 {
			t.Errorf("the remote server, which has no credentials, received %d Authorization headers", len(auths))
		}
	})

	// The policy decides by the groups Hydra granted: alice is in ops and
	// may call pid; bob is not and is told "not permitted" (-32012) —
	// in both eras, on /mcp and on demo's own endpoint.
	t.Run("policy", func(t *testing.T) {
		h.SetClaims("alice", map[string]any{"groups": []string{"ops"}})
		t.Cleanup(func() { h.SetClaims("alice", nil) })
		c, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"authorization_code", "refresh_token"}, Scopes: []string{"mcp"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, era := range eras {
			for _, ep := range []struct{ url, prefix string }{{mcpURL, "demo__"}, {demoURL, ""}} {
				t.Run(era.name+" "+strings.TrimPrefix(ep.url, rig.base), func(t *testing.T) {
					alice := rig.connect(t, ep.url, era.version, authorizationCodeHandler(t, c, "alice"))
					bob := rig.connect(t, ep.url, era.version, authorizationCodeHandler(t, c, "bob"))
					if got := alice.callText(t, ep.prefix+teamGuardedTool, nil); got == "" {
						t.Errorf("alice: %s answered nothing", teamGuardedTool)
					}
					we := bob.callErr(t, ep.prefix+teamGuardedTool)
					if we.Code != -32012 || we.Message != "not permitted" {
						t.Errorf("bob: error %d %q, want -32012 \"not permitted\"", we.Code, we.Message)
					}
					if strings.Contains(string(we.Data)+we.Message, "ops") {
						t.Errorf("bob's denial tells the rule: %q %s", we.Message, we.Data)
					}
					// The audit has the denial in full, and alice's call.
					endpoint := strings.TrimPrefix(ep.url, rig.base)
					rig.waitAudit(t, "bob's denial", func(l auditLine) bool {
						return l.Identity == "bob" && l.Client == c.ID && l.Endpoint == endpoint && l.Target == teamGuardedTool &&
							l.Outcome == "denied" && l.Code == -32012 && l.Reason != ""
					})
					rig.waitAudit(t, "alice's call", func(l auditLine) bool {
						return l.Identity == "alice" && l.Endpoint == endpoint && l.Target == teamGuardedTool && l.Outcome == "ok"
					})
					// bob may still use what everyone may.
					if got := bob.callText(t, ep.prefix+"echo", map[string]any{"text": "bob"}); got != "bob" {
						t.Errorf("bob: echo %q", got)
					}
					// alice's session id is no way in for bob: a session
					// another identity opened is not found.
					if sid := alice.sess.ID(); sid != "" {
						_, bobToks := bob.tokens.seen()
						body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + ep.prefix + teamGuardedTool + `","arguments":{}}}`
						req, _ := http.NewRequestWithContext(ctx, "POST", ep.url, strings.NewReader(body))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Accept", "application/json, text/event-stream")
						req.Header.Set("Mcp-Session-Id", sid)
						req.Header.Set("MCP-Protocol-Version", era.name)
						req.Header.Set("Authorization", "Bearer "+bobToks[len(bobToks)-1])
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), `"result"`) {
							t.Errorf("bob with alice's session: %d %s; want 404", resp.StatusCode, b)
						}
						if got := alice.callText(t, ep.prefix+teamGuardedTool, nil); got == "" {
							t.Errorf("alice's session after bob's try: %s answered nothing", teamGuardedTool)
						}
					} else if era.version != "" {
						t.Errorf("a %s session has no id", era.name)
					}
					// Lists are filtered by the same rules.
					if names := alice.toolNames(t); !slices.Contains(names, ep.prefix+teamGuardedTool) {
						t.Errorf("alice is not listed %s: %v", teamGuardedTool, names)
					}
					if names := bob.toolNames(t); slices.Contains(names, ep.prefix+teamGuardedTool) || !slices.Contains(names, ep.prefix+"echo") {
						t.Errorf("bob is listed %v; want echo and not %s", names, teamGuardedTool)
					}
				})
			}
		}
	})
	// The TypeScript SDK v2 client: its ClientCredentialsProvider, and
	// the authorization code flow with a pre-registered client, whose
	// browser step is headless; both eras, both endpoints; the policy
	// holds for it too.
	t.Run("typescript", func(t *testing.T) {
		h.SetClaims("alice", map[string]any{"groups": []string{"ops"}})
		t.Cleanup(func() { h.SetClaims("alice", nil) })
		cc, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"client_credentials"}, Scopes: []string{"mcp"}, Audiences: audiences, AuthMethod: hydra.AuthSecretBasic})
		if err != nil {
			t.Fatal(err)
		}
		// The SDK asks for offline_access too when the client may refresh
		// and the issuer offers it.
		code, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"authorization_code", "refresh_token"}, Scopes: []string{"mcp", "offline_access"}, AuthMethod: hydra.AuthSecretBasic})
		if err != nil {
			t.Fatal(err)
		}
		browser := browserServer(t)
		type tsCase struct {
			name string
			teamTSCase
			check func(teamTSResult) bool
		}
		var cases []tsCase
		for _, mode := range []struct{ name, version string }{{"legacy", "2025-11-25"}, {"pin", "2026-07-28"}} {
			for _, ep := range []struct{ url, prefix string }{{mcpURL, "demo__"}, {demoURL, ""}} {
				name := mode.version + " " + strings.TrimPrefix(ep.url, rig.base)
				cases = append(cases, tsCase{"client credentials " + name,
					teamTSCase{Grant: "client_credentials", Mode: mode.name, URL: ep.url, Tool: ep.prefix + "echo", Args: map[string]any{"text": "ts"},
						ClientID: cc.ID, ClientSecret: cc.Secret, Issuer: h.Issuer(), Scope: "mcp", Audience: ep.url},
					func(r teamTSResult) bool { return r.Error == "" && r.Version == mode.version && r.Text == "ts" }})
				cases = append(cases, tsCase{"authorization code, alice, " + name,
					teamTSCase{Grant: "authorization_code", Mode: mode.name, URL: ep.url, Tool: ep.prefix + teamGuardedTool,
						ClientID: code.ID, ClientSecret: code.Secret, Issuer: h.Issuer(), Redirect: hydra.DefaultRedirectURI, Browser: browser + "/?subject=alice"},
					func(r teamTSResult) bool {
						return r.Error == "" && r.Version == mode.version && r.Text != "" && slices.Contains(r.Tools, ep.prefix+teamGuardedTool)
					}})
			}
		}
		cases = append(cases, tsCase{"authorization code, bob is not permitted",
			teamTSCase{Grant: "authorization_code", Mode: "pin", URL: mcpURL, Tool: "demo__" + teamGuardedTool,
				ClientID: code.ID, ClientSecret: code.Secret, Issuer: h.Issuer(), Redirect: hydra.DefaultRedirectURI, Browser: browser + "/?subject=bob"},
			func(r teamTSResult) bool {
				return r.Code != nil && *r.Code == -32012 && strings.Contains(r.Error, "not permitted") &&
					!slices.Contains(r.Tools, "demo__"+teamGuardedTool) && slices.Contains(r.Tools, "demo__echo")
			}})
		in := make([]teamTSCase, len(cases))
		for i, c := range cases {
			in[i] = c.teamTSCase
		}
		for i, r := range runTeamTSClient(t, in) {
			if !cases[i].check(r) {
				t.Errorf("%s: %+v", cases[i].name, r)
			}
		}
	})

	// No token the clients sent is in what serve wrote (at debug level)
	// or in its audit.
	t.Run("no token leaks", func(t *testing.T) {
		toks := rig.tokens()
		if len(toks) < 10 {
			t.Fatalf("only %d tokens were sent", len(toks))
		}
		audit, _ := os.ReadFile(rig.audit)
		logs := rig.serve.stderrText()
		if len(audit) == 0 || !strings.Contains(logs, "level") {
			t.Fatalf("nothing to look in: %d bytes of audit, logs %q", len(audit), logs)
		}
		for _, tok := range toks {
			// A JWT's signature alone is enough to be a leak.
			sig := tok[strings.LastIndexByte(tok, '.')+1:]
			if strings.Contains(logs, sig) || strings.Contains(string(audit), sig) {
				t.Errorf("a client's token is in serve's logs or audit")
			}
		}
	})
	t.Logf("TestTeamHydra took %v", time.Since(start).Round(time.Millisecond))
}
