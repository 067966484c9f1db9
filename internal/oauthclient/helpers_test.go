package oauthclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/oauthclient/oauthtest"
)

// memStore is a Store in memory, with a failure knob.
type memStore struct {
	mu       sync.Mutex
	data     []byte
	saves    int
	deletes  int
	failSave error
	onSave   func([]byte)
}

func (m *memStore) Load(context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return nil, ErrNoRecord
	}
	return bytes.Clone(m.data), nil
}

func (m *memStore) Save(_ context.Context, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failSave != nil {
		return m.failSave
	}
	if m.onSave != nil {
		m.onSave(b)
	}
	m.data = bytes.Clone(b)
	m.saves++
	return nil
}

func (m *memStore) Delete(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deletes++
	if m.data == nil {
		return ErrNoRecord
	}
	m.data = nil
	return nil
}

func (m *memStore) get() ([]byte, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return bytes.Clone(m.data), m.saves
}

// syncBuf is a log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	t     *testing.T
	srv   *oauthtest.Server
	store *memStore
	g     *Grant
	logs  *syncBuf
}

const redirectURI = "http://127.0.0.1:53682/callback"

func newFixture(t *testing.T, o oauthtest.Options, s Settings) *fixture {
	t.Helper()
	srv := oauthtest.New(t, o)
	return newFixtureFor(t, srv, s)
}

func newFixtureFor(t *testing.T, srv *oauthtest.Server, s Settings) *fixture {
	t.Helper()
	if s.Resource == "" {
		s.Resource = srv.URL
	}
	if s.Timeout == 0 {
		s.Timeout = 3 * time.Second
	}
	f := &fixture{t: t, srv: srv, store: &memStore{}, logs: &syncBuf{}}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.g = New(s, f.store, &http.Client{}, log)
	t.Cleanup(func() { f.noLeaks(f.logs.String(), "logs") })
	return f
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// get requests the protected resource with a token ("" for none).
func (f *fixture) get(tok string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// challenge makes an unauthenticated request and reports its 401 to the Grant.
func (f *fixture) challenge() error {
	f.t.Helper()
	st, www := f.get("")
	if st != http.StatusUnauthorized {
		f.t.Fatalf("resource answered %d without a token, want 401", st)
	}
	retry, err := f.g.Challenged(ctxT(f.t), st, www)
	if retry {
		f.t.Fatal("retry after a 401 without a record")
	}
	return err
}

// login runs Begin, the approval and Complete.
func (f *fixture) login() (*Info, error) {
	f.t.Helper()
	ctx := ctxT(f.t)
	fl, err := f.g.Begin(ctx, redirectURI)
	if err != nil {
		return nil, err
	}
	cb, err := f.srv.Approve(fl.AuthURL)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.g.Complete(ctx, fl.ID, cb)
}

func (f *fixture) mustLogin() *Info {
	f.t.Helper()
	info, err := f.login()
	if err != nil {
		f.t.Fatalf("login: %v", err)
	}
	return info
}

// noLeaks fails if s holds an issued token, a code, a secret or a verifier.
func (f *fixture) noLeaks(s, what string) {
	f.t.Helper()
	for _, tok := range f.srv.IssuedTokens() {
		if strings.Contains(s, tok) {
			f.t.Errorf("%s hold an issued token", what)
		}
	}
	for _, p := range []string{"tok-", "ref-", "code-", "secret-"} {
		if strings.Contains(s, p) {
			f.t.Errorf("%s hold something like %q…: %s", what, p, s)
		}
	}
	f.g.mu.Lock()
	for _, fl := range f.g.flows {
		if strings.Contains(s, fl.verifier) {
			f.t.Errorf("%s hold a PKCE verifier", what)
		}
	}
	f.g.mu.Unlock()
}

func (f *fixture) stored() *record {
	f.t.Helper()
	b, _ := f.store.get()
	if b == nil {
		return nil
	}
	r := &record{}
	if err := json.Unmarshal(b, r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

func wantNeedsLogin(t *testing.T, err error, reason string) *NeedsLoginError {
	t.Helper()
	var nl *NeedsLoginError
	if !errors.Is(err, ErrNeedsLogin) || !errors.As(err, &nl) {
		t.Fatalf("err = %v, want needs login (%s)", err, reason)
	}
	if nl.Reason != reason {
		t.Fatalf("reason = %q, want %q", nl.Reason, reason)
	}
	return nl
}

func lastAuthorize(t *testing.T, srv *oauthtest.Server) url.Values {
	t.Helper()
	a := srv.Authorizations()
	if len(a) == 0 {
		t.Fatal("no authorization request")
	}
	return a[len(a)-1]
}
