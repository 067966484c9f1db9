package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/cli/login"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/internal/testserver/hydra"
)

// cookieBrowser opens a URL as a browser does: redirects followed, with
// cookies (Hydra's login and consent need them), up to the login's
// loopback listener.
func cookieBrowser(t *testing.T, done chan<- error) func(string) error {
	return func(u string) error {
		jar, err := cookiejar.New(nil)
		if err != nil {
			return err
		}
		go func() {
			c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
			resp, err := c.Get(u)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("the browser ended at %s with %d", resp.Request.URL.Path, resp.StatusCode)
				}
			}
			done <- err
		}()
		return nil
	}
}

// mcpvisor login --gateway against a real issuer (Hydra): the CLI logs
// itself in (authorization code with PKCE, the loopback redirect), keeps
// the tokens in the state directory's secret file, and `mcpvisor ps` —
// another process, given no token — then reaches serve's admin API with
// the stored token, refreshed once it expired. Before the login, ps is
// refused; a token file works for automation; logout --gateway forgets
// the login.
func TestTeamAdminLoginGateway(t *testing.T) {
	h := hydra.Start(t, hydra.Options{DefaultSubject: "alice"})
	port := freeLoopbackPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pub := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := h.CreateClient(ctx, hydra.ClientSpec{GrantTypes: []string{"authorization_code", "refresh_token"},
		Scopes: []string{"mcpvisor:admin", "offline_access"}, AuthMethod: hydra.AuthNone,
		RedirectURIs: []string{pub + "/ui/callback", hydra.DefaultRedirectURI}, Audiences: []string{pub}})
	if err != nil {
		t.Fatal(err)
	}
	// Hydra makes its access-token key at its first token: before serve
	// fetches the issuer's keys, so that its first request finds the key.
	if _, err := h.AuthorizationCode(ctx, cl, "warm-up", []string{pub}, []string{"mcpvisor:admin"}); err != nil {
		t.Fatal(err)
	}
	// Short-lived access tokens: the second ps must refresh.
	const life = 3 * time.Second
	if err := h.SetLifespan(ctx, cl, life); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cfg := fmt.Sprintf(`{"auth": {"issuer": %q, "publicUrl": %q, "dashboardClientId": %q}, "mcpServers": {"demo": {"command": %q}}}`,
		h.Issuer(), pub, cl.ID, testserver.Build(t))
	s := startServeEnv(t, cfg, filepath.Join(state, "serve"), noKeyring, "--listen", addr)
	stopAtCleanup(t, s)

	cliState := filepath.Join(state, "cli")
	env := []string{"XDG_STATE_HOME=" + cliState, "MCPVISOR_TOKEN=", "MCPVISOR_TOKEN_FILE="}
	if r := runCLI(t, env, 20*time.Second, "ps", "--addr", addr); r.code == 0 || !strings.Contains(r.stderr, "401") && !strings.Contains(r.stderr, "nauthorized") {
		t.Fatalf("ps before any login: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// The login, in this process, with the same state directory as the
	// CLI processes below (no keyring: the file).
	for _, kv := range append(noKeyring, env...) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	cmdutil.ResetGatewayTokens()
	t.Cleanup(cmdutil.ResetGatewayTokens)
	browsed := make(chan error, 1)
	var out, errOut bytes.Buffer
	start := time.Now()
	o := &login.Options{IO: cmdutil.IOStreams{Out: &out, ErrOut: &errOut}, API: adminclient.Client{Addr: addr},
		Gateway: true, ClientID: cl.ID, Timeout: 30 * time.Second, Open: cookieBrowser(t, browsed)}
	if err := login.RunGatewayLogin(ctx, o); err != nil {
		t.Fatalf("login --gateway: %v\n%s", err, errOut.String())
	}
	t.Logf("login --gateway took %v", time.Since(start).Round(time.Millisecond))
	if err := <-browsed; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Logged in to the gateway at " + addr, "as alice", "refreshes it when due", "secrets.json"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("login --gateway does not say %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String()+errOut.String(), "eyJ") {
		t.Error("login --gateway printed a token")
	}
	store := secret.OpenFile(filepath.Join(cliState, "mcpvisor"))
	name := cmdutil.GatewaySecretName(addr)
	first, err := store.Get(ctx, name)
	if err != nil {
		t.Fatalf("the gateway login is not in the CLI's secret store: %v", err)
	}

	r := runCLI(t, env, 20*time.Second, "ps", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "demo") {
		t.Logf("serve: %s", s.stderrText())
		t.Fatalf("ps after login --gateway: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Once the access token expired, the next command refreshes it (a
	// new record in the store) and is let in.
	time.Sleep(time.Until(start.Add(life + time.Second)))
	r = runCLI(t, env, 20*time.Second, "ps", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "demo") {
		t.Fatalf("ps after the access token expired: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if second, err := store.Get(ctx, name); err != nil || second == first {
		t.Errorf("the expired token was not refreshed in the store (err %v)", err)
	}

	// Automation: a token file, from $MCPVISOR_TOKEN_FILE, is sent
	// instead of the login's; a valid admin token lets ps in, another is
	// refused.
	tok, err := h.AuthorizationCode(ctx, cl, "robot", []string{pub}, []string{"mcpvisor:admin"})
	if err != nil {
		t.Fatal(err)
	}
	good, bad := filepath.Join(state, "token"), filepath.Join(state, "bad-token")
	if err := os.WriteFile(good, []byte(tok.AccessToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not-a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, append(env, "MCPVISOR_TOKEN_FILE="+good), 20*time.Second, "ps", "--addr", addr); r.code != 0 || !strings.Contains(r.stdout, "demo") {
		t.Errorf("ps with an admin token file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, append(env, "MCPVISOR_TOKEN_FILE="+bad), 20*time.Second, "ps", "--addr", addr); r.code == 0 {
		t.Errorf("ps with a token file holding no valid token succeeded:\n%s", r.stdout)
	}

	if r := runCLI(t, env, 20*time.Second, "logout", "--gateway", "--addr", addr); r.code != 0 || !strings.Contains(r.stdout, "Logged out of the gateway") {
		t.Fatalf("logout --gateway: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, env, 20*time.Second, "ps", "--addr", addr); r.code == 0 {
		t.Errorf("ps after logout --gateway succeeded:\n%s", r.stdout)
	}
}
