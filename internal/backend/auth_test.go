package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// fakeAuth is an Authorizer whose token and answers the test sets.
type fakeAuth struct {
	mu         sync.Mutex
	token      string
	tokenErr   error
	next       string // the token after a challenge, "" for none
	challenged []string
	stop       error // what a challenge answers, if set
}

func (a *fakeAuth) Token(context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.token, a.tokenErr
}

func (a *fakeAuth) Challenged(_ context.Context, used string, status int, h string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.challenged = append(a.challenged, used+" "+http.StatusText(status)+" "+h)
	if a.stop != nil {
		return false, a.stop
	}
	if a.next == "" {
		return false, nil
	}
	a.token, a.next = a.next, ""
	return true, nil
}

func (a *fakeAuth) challenges() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.challenged...)
}

// requireBearer makes f answer 401 to every request without want.
func requireBearer(f *fixture, want string) {
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer "+want {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", resource_metadata="https://example.test/.well-known/oauth-protected-resource"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return true
		}
		return false
	})
}

// The authorizer's token goes on every request to the server, in both
// transports; a 401 is told to it and, when it has a new token, the same
// request is sent once more with it, unseen by the connection.
func TestAuthorizerTokenAndRetry(t *testing.T) {
	for _, sse := range []bool{false, true} {
		f := newFixture(t, sse)
		requireBearer(f, "fresh")
		a := &fakeAuth{token: "stale", next: "fresh"}
		transport := ""
		if sse {
			transport = "sse"
		}
		c := connect(t, &HTTPConnector{Name: "remote", URL: f.url, Transport: transport, Auth: a})
		call(t, c, "tools/list", `{}`)
		if got := a.challenges(); len(got) != 1 || !strings.Contains(got[0], `error="invalid_token"`) || !strings.HasPrefix(got[0], "stale ") {
			t.Errorf("sse %v: challenges %q, want the one 401's header", sse, got)
		}
		var stale, fresh int
		for _, r := range f.requests() {
			switch r.bearer {
			case "Bearer stale":
				stale++
			case "Bearer fresh":
				fresh++
			default:
				t.Errorf("sse %v: %s %s with Authorization %q", sse, r.method, r.rpcMethod, r.bearer)
			}
		}
		if stale != 1 || fresh == 0 {
			t.Errorf("sse %v: %d requests with the stale token (want the one refused), %d with the fresh", sse, stale, fresh)
		}
	}
}

// No token yet (nothing known of the server's authorization): no
// Authorization header at all, and a server that needs none serves.
func TestAuthorizerNoTokenSendsNone(t *testing.T) {
	f := newFixture(t, false)
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url, Auth: &fakeAuth{}})
	call(t, c, "tools/list", `{}`)
	for _, r := range f.requests() {
		if r.bearer != "" {
			t.Errorf("%s %s with Authorization %q", r.method, r.rpcMethod, r.bearer)
		}
	}
}

// needsLogin is an authorizer's error only the user can end, as the
// fleet's needs-login error is: it carries its own answer.
type needsLogin struct{}

func (needsLogin) Error() string { return "needs a login" }
func (needsLogin) RPCError() *rpc.Error {
	return &rpc.Error{Code: rpc.BackendUnavailable, Message: "needs a login", Data: json.RawMessage(`{"needsLogin":true}`)}
}

var errNeedsLogin error = needsLogin{}

// An authorizer that cannot authorize (no login yet, a refresh token
// revoked) fails the connection at once, before any request is sent, as
// ErrAuthRequired wrapping its error — permanent: no crash loop.
func TestAuthorizerErrorFailsTheConnect(t *testing.T) {
	f := newFixture(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := (&HTTPConnector{Name: "remote", URL: f.url, Auth: &fakeAuth{tokenErr: errNeedsLogin}, Logger: quiet()}).Connect(ctx)
	if !errors.Is(err, errNeedsLogin) || !errors.Is(err, lifecycle.ErrAuthRequired) || !lifecycle.IsPermanent(err) {
		t.Errorf("Connect: %v, want ErrAuthRequired wrapping the authorizer's error", err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests sent without authorization", n)
	}

	// A 401 the authorizer cannot answer: the same, after one request.
	requireBearer(f, "other")
	_, err = (&HTTPConnector{Name: "remote", URL: f.url, Auth: &fakeAuth{token: "t", stop: errNeedsLogin}, Logger: quiet()}).Connect(ctx)
	if !errors.Is(err, errNeedsLogin) || !errors.Is(err, lifecycle.ErrAuthRequired) {
		t.Errorf("Connect after a 401: %v, want ErrAuthRequired wrapping the authorizer's error", err)
	}
	// Also a modern server's probe.
	_, err = (&HTTPConnector{Name: "remote", URL: f.url, Protocol: ProtocolAuto, Auth: &fakeAuth{token: "t", stop: errNeedsLogin}, Logger: quiet()}).Connect(ctx)
	if !errors.Is(err, errNeedsLogin) || !errors.Is(err, lifecycle.ErrAuthRequired) {
		t.Errorf("Connect (auto) after a 401: %v, want ErrAuthRequired wrapping the authorizer's error", err)
	}
}

// An authorizer that cannot tell now (its authorization server does not
// answer while the token needs a refresh) fails the start as a server
// that does not answer would: retried, never "authentication required".
func TestAuthorizerTransientErrorIsRetried(t *testing.T) {
	f := newFixture(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	down := errors.New("the authorization server did not answer")
	for _, a := range []*fakeAuth{{tokenErr: down}, {token: "t", stop: down}} {
		if a.stop != nil {
			requireBearer(f, "other")
		}
		_, err := (&HTTPConnector{Name: "remote", URL: f.url, Auth: a, Logger: quiet()}).Connect(ctx)
		if err == nil || !errors.Is(err, down) || errors.Is(err, lifecycle.ErrAuthRequired) || lifecycle.IsPermanent(err) {
			t.Errorf("Connect with %+v: %v, want a transient failure naming the authorizer's error", a, err)
		}
	}
}

// The token goes to the server's host only: a redirect to another host
// carries none.
func TestAuthorizerTokenStaysOnTheServersHost(t *testing.T) {
	got := make(chan string, 4)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer other.Close()
	f := newFixture(t, false)
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		// 127.0.0.1 and localhost are two hosts to the transport.
		http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/mcp", http.StatusTemporaryRedirect)
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = (&HTTPConnector{Name: "remote", URL: f.url, Auth: &fakeAuth{token: "secret-token"}, Logger: quiet()}).Connect(ctx)
	select {
	case h := <-got:
		if h != "" {
			t.Errorf("the redirect's target got Authorization %q", h)
		}
	default:
		t.Fatal("the redirect was not followed: the test proves nothing")
	}
	for _, r := range f.requests() {
		if r.bearer != "Bearer secret-token" {
			t.Errorf("the server's own request %s had Authorization %q", r.method, r.bearer)
		}
	}
}

// answerErr is an authorizer's error with a JSON-RPC answer of its own
// (AnswerError), as the fleet's "needs a login" is.
type answerErr struct{}

func (answerErr) Error() string { return "the server wants scope x" }

func (answerErr) RPCError() *rpc.Error {
	return &rpc.Error{Code: rpc.BackendUnavailable, Message: "the server wants scope x", Data: json.RawMessage(`{"needsLogin":true,"scope":"x"}`)}
}

// forbidEcho makes f refuse, with 403 insufficient_scope, the echo calls
// whose text is "forbid".
func forbidEcho(f *fixture) {
	f.setWrap(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"forbid"`)) {
			return false
		}
		w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="x"`)
		http.Error(w, "forbidden", http.StatusForbidden)
		return true
	})
}

// A call the server refuses for want of scope, which the authorizer
// stops with an error that has an answer of its own, is answered with
// that error, data included; the connection goes on (in both
// transports), and ends later as any other would.
func TestAuthorizerAnswerErrorStepUp(t *testing.T) {
	for _, sse := range []bool{false, true} {
		f := newFixture(t, sse)
		forbidEcho(f)
		a := &fakeAuth{token: "t", stop: answerErr{}}
		transport := ""
		if sse {
			transport = "sse"
		}
		c := connect(t, &HTTPConnector{Name: "remote", URL: f.url, Transport: transport, Auth: a})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := c.Call(ctx, "tools/call", json.RawMessage(`{"name":"echo","arguments":{"text":"forbid"}}`))
		cancel()
		if err != nil || m.Error == nil {
			t.Fatalf("sse %v: the refused call: %v %+v, want a JSON-RPC error", sse, err, m)
		}
		if m.Error.Code != rpc.BackendUnavailable || m.Error.Message != "the server wants scope x" || string(m.Error.Data) != `{"needsLogin":true,"scope":"x"}` {
			t.Errorf("sse %v: answered %d %q %s, want the authorizer's error", sse, m.Error.Code, m.Error.Message, m.Error.Data)
		}
		if got := a.challenges(); len(got) != 1 || !strings.Contains(got[0], "Forbidden") {
			t.Errorf("sse %v: challenges %q", sse, got)
		}
		call(t, c, "tools/call", `{"name":"echo","arguments":{"text":"hi"}}`)
		if !c.Alive() {
			t.Errorf("sse %v: the connection ended", sse)
		}
		// It ended by the server's loss is no authorization failure.
		f.kill()
		if err := waitFor(t, c); errors.Is(err, lifecycle.ErrAuthRequired) {
			t.Errorf("sse %v: Wait: %v, a refused step-up made it an authorization failure", sse, err)
		}
	}
}

// An authorizer that stops requests for a while (its token refused, a
// login under way) answers them with its error and leaves the
// connection up; once a request is authorized again, what it reported is
// forgotten: the connection's later end, the server gone, is a transport
// failure, not ErrAuthRequired (which is permanent: no restart).
func TestAuthorizerAuthorizedAgainClears(t *testing.T) {
	f := newFixture(t, false)
	a := &fakeAuth{}
	c := connect(t, &HTTPConnector{Name: "remote", URL: f.url, Auth: a})
	a.mu.Lock()
	a.tokenErr = answerErr{}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	m, err := c.Call(ctx, "tools/list", json.RawMessage(`{}`))
	cancel()
	if err != nil || m.Error == nil || string(m.Error.Data) != `{"needsLogin":true,"scope":"x"}` {
		t.Fatalf("the stopped call: %v %+v, want the authorizer's error", err, m)
	}
	a.mu.Lock()
	a.tokenErr = nil
	a.mu.Unlock()
	call(t, c, "tools/list", `{}`)
	f.kill()
	err = waitFor(t, c)
	if errors.Is(err, lifecycle.ErrAuthRequired) || !(errors.Is(err, lifecycle.ErrServerUnavailable) || errors.Is(err, lifecycle.ErrTransport)) {
		t.Errorf("Wait: %v, want a transport failure", err)
	}
}

// The headers and the token go to the server's own origin only: its host
// by its scheme. A redirect from https down to http on the same host (or
// to another host, or port) is another origin.
func TestHeadersStayAtTheServersOrigin(t *testing.T) {
	ht := &headerTransport{scheme: "https", host: "mcp.example.com"}
	for u, want := range map[string]bool{
		"https://mcp.example.com/mcp":      true,
		"HTTPS://mcp.example.com/x":        true,
		"http://mcp.example.com/mcp":       false,
		"https://mcp.example.com:8443/mcp": false,
		"https://evil.example.com/mcp":     false,
	} {
		p, _ := url.Parse(u)
		if got := ht.own(p); got != want {
			t.Errorf("own(%s) = %v, want %v", u, got, want)
		}
	}
}
