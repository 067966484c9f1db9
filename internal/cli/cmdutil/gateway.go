package cmdutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
)

// The gateway login: mcpvisor login --gateway logs the CLI itself in at
// the issuer of a serve with team identity (authorization code with
// PKCE, the resource the gateway's public URL, the admin scope) and
// keeps the tokens in the secret store (the OS keyring, else the state
// directory's file) under a reserved name per serve address; the
// commands that reach serve send its access token, refreshed when due.

// GatewayPrefix starts the names of the gateway logins in the secret
// store: reserved (secret.OAuthPrefix), and apart from serve's records
// of remote servers (oauth/NAME, a server name never starts with ".").
const GatewayPrefix = secret.OAuthPrefix + ".gateway/"

// GatewaySecretName is the secret store's name of the gateway login for
// the serve at addr.
func GatewaySecretName(addr string) string {
	var b strings.Builder
	b.WriteString(GatewayPrefix)
	for _, r := range strings.TrimSuffix(addr, "/") {
		switch {
		case r == '.', r == '_', r == '-', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// GatewayLogin is what the store keeps of a gateway login: the gateway's
// resource (its public URL), the client and scopes the login used, and
// the OAuth client's record (registrations and tokens), opaque.
type GatewayLogin struct {
	Resource string   `json:"resource"`
	ClientID string   `json:"clientId,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	Record   []byte   `json:"record,omitempty"`
}

// String never shows the record (it holds the tokens).
func (l GatewayLogin) String() string {
	return fmt.Sprintf("cmdutil.GatewayLogin{Resource:%q ClientID:%q Scopes:%q record:%t}", l.Resource, l.ClientID, l.Scopes, len(l.Record) > 0)
}

// GoString is String, so %#v shows no token either.
func (l GatewayLogin) GoString() string { return l.String() }

// GatewayStore is the oauthclient.Store of one gateway login: its record
// inside the GatewayLogin kept under Name.
type GatewayStore struct {
	Secrets secret.Store
	Name    string
	Login   GatewayLogin
}

// Load returns the record, or oauthclient.ErrNoRecord.
func (s *GatewayStore) Load(ctx context.Context) ([]byte, error) {
	l, err := LoadGatewayLogin(ctx, s.Secrets, s.Name)
	if err != nil {
		return nil, err
	}
	if l == nil || l.Resource != s.Login.Resource || len(l.Record) == 0 {
		return nil, oauthclient.ErrNoRecord
	}
	return l.Record, nil
}

// Save keeps data as the record, with the login's resource, client and
// scopes.
func (s *GatewayStore) Save(ctx context.Context, data []byte) error {
	l := s.Login
	l.Record = data
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return s.Secrets.Set(ctx, s.Name, string(b))
}

// Delete forgets the login.
func (s *GatewayStore) Delete(ctx context.Context) error {
	if err := s.Secrets.Delete(ctx, s.Name); err != nil && !errors.Is(err, secret.ErrNotFound) {
		return err
	}
	return nil
}

// LoadGatewayLogin reads the login kept under name: nil when there is
// none.
func LoadGatewayLogin(ctx context.Context, store secret.Store, name string) (*GatewayLogin, error) {
	v, err := store.Get(ctx, name)
	if errors.Is(err, secret.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the gateway login from %s: %w", store.Backend(), err)
	}
	var l GatewayLogin
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		return nil, fmt.Errorf("the gateway login in %s is not readable (log in again with mcpvisor login --gateway)", store.Backend())
	}
	return &l, nil
}

// GatewayGrant is the OAuth client of login l kept in store under name.
func GatewayGrant(store secret.Store, name string, l GatewayLogin) *oauthclient.Grant {
	return oauthclient.New(oauthclient.Settings{Resource: l.Resource, ClientID: l.ClientID, Scopes: l.Scopes, ClientName: "mcpvisor CLI"},
		&GatewayStore{Secrets: store, Name: name, Login: l}, nil, nil)
}

// The commands that reach serve send the gateway login's token when they
// are given no other.
func init() { adminclient.StoredToken = StoredGatewayToken }

// OpenSecrets opens the CLI's secret store (a variable for tests).
var OpenSecrets = func() secret.Store { return secret.Open(userdirs.DefaultStateDir()) }

// gatewayTokens caches, per process, the store and each address's grant,
// so that a command's many requests open the store and refresh once.
var gatewayTokens struct {
	mu     sync.Mutex
	store  secret.Store
	grants map[string]*oauthclient.Grant
}

// StoredGatewayToken is the access token of the gateway login for addr,
// refreshed when due; "" when there is no such login. A login that can no
// longer be refreshed is an error that says to log in again. It is
// adminclient.StoredToken.
func StoredGatewayToken(ctx context.Context, addr string) (string, error) {
	name := GatewaySecretName(addr)
	gatewayTokens.mu.Lock()
	if gatewayTokens.store == nil {
		gatewayTokens.store = OpenSecrets()
		gatewayTokens.grants = map[string]*oauthclient.Grant{}
	}
	store, g := gatewayTokens.store, gatewayTokens.grants[name]
	gatewayTokens.mu.Unlock()
	if g == nil {
		l, err := LoadGatewayLogin(ctx, store, name)
		if err != nil || l == nil {
			return "", err
		}
		g = GatewayGrant(store, name, *l)
		gatewayTokens.mu.Lock()
		gatewayTokens.grants[name] = g
		gatewayTokens.mu.Unlock()
	}
	tok, err := g.Token(ctx)
	if err != nil {
		var nl *oauthclient.NeedsLoginError
		if errors.As(err, &nl) {
			return "", fmt.Errorf("the gateway login for %s needs renewing (%s): run mcpvisor login --gateway --addr %s", addr, nl.Reason, addr)
		}
		return "", fmt.Errorf("the gateway login for %s: %w", addr, err)
	}
	return tok, nil
}

// ResetGatewayTokens forgets the cached store and grants (tests, and a
// login that just replaced one).
func ResetGatewayTokens() {
	gatewayTokens.mu.Lock()
	gatewayTokens.store, gatewayTokens.grants = nil, nil
	gatewayTokens.mu.Unlock()
}
