// Package login is mcpvisor login and mcpvisor logout: a remote server's
// OAuth login, run by the serve the CLI talks to (internal/admin's login
// routes), with the browser and the loopback redirect on the CLI's side.
package login

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// DefaultTimeout is how long login waits for the browser's redirect.
const DefaultTimeout = 5 * time.Minute

// Options are mcpvisor login's.
type Options struct {
	IO     cmdutil.IOStreams
	Server string
	API    adminclient.Client
	// NoBrowser prints the authorization URL without opening a browser.
	NoBrowser bool
	// Timeout bounds the wait for the redirect.
	Timeout time.Duration
	JSON    bool
	// Open opens url in the user's browser (nil: OpenBrowser).
	Open func(url string) error
	// Gateway: log the CLI itself in to serve's admin API (team
	// identity), not a remote server.
	Gateway bool
	// ClientID is the issuer's public client for Gateway (default
	// $MCPVISOR_CLIENT_ID, else the dashboard's).
	ClientID string
}

// nameOrGateway takes NAME, or none with --gateway.
func nameOrGateway(gateway *bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if *gateway {
			if len(args) != 0 {
				return fmt.Errorf("--gateway takes no server name (got %q)", args[0])
			}
			return nil
		}
		return cobra.ExactArgs(1)(cmd, args)
	}
}

// NewCmdLogin is mcpvisor login NAME.
func NewCmdLogin(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{IO: streams}
	cmd := &cobra.Command{
		Use:   "login NAME | login --gateway",
		Short: "Log in to a remote server behind OAuth, or to serve's admin API",
		Long: `Log in to a remote server behind OAuth: the browser opens on the
authorization server's page (or the URL is printed: --no-browser, or when
no browser can be opened); once you approve, the authorization server
redirects to a listener of this command on 127.0.0.1, and mcpvisor serve —
which may run on another machine — exchanges the code for tokens and keeps
them (in the OS keyring where there is one). No token reaches this
command. Then it says who is logged in and until when; serve refreshes the
token before it expires.

With --gateway, the CLI logs itself in to the admin API of a serve with team
identity ("auth"): at the issuer that serve's protected resource metadata
names, for its public URL and admin scope, with the same browser and loopback
redirect; the tokens are kept in the OS keyring (else the state directory's
file), and the commands that reach serve (--addr) send the access token,
refreshed when due. The client is --client-id, else $MCPVISOR_CLIENT_ID,
else the dashboard's (auth.dashboardClientId): a public client whose
redirect URIs include http://127.0.0.1/callback. For automation, give the
commands a token file instead (--token-file or $MCPVISOR_TOKEN_FILE).

The browser is $BROWSER when set, else the system's (xdg-open, open).`,
		Args: nameOrGateway(&o.Gateway),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			if !o.Gateway {
				o.Server = args[0]
			}
			return nil
		}, runF, func(ctx context.Context, o *Options) error {
			if o.Gateway {
				return RunGatewayLogin(ctx, o)
			}
			return RunLogin(ctx, o)
		}),
	}
	cmd.Flags().BoolVar(&o.Gateway, "gateway", false, "log the CLI in to serve's admin API (team identity) instead of a remote server")
	cmd.Flags().StringVar(&o.ClientID, "client-id", "", "with --gateway: the issuer's public client (default $MCPVISOR_CLIENT_ID, else the dashboard's)")
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.NoBrowser, "no-browser", false, "print the authorization URL instead of opening a browser")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", DefaultTimeout, "how long to wait for the browser's redirect")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the result as JSON")
	return cmd
}

// RunLogin runs the login: begin at serve, the browser, the redirect on a
// loopback listener, completion at serve. Interrupted (ctx) or out of
// time, it tells serve to drop the flow and returns an error.
func RunLogin(ctx context.Context, o *Options) error {
	if o.Timeout <= 0 {
		return shutdown.UsageError{Err: errors.New("--timeout must be positive")}
	}
	// Ctrl-C ends the wait through ctx, so that serve is told to drop
	// the flow (the deferred cancel below) before the command exits.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := listenLoopback(o.Server)
	if err != nil {
		return fmt.Errorf("opening a loopback listener for the redirect: %w", err)
	}
	defer ln.Close()
	redirect := fmt.Sprintf("http://%s/callback", ln.Addr())

	base := "/api/servers/" + url.PathEscape(o.Server) + "/login"
	var started admin.LoginStarted
	if err := post(ctx, &o.API, base, admin.LoginRequest{RedirectURI: redirect}, &started); err != nil {
		return fmt.Errorf("login %s: %w", o.Server, err)
	}
	flow := base + "/" + url.PathEscape(started.Flow)
	state := stateOf(started.AuthorizationURL)
	done := false
	defer func() {
		if !done {
			// Out of time, interrupted, or failed: serve forgets the flow.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _, _ = o.API.Post(cctx, flow+"/cancel", nil)
		}
	}()

	type outcome struct {
		done admin.LoginDone
		err  error
	}
	result := make(chan outcome, 1)
	// completing is closed once this login's redirect came and its
	// completion is posted: from then on the wait is for serve's answer
	// (bounded by the post's own bound), not the redirect's --timeout.
	completing := make(chan struct{})
	var completingOnce sync.Once
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/callback" || r.Method != http.MethodGet {
				http.NotFound(w, r)
				return
			}
			q := r.URL.Query()
			if state != "" && q.Get("state") != state {
				// Not this login's redirect (a stale tab, a stray request):
				// the flow waits on for its own.
				fmt.Fprintln(o.IO.ErrOut, "Ignored a redirect that is not this login's (its state differs); still waiting.")
				page(w, http.StatusBadRequest, "Login failed", "This redirect does not belong to the login under way.")
				return
			}
			completingOnce.Do(func() { close(completing) })
			var res admin.LoginDone
			err := post(r.Context(), &o.API, flow, admin.LoginCallback{Query: r.URL.RawQuery}, &res)
			if err != nil {
				page(w, http.StatusBadGateway, "Login to "+o.Server+" failed", err.Error())
			} else {
				page(w, http.StatusOK, "Logged in to "+o.Server, "You can close this tab.")
			}
			select {
			case result <- outcome{res, err}:
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
		if err := open(started.AuthorizationURL); err != nil {
			fmt.Fprintf(out, "Could not open a browser (%v).\n", err)
		} else {
			opened = true
		}
	}
	if opened {
		fmt.Fprintf(out, "Opened the browser to log in to %s. If it did not open, visit:\n\n  %s\n\n", o.Server, started.AuthorizationURL)
	} else {
		fmt.Fprintf(out, "To log in to %s, open this URL in a browser on this machine:\n\n  %s\n\n", o.Server, started.AuthorizationURL)
	}
	fmt.Fprintf(out, "Waiting for the authorization server's redirect (up to %s; Ctrl-C to abandon)…\n", o.Timeout)
	// Served from here on: what is printed above is printed before any
	// redirect can be answered.
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close() // a handler still posting is cut off with its connection
		}
	}()

	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	timeout := timer.C
	for {
		select {
		case <-completing:
			completing, timeout = nil, nil // the redirect came: serve's answer decides
			continue
		case r := <-result:
			return o.finish(r.done, r.err, &done)
		case <-timeout:
			return fmt.Errorf("login %s: no redirect came within %s; the login was abandoned (run it again, or raise --timeout)", o.Server, o.Timeout)
		case <-ctx.Done():
			return fmt.Errorf("login %s abandoned: %w", o.Server, context.Cause(ctx))
		}
	}
}

// finish says how the login ended, once serve answered its completion.
func (o *Options) finish(d admin.LoginDone, err error, done *bool) error {
	if err != nil {
		return fmt.Errorf("login %s: %w", o.Server, err)
	}
	*done = true
	if o.JSON {
		b, _ := json.MarshalIndent(d, "", "  ")
		fmt.Fprintf(o.IO.Out, "%s\n", b)
	} else {
		fmt.Fprintln(o.IO.Out, Summary(d))
	}
	return nil
}

// listenLoopback opens the listener of the redirect on 127.0.0.1: on the
// port this server's logins prefer, else on any free one. The same
// redirect URI at each login lets serve reuse the client it registered
// with the authorization server, which matches redirect URIs exactly
// (most do, RFC 8252 §7.3 notwithstanding); on another port the login
// still works, with a new registration.
func listenLoopback(server string) (net.Listener, error) {
	if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", preferredPort(server))); err == nil {
		return ln, nil
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// preferredPort is the port a server's logins listen on when it is free,
// from the server's name: one of 61000–65535, above Linux's ephemeral
// ports (32768–60999), which outgoing connections take at random.
func preferredPort(server string) int {
	h := fnv.New32a()
	h.Write([]byte(server))
	return 61000 + int(h.Sum32()%4536)
}

// Summary says who is logged in to which server, until when.
func Summary(d admin.LoginDone) string {
	var b strings.Builder
	b.WriteString("Logged in to " + d.Server)
	if d.Auth.Subject != "" {
		b.WriteString(" as " + d.Auth.Subject)
	}
	if d.Auth.Issuer != "" {
		b.WriteString(" (" + d.Auth.Issuer + ")")
	}
	if !d.Auth.Expiry.IsZero() {
		b.WriteString("; the access token is valid until " + d.Auth.Expiry.Local().Format("2006-01-02 15:04 MST"))
		if d.Auth.Refreshable {
			b.WriteString(", and serve refreshes it before then")
		} else {
			b.WriteString("; no refresh token was issued: log in again then")
		}
	}
	if len(d.Auth.Scopes) > 0 {
		b.WriteString("\nscopes: " + strings.Join(d.Auth.Scopes, " "))
	}
	return b.String()
}

// stateOf is the state parameter of an authorization URL.
func stateOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Query().Get("state")
}

// post sends v as JSON to path and decodes a 200 answer into into; any
// other answer is the API's error.
func post(ctx context.Context, api *adminclient.Client, path string, v, into any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second) // serve bounds its own work at 60 s
	defer cancel()
	code, b, err := api.Post(ctx, path, body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return adminclient.AnswerError(code, b)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			return fmt.Errorf("unexpected answer from %s: %w", api.Addr, err)
		}
	}
	return nil
}

func page(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "<!doctype html><meta charset=utf-8><title>mcpvisor: "+html.EscapeString(title)+"</title><h1>"+html.EscapeString(title)+"</h1><p>"+html.EscapeString(msg)+"</p>\n")
}

// OpenBrowser opens u in the user's browser: $BROWSER when set, else the
// system's opener. $BROWSER is, as other programs read it, a command
// given u as its last argument, or in place of a "%s" in it; on Unix it
// may list several, separated by ":", each tried in turn until one
// starts. It returns once the opener started (it does not wait for the
// browser), or why none could.
func OpenBrowser(u string) error {
	if b := strings.TrimSpace(os.Getenv("BROWSER")); b != "" {
		cmds := []string{b}
		if runtime.GOOS != "windows" {
			cmds = strings.Split(b, ":")
		}
		var errs []error
		for _, c := range cmds {
			f := strings.Fields(c)
			if len(f) == 0 {
				continue
			}
			args, placed := f[1:], false
			for i, a := range args {
				if strings.Contains(a, "%s") {
					args[i], placed = strings.ReplaceAll(a, "%s", u), true
				}
			}
			if !placed {
				args = append(args, u)
			}
			err := start(f[0], args...)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return fmt.Errorf("$BROWSER: %w", errors.Join(errs...))
	}
	switch runtime.GOOS {
	case "darwin":
		return start("open", u)
	case "windows":
		return start("rundll32", "url.dll,FileProtocolHandler", u)
	}
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return errors.New("no display: $DISPLAY and $WAYLAND_DISPLAY are unset")
	}
	return start("xdg-open", u)
}

// start starts name with args, and reaps it in the background: the
// opener may outlive the login.
func start(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// LogoutOptions are mcpvisor logout's.
type LogoutOptions struct {
	IO     cmdutil.IOStreams
	Server string
	API    adminclient.Client
	JSON   bool
	// Gateway forgets the CLI's own login to serve's admin API.
	Gateway bool
}

// NewCmdLogout is mcpvisor logout NAME.
func NewCmdLogout(streams cmdutil.IOStreams, runF func(context.Context, *LogoutOptions) error) *cobra.Command {
	o := &LogoutOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "logout NAME | logout --gateway",
		Short: "Forget a remote server's tokens (or the CLI's gateway login), revoked where it supports it",
		Args:  nameOrGateway(&o.Gateway),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			if !o.Gateway {
				o.Server = args[0]
			}
			return nil
		}, runF, func(ctx context.Context, o *LogoutOptions) error {
			if o.Gateway {
				return RunGatewayLogout(ctx, o)
			}
			return RunLogout(ctx, o)
		}),
	}
	cmd.Flags().BoolVar(&o.Gateway, "gateway", false, "forget the CLI's login to serve's admin API (login --gateway)")
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the result as JSON")
	return cmd
}

// RunLogout has serve revoke and forget the server's tokens.
func RunLogout(ctx context.Context, o *LogoutOptions) error {
	var res admin.LogoutDone
	if err := post(ctx, &o.API, "/api/servers/"+url.PathEscape(o.Server)+"/logout", struct{}{}, &res); err != nil {
		return fmt.Errorf("logout %s: %w", o.Server, err)
	}
	if o.JSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(o.IO.Out, "%s\n", b)
		return nil
	}
	switch {
	case res.Revoked:
		fmt.Fprintf(o.IO.Out, "Logged out of %s: the tokens were revoked and forgotten.\n", o.Server)
	case res.RevokeError != "":
		fmt.Fprintf(o.IO.Out, "Logged out of %s: the tokens were forgotten, but not revoked (%s).\n", o.Server, res.RevokeError)
	default:
		fmt.Fprintf(o.IO.Out, "Logged out of %s: the tokens were forgotten (its authorization server offers no revocation).\n", o.Server)
	}
	return nil
}
