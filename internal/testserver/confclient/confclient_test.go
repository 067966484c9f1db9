package confclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

func readConfig(t *testing.T, path string) (raw string, server map[string]any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.MCPServers) != 1 || cfg.MCPServers["s"] == nil {
		t.Fatalf("config has servers %v, want only s", cfg.MCPServers)
	}
	return string(b), cfg.MCPServers["s"]
}

func TestWriteConfigDefaultHasNoProtocolNorOAuth(t *testing.T) {
	for _, scenario := range []string{"tools_call", "auth/metadata-default", "auth/scope-step-up"} {
		path, env, err := writeConfig(t.TempDir(), scenario, "http://localhost:1/mcp", scenarioContext{})
		if err != nil {
			t.Fatal(err)
		}
		_, s := readConfig(t, path)
		if len(s) != 1 || s["url"] != "http://localhost:1/mcp" || len(env) != 0 {
			t.Errorf("%s: server %v, env %v; want only the url", scenario, s, env)
		}
	}
}

func TestWriteConfigCIMDOnlyForBasicCIMD(t *testing.T) {
	path, _, err := writeConfig(t.TempDir(), "auth/basic-cimd", "http://localhost:1/mcp", scenarioContext{})
	if err != nil {
		t.Fatal(err)
	}
	_, s := readConfig(t, path)
	if got := s["oauth"].(map[string]any)["clientMetadataUrl"]; got != cimdURL {
		t.Errorf("clientMetadataUrl %v, want %s", got, cimdURL)
	}
	path, _, _ = writeConfig(t.TempDir(), "auth/offline-access-scope", "http://localhost:1/mcp", scenarioContext{})
	if raw, _ := readConfig(t, path); strings.Contains(raw, "clientMetadataUrl") {
		t.Errorf("offline-access-scope configured a CIMD URL:\n%s", raw)
	}
}

func TestWriteConfigSecretIsAReference(t *testing.T) {
	sc, err := parseContext(`{"name":"auth/pre-registration","client_id":"pre-registered-client","client_secret":"pre-registered-secret"}`)
	if err != nil {
		t.Fatal(err)
	}
	path, env, err := writeConfig(t.TempDir(), "auth/pre-registration", "http://localhost:1/mcp", sc)
	if err != nil {
		t.Fatal(err)
	}
	raw, s := readConfig(t, path)
	if strings.Contains(raw, "pre-registered-secret") {
		t.Errorf("the secret is in the config:\n%s", raw)
	}
	o := s["oauth"].(map[string]any)
	if o["clientId"] != "pre-registered-client" || o["clientSecret"] != "${env:"+secretEnv+"}" ||
		o["tokenEndpointAuthMethod"] != "client_secret_basic" || o["grant"] != nil {
		t.Errorf("oauth %v", o)
	}
	if len(env) != 1 || env[0] != secretEnv+"=pre-registered-secret" {
		t.Errorf("env %v", env)
	}
}

func TestWriteConfigClientCredentialsJWT(t *testing.T) {
	pem := "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n"
	sc := scenarioContext{ClientID: "conformance-test-client", PrivateKeyPEM: pem, SigningAlgorithm: "ES256"}
	dir := t.TempDir()
	path, _, err := writeConfig(dir, "auth/client-credentials-jwt", "http://localhost:1/mcp", sc)
	if err != nil {
		t.Fatal(err)
	}
	raw, s := readConfig(t, path)
	if strings.Contains(raw, "MIGH") {
		t.Errorf("the key is in the config:\n%s", raw)
	}
	o := s["oauth"].(map[string]any)
	ref, _ := o["privateKey"].(string)
	file, ok := strings.CutPrefix(ref, "${file:")
	file = strings.TrimSuffix(file, "}")
	if !ok || o["grant"] != "client_credentials" || o["tokenEndpointAuthMethod"] != "private_key_jwt" || o["signingAlgorithm"] != "ES256" {
		t.Fatalf("oauth %v", o)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v %v", file, fi, err)
	}
	if b, _ := os.ReadFile(file); string(b) != pem {
		t.Errorf("key file holds %q", b)
	}
}

func TestParseContextRejectsNonJSON(t *testing.T) {
	if _, err := parseContext("{"); err == nil || !strings.Contains(err.Error(), contextEnv) {
		t.Errorf("err %v", err)
	}
}

func TestErrorNeedsLogin(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&jsonrpc.Error{Code: -32000, Message: "x", Data: json.RawMessage(`{"needsLogin":true,"server":"s"}`)}, true},
		{fmt.Errorf("calling: %w", &jsonrpc.Error{Code: -32000, Data: json.RawMessage(`{"needsLogin":true}`)}), true},
		{fmt.Errorf("tools/list: %w", &rpcError{Code: -32000, Data: json.RawMessage(`{"needsLogin":true}`)}), true},
		{&jsonrpc.Error{Code: -32000, Data: json.RawMessage(`{"needsLogin":false}`)}, false},
		{&jsonrpc.Error{Code: -32000}, false},
		{errors.New(`{"needsLogin":true}`), false},
	} {
		if got := ErrorNeedsLogin(tc.err); got != tc.want {
			t.Errorf("ErrorNeedsLogin(%v) = %v", tc.err, got)
		}
	}
}

// adminAPI answers GET /api/servers/s with state.
func adminAPI(t *testing.T, state *atomic.Value) *served {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/servers/s" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"name":"s","state":%q}`, state.Load())
	}))
	t.Cleanup(srv.Close)
	return &served{addr: strings.TrimPrefix(srv.URL, "http://")}
}

func TestDoLogsInWhenTheErrorOrTheStateSaysSo(t *testing.T) {
	var state atomic.Value
	state.Store("running")
	logins := 0
	h := &harness{scenario: "auth/scope-step-up", log: io.Discard, serve: adminAPI(t, &state),
		runLogin: func(context.Context) error { logins++; state.Store("running"); return nil }}
	needs := &jsonrpc.Error{Code: -32000, Data: json.RawMessage(`{"needsLogin":true}`)}
	// The call fails: first with the error's data, then by the state.
	calls := 0
	err := h.do(t.Context(), "tools/call", func() error {
		calls++
		switch calls {
		case 1:
			return needs
		case 2:
			state.Store(NeedsLogin)
			return errors.New("HTTP 503")
		}
		return nil
	})
	if err != nil || calls != 3 || logins != 2 {
		t.Fatalf("err %v after %d calls and %d logins, want nil, 3, 2", err, calls, logins)
	}
	// Another error is no reason to log in.
	err = h.do(t.Context(), "tools/call", func() error { return errors.New("boom") })
	if err == nil || logins != 2 {
		t.Fatalf("err %v, %d logins", err, logins)
	}
}

func TestDoLogsInAtMostMaxLogins(t *testing.T) {
	var state atomic.Value
	state.Store(NeedsLogin)
	logins, calls := 0, 0
	h := &harness{scenario: "auth/scope-retry-limit", log: io.Discard, serve: adminAPI(t, &state),
		runLogin: func(context.Context) error { logins++; return nil }}
	err := h.do(t.Context(), "tools/call", func() error {
		calls++
		return &jsonrpc.Error{Code: -32000, Data: json.RawMessage(`{"needsLogin":true}`)}
	})
	if err == nil || logins != maxLogins || calls != maxLogins+1 {
		t.Fatalf("err %v after %d logins and %d calls, want an error after %d logins", err, logins, calls, maxLogins)
	}
	if !strings.Contains(err.Error(), "still needs a login") {
		t.Errorf("err %v", err)
	}
}

func TestDoNeverLogsInForClientCredentials(t *testing.T) {
	var state atomic.Value
	state.Store(NeedsLogin)
	logins := 0
	h := &harness{scenario: "auth/client-credentials-basic", log: io.Discard, serve: adminAPI(t, &state),
		runLogin: func(context.Context) error { logins++; return nil }}
	err := h.do(t.Context(), "connect", func() error { return errors.New("refused") })
	if err == nil || logins != 0 || !strings.Contains(err.Error(), "client credentials") {
		t.Fatalf("err %v, %d logins", err, logins)
	}
}

// TestBrowseFollowsTheApprovalToTheCallback: the authorization server
// approves with a 302 to the login's loopback redirect_uri, which gets
// the code; what Browse prints holds neither code nor state.
func TestBrowseFollowsTheApprovalToTheCallback(t *testing.T) {
	got := make(chan string, 1)
	callback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Query().Get("code")
		io.WriteString(w, "logged in")
	}))
	defer callback.Close()
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("redirect_uri")+"?code=test-auth-code&state=st4te", http.StatusFound)
	}))
	defer as.Close()
	var out bytes.Buffer
	if code := Browse([]string{as.URL + "/authorize?redirect_uri=" + callback.URL + "/callback"}, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if c := <-got; c != "test-auth-code" {
		t.Errorf("callback got code %q", c)
	}
	if s := out.String(); !strings.Contains(s, callback.URL+"/callback answered 200") || strings.Contains(s, "test-auth-code") || strings.Contains(s, "st4te") {
		t.Errorf("printed %q", s)
	}
	if code := Browse([]string{"http://127.0.0.1:1/authorize"}, io.Discard); code == 0 {
		t.Error("a browse that reached nothing exited 0")
	}
}

func TestRawSessionReadsJSONAndEventStreams(t *testing.T) {
	var sawSession, sawParam atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&m)
		if r.Header.Get("Mcp-Session-Id") == "sid-1" {
			sawSession.Store(true)
		}
		for k := range r.Header {
			if strings.HasPrefix(k, "Mcp-Param-") {
				sawParam.Store(true)
			}
		}
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "sid-1")
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25"}}`, m.ID)
		case "notifications/initialized":
			w.WriteHeader(http.StatusAccepted)
		case "tools/list":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"tools\":[{\"name\":\"bad\"},{\"name\":\"good\"}]}}\n\n", m.ID)
		case "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32000,\"message\":\"no\",\"data\":{\"needsLogin\":true}}}\n\n", m.ID)
		}
	}))
	defer srv.Close()
	s := &rawSession{url: srv.URL}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.open(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.call(ctx, "tools/list", map[string]any{})
	if err != nil || !strings.Contains(string(res), `"bad"`) || !strings.Contains(string(res), `"good"`) {
		t.Fatalf("tools/list: %s %v", res, err)
	}
	_, err = s.call(ctx, "tools/call", map[string]any{"name": "good", "arguments": map[string]any{"region": "us-west1"}})
	if !ErrorNeedsLogin(err) {
		t.Errorf("tools/call: %v, want the needs-login error", err)
	}
	if !sawSession.Load() || sawParam.Load() {
		t.Errorf("session id sent: %v; an Mcp-Param header sent: %v", sawSession.Load(), sawParam.Load())
	}
}

// fakeServe writes a script that stands for mcpvisor.
func fakeServe(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mcpvisor")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStartServeReportsAnEarlyExitWithItsLog(t *testing.T) {
	bin := fakeServe(t, `echo "config: unknown thing" >&2; exit 3`)
	_, err := startServe(t.Context(), bin, "c.json", t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "config: unknown thing") {
		t.Fatalf("err %v", err)
	}
}

func TestStartServeIsBounded(t *testing.T) {
	defer func(d time.Duration) { serveStartTimeout = d }(serveStartTimeout)
	serveStartTimeout = 300 * time.Millisecond
	bin := fakeServe(t, `exec sleep 30`)
	start := time.Now()
	_, err := startServe(t.Context(), bin, "c.json", t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "did not listen") {
		t.Fatalf("err %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}

func TestServeStopsOnSIGTERMAndIsKilledPastTheBound(t *testing.T) {
	defer func(d time.Duration) { serveStopTimeout = d }(serveStopTimeout)
	serveStopTimeout = 300 * time.Millisecond
	listening := `echo "mcpvisor: serving 1 servers at http://127.0.0.1:4321/mcp" >&2`
	// One that ends on SIGTERM.
	s, err := startServe(t.Context(), fakeServe(t, `trap 'exit 0' TERM; `+listening+`; while :; do sleep 0.05; done`), "c.json", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.addr != "127.0.0.1:4321" || s.endpoint() != "http://127.0.0.1:4321/servers/s/mcp" {
		t.Errorf("addr %q", s.addr)
	}
	if err := s.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	// One that ignores it.
	s, err = startServe(t.Context(), fakeServe(t, `trap '' TERM; `+listening+`; exec sleep 30`), "c.json", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.stop(); err == nil || !strings.Contains(err.Error(), "did not exit") {
		t.Errorf("stop: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stop took %v", took)
	}
}

func TestServeEnvDropsTheSessionBus(t *testing.T) {
	env := serveEnv([]string{"A=1", "DBUS_SESSION_BUS_ADDRESS=unix:path=/x", "B=2"})
	if strings.Join(env, " ") != "A=1 B=2" {
		t.Errorf("env %v", env)
	}
}

func TestTailKeepsTheLastLines(t *testing.T) {
	tl := &tail{max: 2}
	for _, l := range []string{"a", "b", "c"} {
		tl.add(l)
	}
	if tl.String() != "b\nc" {
		t.Errorf("%q", tl.String())
	}
}

// TestLoginIsTheHarnessAsBrowser runs login with a stand-in for mcpvisor
// that opens $BROWSER on the authorization URL, as `mcpvisor login`
// does: the harness binary, as that browser, delivers the code to the
// callback.
func TestLoginIsTheHarnessAsBrowser(t *testing.T) {
	self := testserver.BuildPackage(t, "github.com/mcpvisor/mcpvisor/internal/testserver/cmd/conformance-client", "conformance-client")
	got := make(chan string, 1)
	callback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Query().Get("code")
	}))
	defer callback.Close()
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, callback.URL+"/callback?code=test-auth-code", http.StatusFound)
	}))
	defer as.Close()
	t.Setenv("TEST_AUTH_URL", as.URL+"/authorize")
	bin := fakeServe(t, `[ "$1 $2 $3 $4" = "login s --addr 127.0.0.1:9" ] || { echo "argv: $*"; exit 9; }
$BROWSER "$TEST_AUTH_URL" || exit 8`)
	if err := login(t.Context(), bin, self, "127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-got:
		if c != "test-auth-code" {
			t.Errorf("code %q", c)
		}
	default:
		t.Fatal("the callback got nothing")
	}
	bin = fakeServe(t, `echo "login refused: iss mismatch"; exit 3`)
	if err := login(t.Context(), bin, self, "127.0.0.1:9"); err == nil || !strings.Contains(err.Error(), "iss mismatch") {
		t.Errorf("err %v", err)
	}
}
