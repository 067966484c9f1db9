package login

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
)

// gatewayMetadata is what login --gateway reads of serve's bare
// protected resource metadata (RFC 9728): the admin resource.
type gatewayMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// GatewayDone is login --gateway's result.
type GatewayDone struct {
	Addr     string           `json:"addr"`
	Resource string           `json:"resource"`
	Store    string           `json:"store"`
	Auth     oauthclient.Info `json:"auth"`
}

// fetchGateway reads serve's admin resource metadata and, unless given,
// the dashboard's public client id (auth.json), within a bound.
func fetchGateway(ctx context.Context, o *Options) (*gatewayMetadata, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, v any) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.API.URL(path), nil)
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, fmt.Errorf("is mcpvisor serve running at %s? %w", o.API.Addr, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp.StatusCode, err
		}
		return resp.StatusCode, json.Unmarshal(body, v)
	}
	var m gatewayMetadata
	code, err := get("/.well-known/oauth-protected-resource", &m)
	switch {
	case err != nil:
		return nil, "", err
	case code == http.StatusNotFound:
		return nil, "", fmt.Errorf("serve at %s has no team identity (no \"auth\" in its config): there is no gateway login; it takes its static token, if any (--token-file)", o.API.Addr)
	case code != http.StatusOK:
		return nil, "", fmt.Errorf("serve at %s answered %d for its protected resource metadata", o.API.Addr, code)
	case m.Resource == "" || len(m.AuthorizationServers) == 0:
		return nil, "", fmt.Errorf("serve at %s states no resource or authorization server in its protected resource metadata", o.API.Addr)
	}
	if err := sameResource(o.API.URL("/"), m.Resource); err != nil {
		return nil, "", err
	}
	client := o.ClientID
	if client == "" {
		client = os.Getenv("MCPVISOR_CLIENT_ID")
	}
	if client == "" {
		var st struct {
			ClientID string `json:"clientId"`
		}
		if code, err := get("/ui/auth.json", &st); err == nil && code == http.StatusOK {
			client = st.ClientID
		}
	}
	return &m, client, nil
}

// RunGatewayLogin is login --gateway: the CLI's own login at the issuer
// of the serve at o.API.Addr, for its admin API. It keeps the tokens in
// the secret store; the commands that reach serve send the access token
// and refresh it when due.
func RunGatewayLogin(ctx context.Context, o *Options) error {
	if o.Timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, clientID, err := fetchGateway(ctx, o)
	if err != nil {
		return fmt.Errorf("login --gateway: %w", err)
	}
	store := cmdutil.OpenSecrets()
	name := cmdutil.GatewaySecretName(o.API.Addr)
	g := cmdutil.GatewayGrant(store, name, cmdutil.GatewayLogin{Resource: m.Resource, ClientID: clientID, Scopes: m.ScopesSupported})
	ln, err := listenLoopback("gateway " + o.API.Addr)
	if err != nil {
		return fmt.Errorf("opening a loopback listener for the redirect: %w", err)
	}
	defer ln.Close()
	redirect := fmt.Sprintf("http://%s/callback", ln.Addr())
	flow, err := g.Begin(ctx, redirect)
	if err != nil {
		hint := ""
		if clientID == "" {
			hint = " (pass --client-id: a public client registered with the issuer, redirect URI http://127.0.0.1/callback)"
		}
		return fmt.Errorf("login --gateway: %w%s", err, hint)
	}
	done := false
	defer func() {
		if !done {
			g.Cancel(flow.ID)
		}
	}()
	state := stateOf(flow.AuthURL)
	type outcome struct {
		info *oauthclient.Info
		err  error
	}
	result := make(chan outcome, 1)
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/callback" || r.Method != http.MethodGet {
				http.NotFound(w, r)
				return
			}
			q := r.URL.Query()
			if q.Get("state") != state {
				fmt.Fprintln(o.IO.ErrOut, "Ignored a redirect that is not this login's (its state differs); still waiting.")
				page(w, http.StatusBadRequest, "Login failed", "This redirect does not belong to the login under way.")
				return
			}
			cctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
			defer cancel()
			info, err := g.Complete(cctx, flow.ID, q)
			if err != nil {
				page(w, http.StatusBadGateway, "Login to the gateway failed", err.Error())
			} else {
				page(w, http.StatusOK, "Logged in to the gateway", "You can close this tab.")
			}
			select {
			case result <- outcome{info, err}:
			default:
			}
		}),
	}
	out := o.IO.ErrOut
	opened := false
	if !o.NoBrowser {
		open := o.Open
		if open == nil {
			open = OpenBrowser
		}
		if err := open(flow.AuthURL); err != nil {
			fmt.Fprintf(out, "Could not open a browser (%v).\n", err)
		} else {
			opened = true
		}
	}
	if opened {
		fmt.Fprintf(out, "Opened the browser to log in to the gateway at %s. If it did not open, visit:\n\n  %s\n\n", o.API.Addr, flow.AuthURL)
	} else {
		fmt.Fprintf(out, "To log in to the gateway at %s, open this URL in a browser on this machine:\n\n  %s\n\n", o.API.Addr, flow.AuthURL)
	}
	fmt.Fprintf(out, "Waiting for the authorization server's redirect (up to %s; Ctrl-C to abandon)…\n", o.Timeout)
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	var res outcome
	select {
	case res = <-result:
	case <-timer.C:
		return fmt.Errorf("login --gateway: no redirect came within %s; the login was abandoned (run it again, or raise --timeout)", o.Timeout)
	case <-ctx.Done():
		return fmt.Errorf("login --gateway abandoned: %w", context.Cause(ctx))
	}
	if res.err != nil {
		return fmt.Errorf("login --gateway: %w", res.err)
	}
	done = true
	cmdutil.ResetGatewayTokens()
	d := GatewayDone{Addr: o.API.Addr, Resource: m.Resource, Store: store.Backend(), Auth: *res.info}
	if o.JSON {
		b, _ := json.MarshalIndent(d, "", "  ")
		fmt.Fprintf(o.IO.Out, "%s\n", b)
		return nil
	}
	fmt.Fprintln(o.IO.Out, GatewaySummary(d))
	return nil
}

// GatewaySummary says who is logged in to which gateway, until when.
func GatewaySummary(d GatewayDone) string {
	var b strings.Builder
	b.WriteString("Logged in to the gateway at " + d.Addr + " (" + d.Resource + ")")
	if d.Auth.Subject != "" {
		b.WriteString(" as " + d.Auth.Subject)
	}
	if d.Auth.Issuer != "" {
		b.WriteString(" (" + d.Auth.Issuer + ")")
	}
	if !d.Auth.Expiry.IsZero() {
		b.WriteString("; the admin token is valid until " + d.Auth.Expiry.Local().Format("2006-01-02 15:04 MST"))
		if d.Auth.Refreshable {
			b.WriteString(", and the CLI refreshes it when due")
		} else {
			b.WriteString("; no refresh token was issued: log in again then")
		}
	}
	b.WriteString("\nkept in " + d.Store)
	return b.String()
}

// RunGatewayLogout is logout --gateway: the gateway login for the
// address revoked where the issuer supports it, and forgotten.
func RunGatewayLogout(ctx context.Context, o *LogoutOptions) error {
	store := cmdutil.OpenSecrets()
	name := cmdutil.GatewaySecretName(o.API.Addr)
	l, err := cmdutil.LoadGatewayLogin(ctx, store, name)
	if err != nil {
		return err
	}
	if l == nil {
		fmt.Fprintf(o.IO.Out, "No gateway login for %s.\n", o.API.Addr)
		return nil
	}
	g := cmdutil.GatewayGrant(store, name, *l)
	revoked, rerr := g.Logout(ctx)
	// Whatever the revocation did, the login is forgotten.
	if err := (&cmdutil.GatewayStore{Secrets: store, Name: name}).Delete(ctx); err != nil {
		return err
	}
	cmdutil.ResetGatewayTokens()
	switch {
	case revoked:
		fmt.Fprintf(o.IO.Out, "Logged out of the gateway at %s: the tokens were revoked and forgotten.\n", o.API.Addr)
	case rerr != nil:
		fmt.Fprintf(o.IO.Out, "Logged out of the gateway at %s: the tokens were forgotten, but not revoked (%v).\n", o.API.Addr, rerr)
	default:
		fmt.Fprintf(o.IO.Out, "Logged out of the gateway at %s: the tokens were forgotten.\n", o.API.Addr)
	}
	return nil
}

// sameResource refuses a resource of another origin than the address the
// CLI reaches serve at (RFC 9728 §3.3): an address that named another
// deployment's public URL would be given that deployment's admin token
// with every command after. A serve reached on a loopback address — the
// machine's own, behind its public URL — may name any.
func sameResource(api, resource string) error {
	a, err1 := url.Parse(api)
	r, err2 := url.Parse(resource)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("the resource %q or the address %q is not a URL", resource, api)
	}
	if strings.EqualFold(a.Scheme, r.Scheme) && strings.EqualFold(a.Host, r.Host) {
		return nil
	}
	if ip := net.ParseIP(a.Hostname()); (ip != nil && ip.IsLoopback()) || strings.EqualFold(a.Hostname(), "localhost") {
		return nil
	}
	return fmt.Errorf("serve at %s says its resource is %s, of another origin: use that URL as --addr (a token for it is sent to the address logged in to)", api, resource)
}
