package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// oauthFleet runs remote servers (JSON of mcpServers' members) for real,
// recording its events.
type oauthFleet struct {
	f      *Fleet
	mu     sync.Mutex
	events []Event
}

func newOAuthFleet(t *testing.T, servers string) *oauthFleet {
	t.Helper()
	return newOAuthFleetStore(t, servers, nil)
}

// newOAuthFleetStore is newOAuthFleet with store as its secret store,
// where the grants keep their records.
func newOAuthFleetStore(t *testing.T, servers string, store secret.Store) *oauthFleet {
	t.Helper()
	rt, err := proc.Open(proc.Options{NoCgroup: true, NoPIDNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	of := &oauthFleet{}
	of.f, err = New(parseCfg(t, servers), Options{Runtime: rt, Logger: discardLogger(), Secrets: store,
		OnEvent: func(e Event) {
			recordEvent(normalOAuthEvent(e))
			of.mu.Lock()
			of.events = append(of.events, e)
			of.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = of.f.Close(ctx)
		_ = rt.Close(ctx)
	})
	return of
}

// normalOAuthEvent is e with what the test servers make vary from run to
// run (the issuer's port, the token's expiry) made constant, and its
// server named as other tests' are, for the golden events.
func normalOAuthEvent(e Event) Event {
	e.Server = "s"
	if e.Details == nil {
		return e
	}
	d := map[string]any{}
	for k, v := range e.Details {
		switch k {
		case "issuer":
			v = "http://127.0.0.1:PORT"
		case "expires":
			v = "2026-01-02T04:04:05Z"
		}
		d[k] = v
	}
	e.Details = d
	return e
}

// count is how many events of kind the server had.
func (of *oauthFleet) count(server, kind string) int {
	of.mu.Lock()
	defer of.mu.Unlock()
	n := 0
	for _, e := range of.events {
		if e.Server == server && string(e.Type) == kind {
			n++
		}
	}
	return n
}

func (of *oauthFleet) last(server, kind string) *Event {
	of.mu.Lock()
	defer of.mu.Unlock()
	for i := len(of.events) - 1; i >= 0; i-- {
		if e := of.events[i]; e.Server == server && string(e.Type) == kind {
			return &e
		}
	}
	return nil
}

// remoteMCP is a go-sdk MCP server over Streamable HTTP with two tools:
// echo, and forbidden, which the handler refuses with 403
// insufficient_scope (scope "x") before the server sees it. bearers
// records the Authorization header of every request that reaches it.
type remoteMCP struct {
	h       http.Handler
	mu      sync.Mutex
	bearers []string
}

func newRemoteMCP(t *testing.T) *remoteMCP {
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1.0.0"}, nil)
	schema := json.RawMessage(`{"type":"object"}`)
	for _, name := range []string{"echo", "other"} {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " done"}}}, nil
		})
	}
	s.AddTool(&mcp.Tool{Name: "forbidden", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "should not be reached"}}}, nil
	})
	// The sessions a client left (its connection failed, so no DELETE)
	// end with the test.
	t.Cleanup(func() {
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	})
	return &remoteMCP{h: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)}
}

func (m *remoteMCP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.bearers = append(m.bearers, r.Header.Get("Authorization"))
	m.mu.Unlock()
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string
			Params struct{ Name string }
		}
		_ = json.Unmarshal(body, &msg)
		if msg.Method == "tools/call" && msg.Params.Name == "forbidden" {
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="x"`)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
	}
	m.h.ServeHTTP(w, r)
}

func (m *remoteMCP) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.bearers...)
}

// conn is the connection of the server's running instance.
func conn(t *testing.T, s *Server) *backend.Conn {
	t.Helper()
	l, err := s.Acquire(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	c, ok := l.in.current().(*backend.Conn)
	if !ok {
		t.Fatalf("the instance's connection is %T", l.in.current())
	}
	return c
}

func callTool(ctx context.Context, c *backend.Conn, name string) (*rpc.Message, error) {
	return c.Call(ctx, "tools/call", json.RawMessage(`{"name":"`+name+`","arguments":{}}`))
}

// waitState waits (bounded) for the server's state.
func waitState(t *testing.T, s *Server, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Status().State != want {
		if time.Now().After(deadline) {
			t.Fatalf("state %q, want %q", s.Status().State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// login logs the server in through the test authorization server.
func login(t *testing.T, s *Server, as *oauthtest.Server) oauthclient.Info {
	t.Helper()
	flow, err := s.Login(t.Context(), "http://127.0.0.1:9/callback")
	if err != nil {
		t.Fatal(err)
	}
	q, err := as.Approve(flow.AuthURL)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.CompleteLogin(t.Context(), flow.ID, q)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// A remote server behind OAuth with no login: its first request fails
// with NeedsLoginError naming the command, its state says needs-login
// (one event), and later requests are refused at once — nothing reaches
// the server, no crash loop. A login starts it; its requests carry the
// authorization server's token. A revoked refresh token puts it back in
// needs-login; a logout forgets the tokens.
func TestOAuthNeedsLoginThenLogin(t *testing.T) {
	rs := newRemoteMCP(t)
	as := oauthtest.New(t, oauthtest.Options{Handler: rs, RefreshTokens: true, Revocation: true})
	of := newOAuthFleet(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0"}`)
	s := of.f.Get("r")

	if info, ok := s.OAuth(); !ok || info.State != oauthclient.StateNone {
		t.Fatalf("before any request: OAuth %+v %v, want state none", info, ok)
	}
	_, err := use(s.Acquire(t.Context(), ""))
	var nl *NeedsLoginError
	if !errors.As(err, &nl) || nl.Server != "r" || !strings.Contains(err.Error(), `mcpvisor login r`) {
		t.Fatalf("first Acquire: %v, want a NeedsLoginError naming mcpvisor login r", err)
	}
	if !errors.Is(err, oauthclient.ErrNeedsLogin) {
		t.Errorf("the error is not ErrNeedsLogin: %v", err)
	}
	data := map[string]any{}
	if e := nl.RPCError(); e.Code != rpc.BackendUnavailable || json.Unmarshal(e.Data, &data) != nil ||
		data["needsLogin"] != true || data["command"] != "mcpvisor login r" || data["server"] != "r" {
		t.Errorf("RPCError %d %s", e.Code, e.Data)
	}
	st := s.Status()
	if st.State != "needs-login" || st.OAuth == nil || st.OAuth.State != oauthclient.StateNeedsLogin || st.OAuth.Reason != oauthclient.ReasonNoCredentials {
		t.Fatalf("status %q oauth %+v, want needs-login (no credentials)", st.State, st.OAuth)
	}
	if n := of.count("r", "needs-login"); n != 1 {
		t.Errorf("%d needs-login events, want 1", n)
	}
	failures, next, spawns := st.Failures, st.NextAttempt, st.Spawns
	if !next.IsZero() {
		t.Errorf("a crash loop: next attempt %v (%d failures)", next, failures)
	}

	// Refused at once: no request reaches the resource.
	before := as.Count("resource")
	for range 3 {
		_, err = use(s.Acquire(t.Context(), ""))
		if !errors.As(err, &nl) || nl.Reason != oauthclient.ReasonNoCredentials {
			t.Fatalf("later Acquire: %v, want a NeedsLoginError (no credentials)", err)
		}
	}
	if n := as.Count("resource"); n != before {
		t.Errorf("%d requests reached the resource while it needs a login", n-before)
	}
	if st := s.Status(); st.Failures != failures || !st.NextAttempt.IsZero() || st.Spawns != spawns {
		t.Errorf("refusals counted as failed starts: failures %d→%d, spawns %d→%d, next %v", failures, st.Failures, spawns, st.Spawns, st.NextAttempt)
	}
	if n := of.count("r", "needs-login"); n != 1 {
		t.Errorf("%d needs-login events after the refusals, want 1", n)
	}

	// Log in: the server is started again at once.
	info := login(t, s, as)
	if info.State != oauthclient.StateLoggedIn || info.Issuer != as.Issuer {
		t.Fatalf("login: %+v", info)
	}
	if e := of.last("r", "logged-in"); e == nil || e.Details["issuer"] != as.Issuer {
		t.Errorf("logged-in event %+v", e)
	}
	waitState(t, s, "running")
	if st := s.Status(); st.OAuth == nil || st.OAuth.State != oauthclient.StateLoggedIn || st.Failures != 0 {
		t.Errorf("after the login: oauth %+v, failures %d", st.OAuth, st.Failures)
	}
	c := conn(t, s)
	if m, err := callTool(t.Context(), c, "echo"); err != nil || m.Error != nil {
		t.Fatalf("echo after the login: %v %+v", err, m)
	}
	issued := as.IssuedTokens()
	bearers := rs.seen()
	if len(bearers) == 0 {
		t.Fatal("no request reached the server")
	}
	for _, b := range bearers {
		tok, ok := strings.CutPrefix(b, "Bearer ")
		if !ok || !strings.HasPrefix(tok, "tok-") || !contains(issued, tok) {
			t.Fatalf("the server got Authorization %q, not a token the authorization server issued", b)
		}
	}

	// Tokens revoked: the access token fails, its refresh is refused.
	as.RevokeAll()
	m, err := callTool(t.Context(), c, "echo")
	if err == nil && m.Error != nil {
		err = m.Error
	}
	if err == nil || !strings.Contains(err.Error(), "refresh token expired or revoked") || !strings.Contains(err.Error(), "mcpvisor login r") {
		t.Fatalf("a call after the revocation: %v, want a needs-login error (refresh token expired or revoked)", err)
	}
	if n := of.count("r", "needs-login"); n != 2 {
		t.Errorf("%d needs-login events, want a second one", n)
	}
	if e := of.last("r", "needs-login"); e == nil || e.Details["reason"] != oauthclient.ReasonRefreshRejected {
		t.Errorf("needs-login event %+v", e)
	}
	if info, _ := s.OAuth(); info.State != oauthclient.StateNeedsLogin || info.Reason != oauthclient.ReasonRefreshRejected {
		t.Errorf("OAuth %+v after the revocation", info)
	}
	// The next request is refused at once.
	_, err = use(s.Acquire(t.Context(), ""))
	if !errors.As(err, &nl) || nl.Reason != oauthclient.ReasonRefreshRejected {
		t.Errorf("Acquire after the revocation: %v", err)
	}
	// The connection, whose requests can no longer be authorized, ends:
	// the server needs a login, with no crash loop.
	waitState(t, s, "needs-login")
	if st := s.Status(); !st.NextAttempt.IsZero() {
		t.Errorf("after the revocation: next attempt %v (%d failures)", st.NextAttempt, st.Failures)
	}

	// Log in again, then out.
	login(t, s, as)
	waitState(t, s, "running")
	revoked, err := s.Logout(t.Context())
	if err != nil || !revoked {
		t.Errorf("Logout: revoked %v, %v", revoked, err)
	}
	if n := of.count("r", "logged-out"); n != 1 {
		t.Errorf("%d logged-out events, want 1", n)
	}
	// The running server was restarted: without a token, the server
	// asked for one (once its restart is over).
	waitState(t, s, "needs-login")
	if info, _ := s.OAuth(); info.State != oauthclient.StateNeedsLogin || info.Reason != oauthclient.ReasonNoCredentials {
		t.Errorf("OAuth after the logout: %+v, want needs-login (no credentials)", info)
	}
	if st := s.Status(); st.State != "needs-login" || !st.NextAttempt.IsZero() {
		t.Errorf("status after the logout: %q (%s), next attempt %v", st.State, st.LastError, st.NextAttempt)
	}
	if n := of.count("r", "needs-login"); n != 3 {
		t.Errorf("%d needs-login events, want a third after the logout", n)
	}
	if len(as.Revocations()) == 0 {
		t.Error("nothing revoked at the authorization server")
	}
	// Nothing the fleet shows holds a token.
	shown, _ := json.Marshal([]any{s.Status(), s.Detail(), of.events})
	for _, tok := range as.IssuedTokens() {
		if strings.Contains(string(shown), tok) {
			t.Fatalf("the fleet shows a token: %s", shown)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// A server with its own Authorization header has no login: no grant,
// the header sent as configured. A server that needs no authorization
// runs with none sent, its grant in state none.
func TestOAuthNotEligibleOrNotNeeded(t *testing.T) {
	rs := newRemoteMCP(t)
	open := newLoopbackServer(t, rs)
	as := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t)})
	of := newOAuthFleet(t, `"h":{"url":"`+as.URL+`","idleTimeout":"0","headers":{"Authorization":"Bearer configured"}},
		"o":{"url":"`+open+`/mcp","idleTimeout":"0"}`)

	h := of.f.Get("h")
	if info, ok := h.OAuth(); ok {
		t.Errorf("h has a grant: %+v", info)
	}
	if _, err := h.Login(t.Context(), "http://127.0.0.1:9/callback"); !errors.Is(err, ErrNoLogin) {
		t.Errorf("Login of h: %v, want ErrNoLogin", err)
	}
	if _, err := h.Logout(t.Context()); !errors.Is(err, ErrNoLogin) {
		t.Errorf("Logout of h: %v, want ErrNoLogin", err)
	}
	_, err := use(h.Acquire(t.Context(), ""))
	var nl *NeedsLoginError
	if err == nil || errors.As(err, &nl) {
		t.Errorf("h refused by the server: %v, want a start error that is no NeedsLoginError", err)
	}
	if st := h.Status(); st.OAuth != nil || st.State == "needs-login" {
		t.Errorf("h's status: %q %+v", st.State, st.OAuth)
	}
	if of.f.currentGrant("h") != nil {
		t.Error("a grant was built for h")
	}

	o := of.f.Get("o")
	c := conn(t, o)
	if m, err := callTool(t.Context(), c, "echo"); err != nil || m.Error != nil {
		t.Fatalf("echo: %v %+v", err, m)
	}
	for _, b := range rs.seen() {
		if b != "" {
			t.Errorf("the open server got Authorization %q", b)
		}
	}
	if len(rs.seen()) == 0 {
		t.Fatal("no request reached the open server")
	}
	if info, ok := o.OAuth(); !ok || info.State != oauthclient.StateNone {
		t.Errorf("o's OAuth %+v %v, want state none", info, ok)
	}
	if st := o.Status(); st.State != "running" || st.OAuth == nil || st.OAuth.State != oauthclient.StateNone {
		t.Errorf("o's status %q %+v", st.State, st.OAuth)
	}
}

// newLoopbackServer serves h on 127.0.0.1 until the test ends.
func newLoopbackServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	return srv.URL
}

// Many requests on a logged-in server whose access token the resource no
// longer takes: the authorization server sees one refresh, and every
// request succeeds with the new token.
func TestOAuthConcurrentRefreshOnce(t *testing.T) {
	rs := newRemoteMCP(t)
	as := oauthtest.New(t, oauthtest.Options{Handler: rs, RefreshTokens: true})
	of := newOAuthFleet(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0"}`)
	s := of.f.Get("r")
	login(t, s, as)
	c := conn(t, s)
	as.ExpireAccessTokens()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.Acquire(t.Context(), "")
			if err != nil {
				errs <- err
				return
			}
			defer l.Release()
			m, err := callTool(t.Context(), c, "echo")
			if err == nil && m.Error != nil {
				err = m.Error
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := as.Count("refresh"); got != 1 {
		t.Errorf("%d refresh requests, want 1", got)
	}
	if info, _ := s.OAuth(); info.State != oauthclient.StateLoggedIn {
		t.Errorf("OAuth %+v", info)
	}
}

// A running, logged-in server refuses one call for want of scope: that
// call is answered with the needs-login error, its data naming the
// scope, and the connection goes on — another tool's call works on it.
func TestOAuthStepUpMidConnection(t *testing.T) {
	rs := newRemoteMCP(t)
	as := oauthtest.New(t, oauthtest.Options{Handler: rs, RefreshTokens: true})
	of := newOAuthFleet(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0"}`)
	s := of.f.Get("r")
	login(t, s, as)
	c := conn(t, s)
	spawns := s.Status().Spawns

	m, err := callTool(t.Context(), c, "forbidden")
	if err != nil {
		t.Fatalf("forbidden: %v, want a JSON-RPC error answer", err)
	}
	if m.Error == nil {
		t.Fatalf("forbidden answered %s", m.Result)
	}
	data := map[string]any{}
	if m.Error.Code != rpc.BackendUnavailable || json.Unmarshal(m.Error.Data, &data) != nil {
		t.Fatalf("forbidden: error %d %q data %s", m.Error.Code, m.Error.Message, m.Error.Data)
	}
	if data["needsLogin"] != true || data["scope"] != "x" || data["command"] != "mcpvisor login r" {
		t.Errorf("forbidden: data %s, want needsLogin, scope x and the command", m.Error.Data)
	}
	m, err = callTool(t.Context(), c, "other")
	if err != nil || m.Error != nil {
		t.Fatalf("other after the refusal: %v %+v", err, m)
	}
	if !c.Alive() {
		t.Error("the connection ended")
	}
	if c2 := conn(t, s); c2 != c {
		t.Error("the server has another connection")
	}
	if st := s.Status(); st.Spawns != spawns || st.State != "running" {
		t.Errorf("status %q spawns %d→%d", st.State, spawns, st.Spawns)
	}
	// The step-up is told: an event naming the scope, and the grant's
	// state (which the dashboard's Log in button shows on).
	if e := of.last("r", "needs-login"); e == nil || e.Details["scope"] != "x" {
		t.Errorf("step-up event %+v, want one with scope x", e)
	}
	if got := StepUpScope(*s.Status().OAuth); got != "x" {
		t.Errorf("StepUpScope = %q, want x", got)
	}
}

// A reload that changes a server's oauth settings rebuilds its grant:
// the new one uses the new client id.
func TestOAuthGrantRebuiltOnReload(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t), ClientID: "second"})
	of := newOAuthFleet(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0","oauth":{"clientId":"first"}}`)
	s := of.f.Get("r")
	_, _ = use(s.Acquire(t.Context(), ""))
	g1 := of.f.currentGrant("r")
	if g1 == nil {
		t.Fatal("no grant after a request")
	}
	if _, err := of.f.Reload(t.Context(), parseCfg(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0","oauth":{"clientId":"second"}}`), false, nil); err != nil {
		t.Fatal(err)
	}
	s = of.f.Get("r")
	info := login(t, s, as)
	if info.ClientID != "second" {
		t.Errorf("logged in as client %q, want the reloaded one", info.ClientID)
	}
	if g2 := of.f.currentGrant("r"); g2 == g1 {
		t.Error("the grant was not rebuilt")
	}
	for _, a := range as.Authorizations() {
		if a.Get("client_id") != "second" {
			t.Errorf("authorization asked for client %q", a.Get("client_id"))
		}
	}
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Fatal(err)
	}

	// A logout of a server that is not running forgets the tokens and
	// starts nothing.
	if _, err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Logout(t.Context()); err != nil {
		t.Errorf("Logout: %v", err)
	}
	if info, _ := s.OAuth(); info.State != oauthclient.StateNone {
		t.Errorf("OAuth after the logout: %+v, want none", info)
	}
	if n := of.count("r", "logged-out"); n != 1 {
		t.Errorf("%d logged-out events, want 1", n)
	}
}

// A server whose url changes to another server's keeps no token of the
// old one: the tokens were issued for the old resource, and the new
// server must not see them.
func TestOAuthTokensStayWithTheirResource(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t), RefreshTokens: true})
	other := newRemoteMCP(t)
	otherURL := newLoopbackServer(t, other)
	store := &memStore{m: map[string]string{}}
	of := newOAuthFleetStore(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0"}`, store)
	s := of.f.Get("r")
	login(t, s, as)
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.m["oauth/r"]; !ok {
		t.Fatal("the record is not in the secret store")
	}
	if _, err := of.f.Reload(t.Context(), parseCfg(t, `"r":{"url":"`+otherURL+`/mcp","idleTimeout":"0"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	s = of.f.Get("r")
	_, _ = use(s.Acquire(t.Context(), ""))
	if len(other.seen()) == 0 {
		t.Fatal("no request reached the new server")
	}
	for _, b := range other.seen() {
		if b != "" {
			t.Errorf("the new server got Authorization %q", b)
		}
	}

	// Back to the first server: its record is still there, and used.
	if _, err := of.f.Reload(t.Context(), parseCfg(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	s = of.f.Get("r")
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Fatalf("back on the first server: %v", err)
	}
	if info, _ := s.OAuth(); info.State != oauthclient.StateLoggedIn || as.Count("authorize") != 1 {
		t.Errorf("back on the first server: OAuth %+v after %d authorizations, want the stored login", info, as.Count("authorize"))
	}
}

// A connection made before a reload that changed the URL (still draining)
// asks its serverAuth for a token: the new URL's grant stays the
// server's, and a login begun on it completes.
func TestOAuthDrainingConnectionKeepsTheCurrentGrant(t *testing.T) {
	asA := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t)})
	asB := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t)})
	of := newOAuthFleet(t, `"r":{"url":"`+asA.URL+`","idleTimeout":"0"}`)
	s := of.f.Get("r")
	old := s.Config()
	if _, err := of.f.Reload(t.Context(), parseCfg(t, `"r":{"url":"`+asB.URL+`","idleTimeout":"0"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	s = of.f.Get("r")
	flow, err := s.Login(t.Context(), "http://127.0.0.1:9/callback")
	if err != nil {
		t.Fatal(err)
	}
	gNew := of.f.currentGrant("r")
	// The old connection's authorizer, as the draining instance holds it.
	_, _ = (&serverAuth{f: of.f, sc: old}).Token(t.Context())
	if g := of.f.currentGrant("r"); g != gNew {
		t.Errorf("the old URL's connection replaced the new URL's grant")
	}
	q, err := asB.Approve(flow.AuthURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteLogin(t.Context(), flow.ID, q); err != nil {
		t.Errorf("login begun on the new URL cannot complete: %v (unknown flow: %v)", err, errors.Is(err, oauthclient.ErrUnknownFlow))
	}
}

// A server that needed a login is reloaded to another URL, one that needs
// none: its requests are not refused with the old URL's needs-login.
func TestOAuthReloadedURLNotRefusedByTheOldGrant(t *testing.T) {
	asA := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t)})
	plain := newLoopbackServer(t, newRemoteMCP(t))
	of := newOAuthFleet(t, `"r":{"url":"`+asA.URL+`","idleTimeout":"0"}`)
	s := of.f.Get("r")
	if _, err := use(s.Acquire(t.Context(), "")); err == nil {
		t.Fatal("want needs-login first")
	}
	if _, err := of.f.Reload(t.Context(), parseCfg(t, `"r":{"url":"`+plain+`","idleTimeout":"0"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	s = of.f.Get("r")
	t.Logf("status after reload: %s oauth %+v", s.Status().State, s.Status().OAuth)
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Errorf("request to the new URL (no auth needed): %v", err)
	}
}

// A server that needed a login is given an Authorization header instead
// (a personal token): its requests go out with the header, not refused
// as needing a login.
func TestOAuthHeaderAfterNeedsLoginServes(t *testing.T) {
	asA := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t)})
	of := newOAuthFleet(t, `"r":{"url":"`+asA.URL+`","idleTimeout":"0"}`)
	s := of.f.Get("r")
	if _, err := use(s.Acquire(t.Context(), "")); err == nil {
		t.Fatal("want needs-login first")
	}
	if _, err := of.f.Reload(t.Context(), parseCfg(t, `"r":{"url":"`+asA.URL+`","idleTimeout":"0","headers":{"Authorization":"Bearer pat-123456"}}`), false, nil); err != nil {
		t.Fatal(err)
	}
	s = of.f.Get("r")
	_, lerr := s.Login(t.Context(), "http://127.0.0.1:9/callback")
	t.Logf("status after reload: %s; login: %v", s.Status().State, lerr)
	if _, err := use(s.Acquire(t.Context(), "")); err != nil && errors.Is(err, oauthclient.ErrNeedsLogin) {
		t.Errorf("request with the configured header refused as needing a login: %v", err)
	}
}

// countingStore is a memStore that counts the reads of each name.
type countingStore struct {
	memStore
	gets sync.Map // name → *atomic.Int32
}

func (s *countingStore) Get(ctx context.Context, name string) (string, error) {
	n, _ := s.gets.LoadOrStore(name, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
	return s.memStore.Get(ctx, name)
}

func (s *countingStore) count(name string) int32 {
	if n, ok := s.gets.Load(name); ok {
		return n.(*atomic.Int32).Load()
	}
	return 0
}

// A server's oauth client secret is resolved when a connection starts,
// not at each of its requests: however many calls, one read of the
// keyring per connection.
func TestOAuthSecretsResolvedOncePerConnection(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{Handler: newRemoteMCP(t), ClientID: "pre", ClientSecret: "secret-pre", AuthMethods: []string{"client_secret_basic"}})
	store := &countingStore{memStore: memStore{m: map[string]string{"r.secret": "secret-pre"}}}
	of := newOAuthFleetStore(t, `"r":{"url":"`+as.URL+`","idleTimeout":"0","oauth":{"clientId":"pre","clientSecret":"${keyring:r.secret}"}}`, store)
	s := of.f.Get("r")
	login(t, s, as)
	c := conn(t, s)
	before := store.count("r.secret")
	for range 10 {
		if m, err := callTool(t.Context(), c, "echo"); err != nil || m.Error != nil {
			t.Fatalf("echo: %v %+v", err, m)
		}
	}
	if n := store.count("r.secret") - before; n != 0 {
		t.Errorf("%d reads of the client secret for 10 calls on one connection, want 0", n)
	}
}

func TestOAuthResourceHasNoQuery(t *testing.T) {
	for in, want := range map[string]string{
		"https://mcp.example.com/mcp":                     "https://mcp.example.com/mcp",
		"https://mcp.example.com/mcp?api_key=sk-123#frag": "https://mcp.example.com/mcp",
		"https://mcp.example.com/x/mcp/?profile=p&key=k":  "https://mcp.example.com/x/mcp/",
		"http://127.0.0.1:8080":                           "http://127.0.0.1:8080",
	} {
		if got := resourceOf(in); got != want {
			t.Errorf("resourceOf(%s) = %s, want %s", in, got, want)
		}
	}
}

// A stored value that is not a record bound to this server's URL and
// client (one set by hand, say) is no record: its tokens are not sent.
func TestOAuthUnboundRecordIsNoRecord(t *testing.T) {
	store := &memStore{m: map[string]string{"oauth/r": `{"tokens":{"access":"tok-handmade"}}`}}
	r := recordStore{s: store, name: "oauth/r", bind: "b1"}
	if _, err := r.Load(t.Context()); !errors.Is(err, oauthclient.ErrNoRecord) {
		t.Errorf("Load of an unbound value: %v, want ErrNoRecord", err)
	}
	if err := r.Save(t.Context(), []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Load(t.Context()); err != nil || string(got) != `{"x":1}` {
		t.Errorf("Load of its own record: %s, %v", got, err)
	}
	other := recordStore{s: store, name: "oauth/r", bind: "b2"}
	if _, err := other.Load(t.Context()); !errors.Is(err, oauthclient.ErrNoRecord) {
		t.Errorf("Load bound to another URL: %v, want ErrNoRecord", err)
	}
}
