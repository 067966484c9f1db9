package login

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// A serve without team identity has no protected resource metadata: the
// gateway login says there is nothing to log in to, and opens no
// browser.
func TestGatewayLoginWithoutTeamIdentity(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	var out, errOut bytes.Buffer
	opened := false
	o := &Options{IO: cmdutil.IOStreams{Out: &out, ErrOut: &errOut}, API: adminclient.Client{Addr: strings.TrimPrefix(srv.URL, "http://")},
		Gateway: true, Timeout: time.Minute, Open: func(string) error { opened = true; return nil }}
	err := RunGatewayLogin(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "has no team identity") {
		t.Fatalf("login --gateway at a serve without auth: %v", err)
	}
	if opened {
		t.Error("a browser was opened")
	}
}

// Metadata that names no issuer is refused before any browser opens.
func TestGatewayLoginBadMetadata(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-protected-resource" {
			_, _ = w.Write([]byte(`{"resource":"http://127.0.0.1:1"}`))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	o := &Options{IO: cmdutil.IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, API: adminclient.Client{Addr: strings.TrimPrefix(srv.URL, "http://")},
		Gateway: true, Timeout: time.Minute, Open: func(string) error { t.Error("a browser was opened"); return nil }}
	if err := RunGatewayLogin(context.Background(), o); err == nil || !strings.Contains(err.Error(), "no resource or authorization server") {
		t.Fatalf("login --gateway with metadata naming no issuer: %v", err)
	}
}

// --gateway takes no server name; without it one is required.
func TestGatewayArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gateway", "srv"}, "--gateway takes no server name"},
		{[]string{}, "accepts 1 arg"},
	} {
		cmd := NewCmdLogin(cmdutil.IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, func(context.Context, *Options) error { return nil })
		cmd.SetArgs(c.args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("login %q: %v, want %q", c.args, err, c.want)
		}
	}
	var got *Options
	cmd := NewCmdLogin(cmdutil.IOStreams{}, func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--gateway", "--client-id", "dash", "--addr", "127.0.0.1:9"})
	if err := cmd.Execute(); err != nil || got == nil || !got.Gateway || got.ClientID != "dash" || got.API.Addr != "127.0.0.1:9" || got.Server != "" {
		t.Errorf("login --gateway: %v %+v", err, got)
	}
}

// logout --gateway without a login says so; with one, it forgets it.
func TestGatewayLogout(t *testing.T) {
	dir := t.TempDir()
	old := cmdutil.OpenSecrets
	cmdutil.OpenSecrets = func() secret.Store { return secret.OpenFile(dir) }
	t.Cleanup(func() { cmdutil.OpenSecrets = old })
	var out bytes.Buffer
	o := &LogoutOptions{IO: cmdutil.IOStreams{Out: &out}, API: adminclient.Client{Addr: "127.0.0.1:9"}, Gateway: true}
	if err := RunGatewayLogout(context.Background(), o); err != nil || !strings.Contains(out.String(), "No gateway login") {
		t.Fatalf("logout --gateway without a login: %v %q", err, out.String())
	}
	s := &cmdutil.GatewayStore{Secrets: secret.OpenFile(dir), Name: cmdutil.GatewaySecretName("127.0.0.1:9"), Login: cmdutil.GatewayLogin{Resource: "http://127.0.0.1:9"}}
	if err := s.Save(context.Background(), []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := RunGatewayLogout(context.Background(), o); err != nil || !strings.Contains(out.String(), "Logged out of the gateway") {
		t.Fatalf("logout --gateway: %v %q", err, out.String())
	}
	if l, err := cmdutil.LoadGatewayLogin(context.Background(), secret.OpenFile(dir), s.Name); l != nil || err != nil {
		t.Errorf("the login is still kept: %+v %v", l, err)
	}
}
