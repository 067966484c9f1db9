package login

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// fakeServe implements serve's login routes: begin answers an
// authorization URL carrying state and the CLI's redirect URI; complete
// records the query it is given.
type fakeServe struct {
	t     *testing.T
	srv   *httptest.Server
	token string
	state string

	beginStatus    int // non-zero: begin answers this with beginError
	beginError     string
	completeStatus int
	completeError  string
	logout         string // the logout's answer (JSON)
	// onBegin, if set, is called with the redirect URI (a browser that
	// follows the authorization server's redirect on its own).
	onBegin func(redirect string)
	// completeDelay holds the completion's answer (a slow code exchange).
	completeDelay time.Duration

	mu         sync.Mutex
	redirect   string
	completes  []string // the queries posted
	cancels    []string // the flows cancelled
	unauthReqs int
}

func newFakeServe(t *testing.T) *fakeServe {
	f := &fakeServe{t: t, token: "api-token", state: "the-state"}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServe) api(t *testing.T) adminclient.Client {
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return adminclient.Client{Addr: strings.TrimPrefix(f.srv.URL, "http://"), TokenFile: p}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeServe) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		f.mu.Lock()
		f.unauthReqs++
		f.mu.Unlock()
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "no token"})
		return
	}
	body, _ := io.ReadAll(r.Body)
	p := r.URL.Path
	switch {
	case r.Method == "POST" && p == "/api/servers/remote/login":
		if f.beginStatus != 0 {
			writeJSON(w, f.beginStatus, map[string]string{"error": f.beginError})
			return
		}
		var req admin.LoginRequest
		if err := json.Unmarshal(body, &req); err != nil || req.RedirectURI == "" {
			writeJSON(w, 400, map[string]string{"error": "bad begin body"})
			return
		}
		f.mu.Lock()
		f.redirect = req.RedirectURI
		f.mu.Unlock()
		au := "https://as.example/authorize?" + url.Values{"state": {f.state}, "redirect_uri": {req.RedirectURI}, "client_id": {"c"}}.Encode()
		writeJSON(w, 200, admin.LoginStarted{Server: "remote", Flow: "flow1", AuthorizationURL: au, Expires: time.Now().Add(10 * time.Minute)})
		if f.onBegin != nil {
			go f.onBegin(req.RedirectURI)
		}
	case r.Method == "POST" && p == "/api/servers/remote/login/flow1":
		var cb admin.LoginCallback
		_ = json.Unmarshal(body, &cb)
		f.mu.Lock()
		f.completes = append(f.completes, cb.Query)
		f.mu.Unlock()
		time.Sleep(f.completeDelay)
		if f.completeStatus != 0 {
			writeJSON(w, f.completeStatus, map[string]string{"error": f.completeError})
			return
		}
		writeJSON(w, 200, admin.LoginDone{Server: "remote", Auth: oauthclient.Info{State: "logged-in", Issuer: "https://as.example", Subject: "alice",
			Expiry: time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC), Refreshable: true, Scopes: []string{"read", "write"}}})
	case r.Method == "POST" && strings.HasSuffix(p, "/cancel"):
		f.mu.Lock()
		f.cancels = append(f.cancels, strings.TrimSuffix(strings.TrimPrefix(p, "/api/servers/remote/login/"), "/cancel"))
		f.mu.Unlock()
		writeJSON(w, 200, map[string]string{"cancelled": "flow1"})
	case r.Method == "POST" && p == "/api/servers/remote/logout":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, f.logout)
	case r.Method == "POST" && p == "/api/servers/local/logout":
		writeJSON(w, http.StatusConflict, map[string]string{"error": "the server has no login: server local is not a remote server"})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeServe) redirectURI() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.redirect
}

func (f *fakeServe) seen() (completes, cancels []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.completes...), append([]string(nil), f.cancels...)
}

// syncBuffer is a writer the listener's handler and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// visit is the browser following the authorization server's redirect to
// the CLI's listener: GET redirect?query, the page's status and text.
func visit(t *testing.T, redirect string, q url.Values) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(redirect + "?" + q.Encode())
	if err != nil {
		t.Errorf("the redirect to %s: %v", redirect, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func newOptions(t *testing.T, f *fakeServe) (*Options, *syncBuffer, *syncBuffer) {
	out, errOut := &syncBuffer{}, &syncBuffer{}
	return &Options{IO: cmdutil.IOStreams{Out: out, ErrOut: errOut}, Server: "remote", API: f.api(t), Timeout: 20 * time.Second}, out, errOut
}

// The whole login: begin, the browser opened on the authorization URL,
// its redirect to the listener, completion at serve; who and until when
// is printed.
func TestLoginSucceeds(t *testing.T) {
	f := newFakeServe(t)
	o, out, errOut := newOptions(t, f)
	var opened []string
	page := make(chan string, 1)
	o.Open = func(u string) error {
		opened = append(opened, u)
		p, err := url.Parse(u)
		if err != nil {
			return err
		}
		go func() {
			_, text := visit(t, p.Query().Get("redirect_uri"), url.Values{"code": {"c0de"}, "state": {p.Query().Get("state")}, "iss": {"https://as.example"}})
			page <- text
		}()
		return nil
	}
	if err := RunLogin(context.Background(), o); err != nil {
		t.Fatalf("login: %v\nstderr: %s", err, errOut)
	}
	if len(opened) != 1 || !strings.HasPrefix(opened[0], "https://as.example/authorize?") {
		t.Fatalf("opened %v", opened)
	}
	redirect, _ := url.Parse(f.redirectURI())
	if redirect.Scheme != "http" || redirect.Hostname() != "127.0.0.1" || redirect.Path != "/callback" {
		t.Fatalf("the redirect URI given to serve: %s", redirect)
	}
	completes, cancels := f.seen()
	if len(completes) != 1 {
		t.Fatalf("completes %v", completes)
	}
	q, _ := url.ParseQuery(completes[0])
	if q.Get("code") != "c0de" || q.Get("state") != "the-state" || q.Get("iss") != "https://as.example" {
		t.Fatalf("the query posted to serve: %s", completes[0])
	}
	if len(cancels) != 0 {
		t.Errorf("a successful login cancelled its flow: %v", cancels)
	}
	want := "Logged in to remote as alice (https://as.example); the access token is valid until " + time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC).Local().Format("2006-01-02 15:04 MST") + ", and serve refreshes it before then\nscopes: read write\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	if !strings.Contains(errOut.String(), "Opened the browser") || !strings.Contains(errOut.String(), opened[0]) {
		t.Errorf("stderr: %s", errOut)
	}
	if p := <-page; !strings.Contains(p, "Logged in to remote") {
		t.Errorf("the browser's page: %s", p)
	}
	// The listener is closed once the login is done.
	if _, err := http.Get(redirect.String()); err == nil {
		t.Error("the redirect listener still answers after the login")
	}
}

// --json prints serve's answer.
func TestLoginJSON(t *testing.T) {
	f := newFakeServe(t)
	o, out, _ := newOptions(t, f)
	o.JSON, o.NoBrowser = true, true
	f.onBegin = func(redirect string) { visit(t, redirect, url.Values{"code": {"x"}, "state": {f.state}}) }
	if err := RunLogin(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	var d admin.LoginDone
	if err := json.Unmarshal([]byte(out.String()), &d); err != nil || d.Server != "remote" || d.Auth.Subject != "alice" {
		t.Fatalf("--json printed %s (%v)", out, err)
	}
}

func TestLoginBeginError(t *testing.T) {
	f := newFakeServe(t)
	f.beginStatus, f.beginError = http.StatusConflict, "the server has no login: server remote sends the Authorization header of its config"
	o, _, _ := newOptions(t, f)
	o.Open = func(string) error { t.Error("a browser was opened for a login serve refused"); return nil }
	err := RunLogin(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "login remote: the server has no login: server remote sends the Authorization header") {
		t.Fatalf("err %v", err)
	}
	// Without the token: serve's refusal, said.
	o.API.TokenFile = ""
	t.Setenv("MCPVISOR_TOKEN", "")
	f.beginStatus = 0
	if err := RunLogin(context.Background(), o); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Fatalf("without the token: %v", err)
	}
}

// A redirect whose state is not this login's is answered with an error
// page and ignored; the real one then completes.
func TestLoginIgnoresAnotherState(t *testing.T) {
	f := newFakeServe(t)
	o, out, errOut := newOptions(t, f)
	o.NoBrowser = true
	stray := make(chan int, 1)
	f.onBegin = func(redirect string) {
		code, _ := visit(t, redirect, url.Values{"code": {"stray"}, "state": {"another-state"}})
		stray <- code
		// A request to another path of the listener is no redirect.
		if resp, err := http.Get(strings.TrimSuffix(redirect, "/callback") + "/other?state=" + f.state); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /other: %d", resp.StatusCode)
			}
		}
		visit(t, redirect, url.Values{"code": {"real"}, "state": {f.state}})
	}
	if err := RunLogin(context.Background(), o); err != nil {
		t.Fatalf("login: %v\nstderr: %s", err, errOut)
	}
	if code := <-stray; code != http.StatusBadRequest {
		t.Errorf("the stray redirect's page: %d", code)
	}
	if !strings.Contains(errOut.String(), "Ignored a redirect that is not this login's") {
		t.Errorf("stderr does not say the stray redirect was ignored: %s", errOut)
	}
	completes, _ := f.seen()
	if len(completes) != 1 || !strings.Contains(completes[0], "code=real") {
		t.Fatalf("completes posted: %v (only the real one belongs)", completes)
	}
	if !strings.HasPrefix(out.String(), "Logged in to remote") {
		t.Errorf("stdout %q", out)
	}
}

// No redirect within --timeout: an error naming the timeout, and serve
// is told to drop the flow.
func TestLoginTimeout(t *testing.T) {
	f := newFakeServe(t)
	o, _, errOut := newOptions(t, f)
	o.Timeout = 300 * time.Millisecond
	o.Open = func(string) error { return nil }
	err := RunLogin(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "no redirect came within 300ms") || !strings.Contains(err.Error(), "--timeout") {
		t.Fatalf("err %v", err)
	}
	if _, cancels := f.seen(); len(cancels) != 1 || cancels[0] != "flow1" {
		t.Fatalf("cancels %v, want flow1 cancelled", cancels)
	}
	if !strings.Contains(errOut.String(), "up to 300ms") {
		t.Errorf("stderr does not say how long it waits: %s", errOut)
	}
}

// The redirect came in time, but serve's exchange outlasts --timeout:
// the login waits for serve's answer — it succeeded — instead of saying
// it was abandoned and cancelling a flow serve completed.
func TestLoginTimeoutDuringCompletion(t *testing.T) {
	f := newFakeServe(t)
	f.completeDelay = 600 * time.Millisecond
	o, out, _ := newOptions(t, f)
	o.Timeout = 300 * time.Millisecond
	o.Open = func(u string) error {
		p, _ := url.Parse(u)
		go visit(t, p.Query().Get("redirect_uri"), url.Values{"code": {"c0de"}, "state": {p.Query().Get("state")}})
		return nil
	}
	if err := RunLogin(context.Background(), o); err != nil {
		t.Fatalf("login: %v", err)
	}
	if !strings.Contains(out.String(), "Logged in to remote") {
		t.Errorf("printed %q", out)
	}
	if _, cancels := f.seen(); len(cancels) != 0 {
		t.Errorf("cancelled %v after serve completed the login", cancels)
	}
}

// Interrupted: an error, and serve is told to drop the flow.
func TestLoginInterrupted(t *testing.T) {
	f := newFakeServe(t)
	o, _, _ := newOptions(t, f)
	ctx, cancel := context.WithCancelCause(context.Background())
	interrupt := errors.New("interrupted")
	o.Open = func(string) error { cancel(interrupt); return nil }
	err := RunLogin(ctx, o)
	if err == nil || !errors.Is(err, interrupt) || !strings.Contains(err.Error(), "login remote abandoned") {
		t.Fatalf("err %v", err)
	}
	if _, cancels := f.seen(); len(cancels) != 1 {
		t.Fatalf("cancels %v, want the flow cancelled", cancels)
	}
}

// Serve fails the completion (the code exchange): the error, the
// browser's page says so, and the flow is dropped.
func TestLoginCompleteFails(t *testing.T) {
	f := newFakeServe(t)
	f.completeStatus, f.completeError = http.StatusBadGateway, "the token endpoint answered invalid_grant"
	o, out, _ := newOptions(t, f)
	o.NoBrowser = true
	page := make(chan string, 1)
	f.onBegin = func(redirect string) {
		_, p := visit(t, redirect, url.Values{"code": {"x"}, "state": {f.state}})
		page <- p
	}
	err := RunLogin(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("err %v", err)
	}
	if p := <-page; !strings.Contains(p, "Login to remote failed") || !strings.Contains(p, "invalid_grant") {
		t.Errorf("the browser's page: %s", p)
	}
	if out.String() != "" {
		t.Errorf("stdout %q", out)
	}
}

func TestLoginNoBrowser(t *testing.T) {
	f := newFakeServe(t)
	o, _, errOut := newOptions(t, f)
	o.NoBrowser = true
	o.Open = func(string) error { t.Error("--no-browser opened a browser"); return nil }
	f.onBegin = func(redirect string) { visit(t, redirect, url.Values{"code": {"x"}, "state": {f.state}}) }
	if err := RunLogin(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if s := errOut.String(); !strings.Contains(s, "To log in to remote, open this URL") || !strings.Contains(s, "https://as.example/authorize?") {
		t.Errorf("stderr does not give the URL: %s", s)
	}
}

func TestLoginOpenFails(t *testing.T) {
	f := newFakeServe(t)
	o, _, errOut := newOptions(t, f)
	o.Open = func(string) error { return errors.New("no display") }
	f.onBegin = func(redirect string) { visit(t, redirect, url.Values{"code": {"x"}, "state": {f.state}}) }
	if err := RunLogin(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	s := errOut.String()
	if !strings.Contains(s, "Could not open a browser (no display)") || !strings.Contains(s, "open this URL") || !strings.Contains(s, "https://as.example/authorize?") {
		t.Errorf("stderr: %s", s)
	}
}

func TestLoginBadTimeout(t *testing.T) {
	f := newFakeServe(t)
	o, _, _ := newOptions(t, f)
	o.Timeout = 0
	var ue shutdown.UsageError
	if err := RunLogin(context.Background(), o); !errors.As(err, &ue) {
		t.Fatalf("err %v, want a usage error", err)
	}
	if completes, _ := f.seen(); len(completes) != 0 || f.redirectURI() != "" {
		t.Fatal("a login with a bad --timeout reached serve")
	}
}

// The command's flags reach Options.
func TestNewCmdLogin(t *testing.T) {
	var got *Options
	cmd := NewCmdLogin(cmdutil.IOStreams{}, func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"remote", "--no-browser", "--timeout", "42s", "--json"})
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Server != "remote" || !got.NoBrowser || got.Timeout != 42*time.Second || !got.JSON {
		t.Fatalf("options %+v", got)
	}
}

// waitFile waits, within 10 s, for path to hold a whole line.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && bytes.HasSuffix(b, []byte("\n")) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written within 10 s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOpenBrowserUsesBROWSER(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("a shell script as $BROWSER")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "args")
	script := filepath.Join(dir, "browser")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s|' \"$a\"; done > "+out+".tmp\necho >> "+out+".tmp\nmv "+out+".tmp "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := "https://as.example/authorize?state=a&redirect_uri=http%3A%2F%2F127.0.0.1%3A1%2Fcallback&x=1;y"
	t.Setenv("BROWSER", script+" --new-window")
	if err := OpenBrowser(u); err != nil {
		t.Fatal(err)
	}
	if got := waitFile(t, out); got != "--new-window|"+u+"|\n" {
		t.Fatalf("the browser was given %q, want the flag then the URL as one last argument", got)
	}
	// "%s" stands for the URL; a list is tried in turn.
	os.Remove(out)
	t.Setenv("BROWSER", filepath.Join(dir, "no-such-browser")+":"+script+" --url=%s --x")
	if err := OpenBrowser(u); err != nil {
		t.Fatal(err)
	}
	if got := waitFile(t, out); got != "--url="+u+"|--x|\n" {
		t.Fatalf("the browser was given %q, want the URL in place of %%s", got)
	}
	t.Setenv("BROWSER", filepath.Join(dir, "no-such-browser"))
	if err := OpenBrowser(u); err == nil || !strings.Contains(err.Error(), "$BROWSER") {
		t.Fatalf("a $BROWSER that does not exist: %v", err)
	}
}

func TestOpenBrowserNoDisplay(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the display check is for Linux")
	}
	t.Setenv("BROWSER", "")
	t.Setenv("DISPLAY", "")
	t.Setenv("WAYLAND_DISPLAY", "")
	err := OpenBrowser("https://as.example/authorize")
	if err == nil || !strings.Contains(err.Error(), "DISPLAY") {
		t.Fatalf("err %v, want one that names the display", err)
	}
}

func TestLogout(t *testing.T) {
	for _, c := range []struct{ answer, want string }{
		{`{"server":"remote","revoked":true}`, "Logged out of remote: the tokens were revoked and forgotten.\n"},
		{`{"server":"remote","revoked":false,"revokeError":"revocation endpoint answered 503"}`, "Logged out of remote: the tokens were forgotten, but not revoked (revocation endpoint answered 503).\n"},
		{`{"server":"remote","revoked":false}`, "Logged out of remote: the tokens were forgotten (its authorization server offers no revocation).\n"},
	} {
		f := newFakeServe(t)
		f.logout = c.answer
		out := &syncBuffer{}
		if err := RunLogout(context.Background(), &LogoutOptions{IO: cmdutil.IOStreams{Out: out, ErrOut: io.Discard}, Server: "remote", API: f.api(t)}); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want {
			t.Errorf("answer %s: printed %q, want %q", c.answer, out, c.want)
		}
		out = &syncBuffer{}
		if err := RunLogout(context.Background(), &LogoutOptions{IO: cmdutil.IOStreams{Out: out}, Server: "remote", API: f.api(t), JSON: true}); err != nil {
			t.Fatal(err)
		}
		var d admin.LogoutDone
		if err := json.Unmarshal([]byte(out.String()), &d); err != nil || d.Server != "remote" {
			t.Errorf("--json printed %s", out)
		}
	}
	f := newFakeServe(t)
	err := RunLogout(context.Background(), &LogoutOptions{IO: cmdutil.IOStreams{Out: io.Discard}, Server: "local", API: f.api(t)})
	if err == nil || !strings.Contains(err.Error(), "logout local: the server has no login") {
		t.Fatalf("logout of a stdio server: %v", err)
	}
}

func TestSummary(t *testing.T) {
	until := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	local := until.Local().Format("2006-01-02 15:04 MST")
	for _, c := range []struct {
		auth oauthclient.Info
		want string
	}{
		{oauthclient.Info{}, "Logged in to remote"},
		{oauthclient.Info{Issuer: "https://as.example", Expiry: until}, "Logged in to remote (https://as.example); the access token is valid until " + local + "; no refresh token was issued: log in again then"},
		{oauthclient.Info{Subject: "bob", Expiry: until, Refreshable: true}, "Logged in to remote as bob; the access token is valid until " + local + ", and serve refreshes it before then"},
	} {
		if got := Summary(admin.LoginDone{Server: "remote", Auth: c.auth}); got != c.want {
			t.Errorf("Summary(%+v) = %q, want %q", c.auth, got, c.want)
		}
	}
}

// Two logins of a server listen on the same port (its redirect URI is the
// same, and its registration reused); when that port is taken, on another.
func TestLoginListensOnItsPreferredPort(t *testing.T) {
	ln, err := listenLoopback("linear")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("127.0.0.1:%d", preferredPort("linear"))
	if ln.Addr().String() != want {
		// Only if something else holds the preferred port.
		if busy, err := net.Listen("tcp", want); err == nil {
			busy.Close()
			ln.Close()
			t.Fatalf("listening on %s, though %s is free", ln.Addr(), want)
		}
		t.Logf("%s is taken by another program: the test of the fallback alone", want)
	}
	// Taken (by the first): another port, still loopback.
	other, err := listenLoopback("linear")
	if err != nil {
		t.Fatal(err)
	}
	if other.Addr().String() == want || !strings.HasPrefix(other.Addr().String(), "127.0.0.1:") {
		t.Errorf("second listener on %s", other.Addr())
	}
	other.Close()
	ln.Close()
	if preferredPort("linear") == preferredPort("notion") {
		t.Error("two servers prefer one port")
	}
}
