package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// A remote server behind OAuth (docs/oauth.md): the fleet holds one grant
// per remote server that has no configured Authorization header — its
// registration and tokens, persisted through Options.OAuthStore — and the
// server's connections take their access token from it. A server the
// grant cannot authorize is in state "needs-login": its requests are
// refused at once with NeedsLoginError, and nothing is started until a
// login (mcpvisor login, the dashboard) gives it tokens.

// ErrNoLogin is the error of a login asked of a server that has none: a
// stdio server, or a remote one with a configured Authorization header.
var ErrNoLogin = errors.New("the server has no login")

// NeedsLoginError is a request's error while its server needs a login:
// it names the command to run.
type NeedsLoginError struct {
	Server string
	// Reason says why ("no credentials", "refresh token expired or
	// revoked", "insufficient scope", …).
	Reason string
	// Scope is the scope a step-up asks for, if any.
	Scope string
}

func (e *NeedsLoginError) Error() string {
	msg := "server " + e.Server + " needs a login"
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg + `: run "mcpvisor login ` + e.Server + `"`
}

// Unwrap makes the error an oauthclient.ErrNeedsLogin.
func (e *NeedsLoginError) Unwrap() error { return oauthclient.ErrNeedsLogin }

// RPCError is the JSON-RPC error a request gets while its server needs a
// login: data says so, with the command to run.
func (e *NeedsLoginError) RPCError() *rpc.Error {
	data := map[string]any{"server": e.Server, "needsLogin": true, "command": "mcpvisor login " + e.Server}
	if e.Reason != "" {
		data["reason"] = e.Reason
	}
	if e.Scope != "" {
		data["scope"] = e.Scope
	}
	b, _ := json.Marshal(data)
	return &rpc.Error{Code: rpc.BackendUnavailable, Message: e.Error(), Data: b}
}

// oauthEligible reports whether sc logs in with OAuth: a remote server
// with no Authorization header of its own.
func oauthEligible(sc *config.Server) bool {
	if sc.Kind != config.KindHTTP || sc.Via != nil {
		return false // a replica's own peer interface asks for no token
	}
	for k := range sc.Headers {
		if strings.EqualFold(k, "Authorization") {
			return false
		}
	}
	return true
}

// grants are the fleet's OAuth grants, by server name: each is the grant
// of the server as it is configured now (grantEntry.cfg), rebuilt when
// its resolved secrets change. A connection of the server as it was
// configured before a reload (draining) gets a grant of its own, kept
// nowhere and persisting nothing: it never takes the place of the
// current one, nor writes over its record.
type grants struct {
	mu sync.Mutex
	by map[string]*grantEntry
}

type grantEntry struct {
	cfg     string // configKey of the config it is for
	secrets string // settingsKey: what it was built from, secrets hashed
	g       *oauthclient.Grant
}

// configKey identifies what of a server's config its grant depends on,
// as written (references unresolved): its URL and oauth settings. "" for
// a server with no login.
func configKey(sc *config.Server) string {
	if !oauthEligible(sc) {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s;", len(sc.URL), sc.URL)
	if o := sc.OAuth; o != nil {
		for _, v := range []string{o.ClientID, o.ClientSecret, o.TokenEndpointAuthMethod, o.PrivateKey, o.SigningAlgorithm, strings.Join(o.Scopes, " "), o.ClientMetadataURL, o.Grant} {
			fmt.Fprintf(h, "%d:%s;", len(v), v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// isCurrent reports whether sc is the config the server named has now
// (for its grant: configKey).
func (f *Fleet) isCurrent(sc *config.Server) (string, bool) {
	key := configKey(sc)
	s := f.Get(sc.Name)
	return key, key != "" && s != nil && configKey(s.Config()) == key
}

// grantOf is sc's grant, its oauth secrets resolved now (a connection's
// start, a login): the current one, rebuilt if those changed; for a
// config no longer current, one of its own (see grants). Nil for a
// server with no login.
func (f *Fleet) grantOf(ctx context.Context, sc *config.Server) (*oauthclient.Grant, error) {
	if !oauthEligible(sc) {
		return nil, nil
	}
	set, err := f.oauthSettings(ctx, sc)
	if err != nil {
		return nil, err
	}
	skey := settingsKey(set)
	cfg, current := f.isCurrent(sc)
	if !current {
		return oauthclient.New(set, &memRecord{}, f.opts.OAuthClient, f.log.With("server", sc.Name)), nil
	}
	f.grants.mu.Lock()
	defer f.grants.mu.Unlock()
	if e := f.grants.by[sc.Name]; e != nil && e.cfg == cfg && e.secrets == skey {
		return e.g, nil
	}
	var store oauthclient.Store = &memRecord{}
	if f.opts.Secrets != nil {
		store = recordStore{s: f.opts.Secrets, name: "oauth/" + sc.Name, bind: recordBinding(set)}
	}
	g := oauthclient.New(set, store, f.opts.OAuthClient, f.log.With("server", sc.Name))
	name := sc.Name
	last := g.Info()
	var mu sync.Mutex
	g.OnChange(func(info oauthclient.Info) {
		mu.Lock()
		prev := last
		last = info
		mu.Unlock()
		f.grantChanged(name, prev, info)
	})
	if f.grants.by == nil {
		f.grants.by = map[string]*grantEntry{}
	}
	f.grants.by[sc.Name] = &grantEntry{cfg: cfg, secrets: skey, g: g}
	return g, nil
}

// currentGrant is the grant of the server named as it is configured now,
// nil if none was built for that config (nothing resolved, no network)
// or it has no login.
func (f *Fleet) currentGrant(name string) *oauthclient.Grant {
	s := f.Get(name)
	if s == nil {
		return nil
	}
	cfg := configKey(s.Config())
	f.grants.mu.Lock()
	defer f.grants.mu.Unlock()
	if e := f.grants.by[name]; e != nil && cfg != "" && e.cfg == cfg {
		return e.g
	}
	return nil
}

// settingsKey identifies what a grant is built from, secrets hashed.
func settingsKey(s oauthclient.Settings) string {
	h := sha256.New()
	for _, v := range []string{s.Resource, s.ClientID, s.ClientSecret, s.AuthMethod, string(s.PrivateKeyPEM), s.SigningAlgorithm, s.ClientMetadataURL, strings.Join(s.Scopes, " "), s.Grant} {
		fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// oauthSettings are sc's OAuth settings with their secrets resolved.
func (f *Fleet) oauthSettings(ctx context.Context, sc *config.Server) (oauthclient.Settings, error) {
	set := oauthclient.Settings{Resource: resourceOf(sc.URL), ClientName: "mcpvisor"}
	o := sc.OAuth
	if o == nil {
		return set, nil
	}
	secret, key, err := f.resolveOAuthSecrets(ctx, sc)
	if err != nil {
		return set, err
	}
	set.ClientID = o.ClientID
	set.ClientSecret = secret
	set.AuthMethod = o.TokenEndpointAuthMethod
	if key != "" {
		set.PrivateKeyPEM = []byte(key)
	}
	set.SigningAlgorithm = o.SigningAlgorithm
	set.Scopes = o.Scopes
	set.ClientMetadataURL = o.ClientMetadataURL
	set.Grant = o.Grant
	return set, nil
}

// resourceOf is a server URL as its OAuth resource (RFC 8707, the MCP
// authorization spec's canonical URI): without its query and fragment —
// a query may hold an API key, which has no business in an authorization
// request, a browser's command line or an error message.
func resourceOf(serverURL string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return serverURL
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	return u.String()
}

// grantChanged emits the event of a grant's change of state: a server
// that now needs a login (a refresh refused, say), or whose tokens were
// forgotten. A login's own event is CompleteLogin's: a step-up logs in
// again from the same state.
func (f *Fleet) grantChanged(server string, prev, info oauthclient.Info) {
	var d event.Details
	switch {
	case info.State == oauthclient.StateNeedsLogin && prev.State != oauthclient.StateNeedsLogin:
		d = event.NeedsLoginDetails{Reason: info.Reason, Issuer: info.Issuer}
	case StepUpScope(info) != "" && StepUpScope(prev) != StepUpScope(info):
		// Logged in, but a request needs more scope: the server goes on
		// serving what it can, and a login asks for the union.
		d = event.NeedsLoginDetails{Reason: info.Reason, Issuer: info.Issuer, Scope: StepUpScope(info)}
	case info.State == oauthclient.StateNone && prev.State != oauthclient.StateNone && prev.State != oauthclient.StateNeedsLogin:
		d = event.LoggedOutDetails{Issuer: info.Issuer}
	default:
		return
	}
	f.emit(NewEvent(server, "", d))
}

// StepUpScope is the scope a logged-in grant's server asked for beyond
// what was granted ("" when none): a step-up login gets it.
func StepUpScope(info oauthclient.Info) string {
	if info.State != oauthclient.StateLoggedIn {
		return ""
	}
	scope, _ := strings.CutPrefix(info.Reason, oauthclient.ReasonScopePrefix)
	if scope == info.Reason {
		return ""
	}
	return scope
}

// loginStartBound bounds the start afterLogin makes.
const loginStartBound = time.Minute

// afterLogin starts again, at once, the server that failed for want of a
// login — a new run, its count of failed starts reset: what failed was
// the credentials, not the server — so that its state shows whether the
// login worked without waiting for a request (or for a crash loop's next
// attempt). A server the operator stopped stays stopped.
//
// A server that needed a login while its connection was still open is
// started again too (needed): that connection's requests were refused,
// and its stream of the server's own messages may have given up.
func (s *Server) afterLogin(needed bool) {
	st := s.Status()
	if st.State == "stopped" || !needed && st.State != "failed" && st.State != "needs-login" {
		return
	}
	s.f.spawn(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, loginStartBound)
		defer cancel()
		_, _ = s.Restart(ctx)
		if !s.cat.Cached(catalog.Tools) {
			// The lists it could not be asked for: /mcp lists it now. (Not
			// learn, which lets the server sleep again: it was just
			// logged in to, to be used.)
			if l, err := s.Acquire(ctx, ""); err == nil {
				s.cat.Learn(ctx, l)
				l.Release()
			}
		}
	})
}

// loginRefusal is the error every request gets at once while the server
// needs a login; nil otherwise (nothing is built or resolved for it).
func (s *Server) loginRefusal() error {
	g := s.f.currentGrant(s.Name())
	if g == nil {
		return nil
	}
	info := g.Info()
	if info.State != oauthclient.StateNeedsLogin {
		return nil
	}
	return &NeedsLoginError{Server: s.Name(), Reason: info.Reason}
}

// LoginRefusal is the NeedsLoginError a request to the server gets now,
// nil unless it needs a login.
func (s *Server) LoginRefusal() error { return s.loginRefusal() }

// asLoginError is LoginError for the server.
func (s *Server) asLoginError(err error) error { return LoginError(s.Name(), err) }

// LoginError turns a failure of server for want of a login (a start, or a
// request the server refused) into the request's NeedsLoginError; other
// errors are returned as they are.
func LoginError(server string, err error) error {
	var nl *NeedsLoginError
	if err == nil || errors.As(err, &nl) || !errors.Is(err, oauthclient.ErrNeedsLogin) {
		return err
	}
	e := &NeedsLoginError{Server: server}
	var ce *oauthclient.NeedsLoginError
	if errors.As(err, &ce) {
		e.Reason, e.Scope = ce.Reason, strings.Join(ce.Scope, " ")
	}
	return e
}

// OAuth is the state of the server's grant (never a token); ok is false
// for a server that has no login.
func (s *Server) OAuth() (info oauthclient.Info, ok bool) {
	if !oauthEligible(s.Config()) {
		return info, false
	}
	if g := s.f.currentGrant(s.Name()); g != nil {
		return g.Info(), true
	}
	return oauthclient.Info{State: oauthclient.StateNone}, true
}

// grantFor is the grant a login of the server uses, built if need be.
func (s *Server) grantFor(ctx context.Context) (*oauthclient.Grant, error) {
	sc := s.Config()
	if !oauthEligible(sc) {
		if sc.Kind != config.KindHTTP {
			return nil, fmt.Errorf("%w: server %s is not a remote server", ErrNoLogin, sc.Name)
		}
		return nil, fmt.Errorf("%w: server %s sends the Authorization header of its config", ErrNoLogin, sc.Name)
	}
	return s.f.grantOf(ctx, sc)
}

// Login begins an authorization code login of the server, whose redirect
// goes to redirectURI: the page to open, and the flow to complete.
func (s *Server) Login(ctx context.Context, redirectURI string) (*oauthclient.Flow, error) {
	g, err := s.grantFor(ctx)
	if err != nil {
		return nil, err
	}
	return g.Begin(ctx, redirectURI)
}

// CompleteLogin completes flow with the query of the redirect the browser
// was sent to: the code is exchanged for tokens, which are stored.
func (s *Server) CompleteLogin(ctx context.Context, flow string, callback url.Values) (oauthclient.Info, error) {
	g := s.f.currentGrant(s.Name())
	if g == nil {
		return oauthclient.Info{}, fmt.Errorf("%w: no login of server %s is under way", oauthclient.ErrUnknownFlow, s.Name())
	}
	needed := g.Info().State == oauthclient.StateNeedsLogin
	info, err := g.Complete(ctx, flow, callback)
	if err != nil {
		return oauthclient.Info{}, err
	}
	s.f.emit(NewEvent(s.Name(), "", event.LoggedInDetails{Issuer: info.Issuer, Subject: info.Subject, Scopes: strings.Join(info.Scopes, " "), Expires: info.Expiry}))
	s.afterLogin(needed)
	return *info, nil
}

// CancelLogin abandons flow.
func (s *Server) CancelLogin(flow string) {
	if g := s.f.currentGrant(s.Name()); g != nil {
		g.Cancel(flow)
	}
}

// Logout forgets the server's tokens, revoked first where the
// authorization server supports it: revoked reports it did, err why not.
// The server's running connection ends: its next request needs a login.
func (s *Server) Logout(ctx context.Context) (revoked bool, err error) {
	g, err := s.grantFor(ctx)
	if err != nil {
		return false, err
	}
	revoked, err = g.Logout(ctx)
	if s.Status().State == "running" || s.Status().State == "degraded" {
		_, _ = s.Restart(ctx)
	}
	return revoked, err
}

// serverAuth is a remote server's grant as its connections'
// backend.Authorizer: the grant is found at each connection's start
// (Connecting), its oauth secrets resolved then, and every request of
// the connection asks it for a token.
type serverAuth struct {
	f  *Fleet
	sc *config.Server
	g  atomic.Pointer[oauthclient.Grant]
}

// Connecting finds the grant of a connection about to start: an oauth
// secret that cannot be resolved fails the start, naming the reference.
func (a *serverAuth) Connecting(ctx context.Context) error {
	g, err := a.f.grantOf(ctx, a.sc)
	if err != nil {
		return err
	}
	a.g.Store(g)
	return nil
}

func (a *serverAuth) grant(ctx context.Context) (*oauthclient.Grant, error) {
	if g := a.g.Load(); g != nil {
		return g, nil
	}
	if err := a.Connecting(ctx); err != nil {
		return nil, err
	}
	return a.g.Load(), nil
}

// Token is the grant's access token; none while the grant holds no
// credentials and the server has not asked for any (it may need none:
// its first 401 tells).
func (a *serverAuth) Token(ctx context.Context) (string, error) {
	g, err := a.grant(ctx)
	if err != nil {
		return "", err
	}
	tok, err := g.Token(ctx)
	var nl *oauthclient.NeedsLoginError
	if errors.As(err, &nl) && nl.Reason == oauthclient.ReasonNoCredentials && g.Info().State != oauthclient.StateNeedsLogin {
		return "", nil
	}
	return tok, authError(a.sc.Name, err)
}

func (a *serverAuth) Challenged(ctx context.Context, used string, status int, h string) (bool, error) {
	g, err := a.grant(ctx)
	if err != nil {
		return false, err
	}
	retry, err := g.ChallengedToken(ctx, used, status, h)
	return retry, authError(a.sc.Name, err)
}

// Accepted tells the grant a request sent with token succeeded.
func (a *serverAuth) Accepted(token string) {
	if g := a.g.Load(); g != nil {
		g.Accepted(token)
	}
}

// GrantToken is the access token of remote server name's grant, for a
// peer replica that reaches the server with this replica's grant (the
// grant's owner: one replica refreshes it, so that rotated refresh
// tokens never invalidate each other).
func (f *Fleet) GrantToken(ctx context.Context, name string) (string, error) {
	srv := f.Get(name)
	if srv == nil || !oauthEligible(srv.Config()) {
		return "", fmt.Errorf("no remote server named %q here", name)
	}
	return (&serverAuth{f: f, sc: srv.Config()}).Token(ctx)
}

// GrantChallenged tells remote server name's grant that a peer's request
// sent with token used was answered status with the WWW-Authenticate
// header h: retry reports that a new token may be taken (GrantToken).
func (f *Fleet) GrantChallenged(ctx context.Context, name, used string, status int, h string) (bool, error) {
	srv := f.Get(name)
	if srv == nil || !oauthEligible(srv.Config()) {
		return false, fmt.Errorf("no remote server named %q here", name)
	}
	return (&serverAuth{f: f, sc: srv.Config()}).Challenged(ctx, used, status, h)
}

// authError is a grant's error as the backend classifies it: a login
// needed (NeedsLoginError, answered with the command to run), or a scope
// no login gets, both failures only the user can end
// (lifecycle.ErrAuthRequired); anything else (an authorization server
// that does not answer, a keyring busy) is the grant's error as it is,
// which a connection's start retries.
func authError(server string, err error) error {
	if errors.Is(err, oauthclient.ErrScopeRetryLimit) {
		return fmt.Errorf("%w: %w", lifecycle.ErrAuthRequired, err)
	}
	return LoginError(server, err)
}

// SecretStore is the store the servers' ${keyring:} references and OAuth
// records are kept in (Options.Secrets; nil when none).
func (f *Fleet) SecretStore() secret.Store { return f.opts.Secrets }

// recordStore keeps a server's OAuth record (registration and tokens) in
// the secret store — the OS keyring where there is one — under
// oauth/NAME, bound to what it was obtained for: the server's URL and
// client (recordBinding). A record of the server as it was configured
// before (another URL, another client) is not loaded: its tokens were
// issued for another resource, and must not be sent to this one.
type recordStore struct {
	s    secret.Store
	name string
	bind string
}

// storedRecord is the stored form of a record: the record, and what it is
// for.
type storedRecord struct {
	For    string `json:"for"`
	Record []byte `json:"record"`
}

// recordBinding identifies what a record is valid for, hashed (a URL may
// hold a key): the resource and the client that obtained its tokens.
func recordBinding(s oauthclient.Settings) string {
	h := sha256.New()
	for _, v := range []string{s.Resource, s.ClientID, s.ClientMetadataURL, s.Grant} {
		fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (r recordStore) Load(ctx context.Context) ([]byte, error) {
	v, err := r.s.Get(ctx, r.name)
	if errors.Is(err, secret.ErrNotFound) {
		return nil, oauthclient.ErrNoRecord
	}
	if err != nil {
		return nil, err
	}
	var sr storedRecord
	if json.Unmarshal([]byte(v), &sr) != nil || sr.For != r.bind || sr.Record == nil {
		// Another server's record as it was configured (another URL or
		// client), or not one mcpvisor wrote: not this one's tokens.
		return nil, oauthclient.ErrNoRecord
	}
	return sr.Record, nil
}

func (r recordStore) Save(ctx context.Context, data []byte) error {
	b, err := json.Marshal(storedRecord{For: r.bind, Record: data})
	if err != nil {
		return err
	}
	return r.s.Set(ctx, r.name, string(b))
}

func (r recordStore) Delete(ctx context.Context) error {
	if err := r.s.Delete(ctx, r.name); err != nil && !errors.Is(err, secret.ErrNotFound) {
		return err
	}
	return nil
}

// memRecord keeps a record in memory, for a fleet with no secret store:
// a login lasts as long as the process.
type memRecord struct {
	mu   sync.Mutex
	data []byte
}

func (m *memRecord) Load(context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return nil, oauthclient.ErrNoRecord
	}
	return m.data, nil
}

func (m *memRecord) Save(_ context.Context, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = append([]byte(nil), data...)
	return nil
}

func (m *memRecord) Delete(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = nil
	return nil
}
