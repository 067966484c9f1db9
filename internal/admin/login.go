package admin

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
)

// The login routes (remote servers behind OAuth; docs/oauth.md):
//
//	POST /api/servers/{name}/login               begin: {"redirectUri"} → LoginStarted
//	POST /api/servers/{name}/login/{flow}        complete: {"query"} (the redirect's) → LoginDone
//	POST /api/servers/{name}/login/{flow}/cancel abandon a flow
//	POST /api/servers/{name}/logout              → LogoutDone
//	GET  /api/servers/{name}/auth                → the grant's state (never a token)
//	GET  /oauth/callback                         the dashboard's redirect target
//
// serve holds the flow: discovery, registration, PKCE, state and the code
// exchange run here, where the server's client secret resolves and where
// the tokens are kept; the CLI (mcpvisor login) only opens the browser and
// receives the redirect on its own loopback listener, then posts the
// redirect's query here. A code is of no use without the PKCE verifier
// serve holds, and no token ever leaves serve.

// LoginRequest is the body of a login's begin.
type LoginRequest struct {
	// RedirectURI is where the authorization server sends the browser:
	// the CLI's loopback listener (http://127.0.0.1:PORT/…). Empty: this
	// listener's own /oauth/callback (the dashboard).
	RedirectURI string `json:"redirectUri,omitempty"`
}

// LoginStarted answers a login's begin.
type LoginStarted struct {
	Server string `json:"server"`
	// Flow names the flow in the complete and cancel routes.
	Flow string `json:"flow"`
	// AuthorizationURL is the page to open in the browser.
	AuthorizationURL string    `json:"authorizationUrl"`
	Expires          time.Time `json:"expires"`
}

// LoginCallback is the body of a login's completion: the query of the
// redirect the browser was sent to (code, state, iss — or error).
type LoginCallback struct {
	Query string `json:"query"`
}

// LoginDone answers a completed login: who is logged in, until when.
type LoginDone struct {
	Server string           `json:"server"`
	Auth   oauthclient.Info `json:"auth"`
}

// LogoutDone answers a logout: the tokens are forgotten; Revoked says
// whether the authorization server revoked them, RevokeError why not.
type LogoutDone struct {
	Server      string `json:"server"`
	Revoked     bool   `json:"revoked"`
	RevokeError string `json:"revokeError,omitempty"`
}

// loginTimeout bounds the work of a login route (discovery, registration,
// the code exchange): each request to the authorization server is bounded
// on its own too.
const loginTimeout = 60 * time.Second

// dashboardFlows maps the state of the flows the dashboard began to
// their server and flow, for /oauth/callback, which the authorization
// server reaches by redirecting the browser (no bearer token on it: the
// state, unguessable and single-use, stands for the authenticated POST
// that began the flow).
type dashboardFlows struct {
	mu    sync.Mutex
	flows map[string]dashboardFlow
}

type dashboardFlow struct {
	server, flow string
	expires      time.Time
}

// maxDashboardFlows bounds the flows the dashboard may hold at once.
const maxDashboardFlows = 64

func (d *dashboardFlows) add(state string, f dashboardFlow) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for k, v := range d.flows {
		if now.After(v.expires) {
			delete(d.flows, k)
		}
	}
	if len(d.flows) >= maxDashboardFlows {
		return false
	}
	if d.flows == nil {
		d.flows = map[string]dashboardFlow{}
	}
	d.flows[state] = f
	return true
}

func (d *dashboardFlows) take(state string) (dashboardFlow, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.flows[state]
	delete(d.flows, state)
	if ok && time.Now().After(f.expires) {
		return f, false
	}
	return f, ok
}

func (h *Handler) loginRoutes() {
	h.mux.HandleFunc("POST /api/servers/{name}/login", h.loginBegin)
	h.mux.HandleFunc("POST /api/servers/{name}/login/{flow}", h.loginComplete)
	h.mux.HandleFunc("POST /api/servers/{name}/login/{flow}/cancel", h.loginCancel)
	h.mux.HandleFunc("POST /api/servers/{name}/logout", h.logout)
	h.mux.HandleFunc("GET /api/servers/{name}/auth", h.authStatus)
}

// readBody decodes a small JSON body into v (an empty body leaves v).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err == nil && len(b) > 0 {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": "the body is not the JSON this route takes: " + err.Error()})
		return false
	}
	return true
}

// loginError answers a login route's failure: 409 for a server that has
// no login (not remote, or client credentials), 502 for what the
// authorization server answered, 504 when its bound ran out.
func (h *Handler) loginError(w http.ResponseWriter, err error) {
	status := http.StatusBadGateway
	switch {
	case errors.Is(err, fleet.ErrNoLogin):
		status = http.StatusConflict
	case errors.Is(err, oauthclient.ErrUnknownFlow):
		status = http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	}
	h.writeStatusJSON(w, status, map[string]string{"error": err.Error()})
}

func (h *Handler) loginBegin(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	var req LoginRequest
	if !h.readBody(w, r, &req) {
		return
	}
	dashboard := req.RedirectURI == ""
	if dashboard {
		req.RedirectURI = "http://" + r.Host + "/oauth/callback"
		if !loopbackRedirect(req.RedirectURI) {
			// An authorization server sends a browser back over plain
			// http only to a loopback address (RFC 8252 §8.3), and the
			// grant refuses any other: say so before asking it.
			h.writeStatusJSON(w, http.StatusConflict, map[string]string{"error": "the dashboard can log in only when it is opened at a loopback address (http://127.0.0.1:PORT or http://localhost:PORT), not at " + r.Host + ": the authorization server's redirect comes back to it over plain http. Run \"mcpvisor login " + s.Name() + "\" on the machine with the browser instead"})
			return
		}
	} else if !loopbackRedirect(req.RedirectURI) {
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": "redirectUri must be a loopback http URL (http://127.0.0.1:PORT/…), got " + req.RedirectURI})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), loginTimeout)
	defer cancel()
	fl, err := s.Login(ctx, req.RedirectURI)
	if err != nil {
		h.loginError(w, err)
		return
	}
	if dashboard {
		u, _ := url.Parse(fl.AuthURL)
		if u == nil || !h.dashFlows.add(u.Query().Get("state"), dashboardFlow{server: s.Name(), flow: fl.ID, expires: fl.Expires}) {
			s.CancelLogin(fl.ID)
			h.writeStatusJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "too many logins begun from the dashboard at once; try again in a few minutes"})
			return
		}
	}
	h.writeJSON(w, LoginStarted{Server: s.Name(), Flow: fl.ID, AuthorizationURL: fl.AuthURL, Expires: fl.Expires})
}

// loopbackRedirect reports whether u is an http URL on a loopback
// address: the only redirect a CLI may ask for (RFC 8252 §7.3).
func loopbackRedirect(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "http" || p.User != nil {
		return false
	}
	switch p.Hostname() {
	case "127.0.0.1", "::1", "localhost":
		return true
	}
	return false
}

func (h *Handler) loginComplete(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	var cb LoginCallback
	if !h.readBody(w, r, &cb) {
		return
	}
	q, err := url.ParseQuery(cb.Query)
	if err != nil {
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": "query: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), loginTimeout)
	defer cancel()
	info, err := s.CompleteLogin(ctx, r.PathValue("flow"), q)
	if err != nil {
		h.loginError(w, err)
		return
	}
	h.writeJSON(w, LoginDone{Server: s.Name(), Auth: info})
}

func (h *Handler) loginCancel(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	s.CancelLogin(r.PathValue("flow"))
	h.writeJSON(w, map[string]string{"server": s.Name(), "cancelled": r.PathValue("flow")})
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), loginTimeout)
	defer cancel()
	revoked, err := s.Logout(ctx)
	if errors.Is(err, fleet.ErrNoLogin) {
		h.loginError(w, err)
		return
	}
	res := LogoutDone{Server: s.Name(), Revoked: revoked}
	if err != nil {
		res.RevokeError = err.Error()
	}
	h.writeJSON(w, res)
}

func (h *Handler) authStatus(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	info, ok := s.OAuth()
	if !ok {
		h.writeStatusJSON(w, http.StatusConflict, map[string]string{"error": "server " + s.Name() + " is not a remote server: it has no login"})
		return
	}
	h.writeJSON(w, map[string]any{"server": s.Name(), "auth": info})
}

// OAuthCallback serves GET /oauth/callback: the authorization server's
// redirect of a login the dashboard began. It is reached by the browser
// without the bearer token (a redirect carries none): the guard checks
// Host and Origin only, and the flow is found by its state, unguessable
// and single-use, which only the authenticated begin handed out.
func (h *Handler) OAuthCallback(w http.ResponseWriter, r *http.Request) {
	if !h.guard.AllowPublic(w, r) {
		return
	}
	q := r.URL.Query()
	// The page names the dashboard's icon: without one the browser asks
	// for /favicon.ico, which is behind the token (a 401 in its console).
	page := func(status int, title, msg string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content=\"width=device-width,initial-scale=1\"><link rel=icon href=\"/ui/icon.svg\" type=\"image/svg+xml\"><title>mcpvisor: "+html.EscapeString(title)+"</title><h1>"+html.EscapeString(title)+"</h1><p>"+html.EscapeString(msg)+"</p><p><a href=\"/\">Back to the dashboard</a></p>\n")
	}
	f, ok := h.dashFlows.take(q.Get("state"))
	if !ok {
		page(http.StatusBadRequest, "Login failed", "This redirect belongs to no login the dashboard began (or it expired). Begin the login again.")
		return
	}
	s := h.f.Get(f.server)
	if s == nil {
		page(http.StatusNotFound, "Login failed", "The server "+f.server+" is no longer configured.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), loginTimeout)
	defer cancel()
	info, err := s.CompleteLogin(ctx, f.flow, q)
	if err != nil {
		page(http.StatusBadGateway, "Login to "+f.server+" failed", err.Error())
		return
	}
	page(http.StatusOK, "Logged in to "+f.server, loginSummary(info))
}

// loginSummary says who is logged in and until when.
func loginSummary(info oauthclient.Info) string {
	msg := "Logged in"
	if info.Subject != "" {
		msg += " as " + info.Subject
	}
	if info.Issuer != "" {
		msg += " at " + info.Issuer
	}
	if !info.Expiry.IsZero() {
		msg += "; the access token is valid until " + info.Expiry.Local().Format(time.RFC1123)
		if info.Refreshable {
			msg += " and is refreshed before then"
		}
	}
	return msg + "."
}
