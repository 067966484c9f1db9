package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// secretFleet runs servers (JSON of mcpServers' members, $FIXTURE the
// fixture server) for real, with store as its secret store.
type secretFleet struct {
	f      *Fleet
	logs   *logbuf.Registry
	mu     sync.Mutex
	events []Event
}

func newSecretFleet(t *testing.T, servers string, store secret.Store, env map[string]string) *secretFleet {
	t.Helper()
	servers = strings.ReplaceAll(servers, "$FIXTURE", testserver.Build(t))
	cfg, err := config.Parse([]byte(`{"defaults":{"stop":{"stdinWait":"300ms","termWait":"300ms"}},"mcpServers":{`+servers+`}}`), "test.json",
		config.LoadOptions{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := proc.Open(proc.Options{NoCgroup: true, NoPIDNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	sf := &secretFleet{logs: logbuf.NewRegistry(logbuf.Options{})}
	sf.f, err = New(cfg, Options{Runtime: rt, Logger: discardLogger(), Secrets: store, Logs: sf.logs,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		OnEvent: func(e Event) {
			recordEvent(e)
			sf.mu.Lock()
			sf.events = append(sf.events, e)
			sf.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sf.f.Close(ctx)
		_ = rt.Close(ctx)
	})
	return sf
}

// shown is everything the fleet shows of server: its status, detail and
// events, as JSON.
func (sf *secretFleet) shown(t *testing.T, name string) string {
	s := sf.f.Get(name)
	sf.mu.Lock()
	evs := append([]Event(nil), sf.events...)
	sf.mu.Unlock()
	data, err := json.Marshal([]any{s.Status(), s.Detail(), evs})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// readLog waits (bounded) for the fixture's method log to name method.
func readLog(t *testing.T, path, method string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if strings.Contains(string(data), method) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %s: %q", path, method, data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type memStore struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *memStore) Get(_ context.Context, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[name]
	if !ok {
		return "", secret.ErrNotFound
	}
	return v, nil
}
func (s *memStore) Set(_ context.Context, name, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[name] = v
	return nil
}
func (s *memStore) Delete(context.Context, string) error   { return nil }
func (s *memStore) List(context.Context) ([]string, error) { return nil, nil }
func (s *memStore) Backend() string                        { return "test keyring" }

// References in a stdio server's env and args reach its process, resolved
// at each start — a changed secret at the next one —, and their values
// are in nothing the fleet shows.
func TestSecretReferencesReachTheProcess(t *testing.T) {
	dir := t.TempDir()
	envLog := filepath.Join(dir, "env-secret-log-path")
	argLog := filepath.Join(dir, "arg-secret-log-path")
	argLog2 := filepath.Join(dir, "arg-secret-log-path-2")
	ref := filepath.Join(dir, "ref")
	if err := os.WriteFile(ref, []byte(envLog+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := &memStore{m: map[string]string{"fixture.log": argLog}}
	sf := newSecretFleet(t, `"s":{"command":"$FIXTURE","idleTimeout":"0",
		"env":{"FIXTURE_METHOD_LOG":"${file:`+ref+`}"},
		"args":["-strict-init-log","${keyring:fixture.log}"]}`, store, nil)
	s := sf.f.Get("s")
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Fatal(err)
	}
	readLog(t, envLog, "initialize") // the env's file reference reached it
	sc := s.Config()
	if sc.Env["FIXTURE_METHOD_LOG"] != "${file:"+ref+"}" || sc.Args[1] != "${keyring:fixture.log}" {
		t.Fatalf("config holds %q %q, want the references", sc.Env, sc.Args)
	}
	// The arg reached it too: the fixture's -strict-init-log with
	// -strict-init unset logs nothing, but the process was given it:
	// its command line.
	pid := s.Status().PID
	if pid == 0 {
		t.Fatal("no pid")
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), argLog) {
		t.Fatalf("cmdline %q, %v; want the keyring value", cmdline, err)
	}
	// What the server writes of a value to stderr is kept redacted.
	l, err := s.Acquire(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	conn := l.in.current().(*backend.Conn)
	_, err = conn.Call(t.Context(), "tools/call", json.RawMessage(`{"name":"stderr","arguments":{"text":"my log is `+argLog+` and `+envLog+`"}}`))
	l.Release()
	if err != nil {
		t.Fatal(err)
	}
	buf := sf.logs.Lookup("s")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var lines []string
		for _, e := range buf.Tail(100).Entries {
			lines = append(lines, e.Line)
		}
		all := strings.Join(lines, "\n")
		if strings.Contains(all, "my log is") {
			if !strings.Contains(all, "my log is [redacted] and [redacted]") {
				t.Fatalf("stderr kept as %q", all)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stderr line never came: %q", all)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A changed secret applies at the next start.
	_ = store.Set(t.Context(), "fixture.log", argLog2)
	if _, err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Fatal(err)
	}
	cmdline, _ = os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.Status().PID), "cmdline"))
	if !strings.Contains(string(cmdline), argLog2) {
		t.Fatalf("after restart, cmdline %q; want the new keyring value", cmdline)
	}
	shown := sf.shown(t, "s")
	for _, v := range []string{envLog, argLog, argLog2} {
		if strings.Contains(shown, v) {
			t.Errorf("the fleet shows the value %q: %s", v, shown)
		}
	}
}

// A reference that does not resolve fails the start, naming the reference,
// permanently (no crash loop), with nothing spawned.
func TestSecretReferenceFailsTheStart(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing-token")
	sf := newSecretFleet(t, `"s":{"command":"$FIXTURE","idleTimeout":"0","env":{"TOKEN":"${file:`+missing+`}"}},
		"k":{"command":"$FIXTURE","idleTimeout":"0","args":["${keyring:nope}"]},
		"h":{"url":"http://127.0.0.1:1/mcp","headers":{"Authorization":"Bearer ${env:UNSET_TOKEN}"}}`,
		&memStore{m: map[string]string{}}, nil)
	for name, want := range map[string]string{
		"s": "${file:" + missing + "} could not be resolved: no such file",
		"k": "${keyring:nope} could not be resolved: not in the keyring (test keyring); set it with `mcpvisor secret set nope`",
		"h": "${env:UNSET_TOKEN} could not be resolved: environment variable UNSET_TOKEN is not set",
	} {
		s := sf.f.Get(name)
		_, err := use(s.Acquire(t.Context(), ""))
		var se *SecretError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &se) || !lifecycle.IsPermanent(err) {
			t.Errorf("%s: Acquire: %v; want a permanent error with %q", name, err, want)
			continue
		}
		st := s.Status()
		if st.State != "failed" || !strings.Contains(st.LastError, want) {
			t.Errorf("%s: state %q, last error %q", name, st.State, st.LastError)
		}
		if st.PID != 0 || st.Spawns != 0 {
			t.Errorf("%s: spawned pid %d (%d spawns)", name, st.PID, st.Spawns)
		}
	}
}

// A remote server's header references resolve at each connection and
// reach its requests; its oauth secrets resolve for its OAuth client.
func TestSecretReferencesInHeadersAndOAuth(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	dir := t.TempDir()
	key := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := &memStore{m: map[string]string{"api": "api-key-one", "client": "client-secret-one"}}
	sf := newSecretFleet(t, `"h":{"url":"`+srv.URL+`/mcp","idleTimeout":"0","headers":{"X-Api-Key":"${keyring:api}"}},
		"o":{"url":"`+srv.URL+`/mcp","oauth":{"clientId":"c","clientSecret":"${keyring:client}","tokenEndpointAuthMethod":"client_secret_basic"}},
		"j":{"url":"`+srv.URL+`/mcp","oauth":{"clientId":"c","privateKey":"${file:`+key+`}"}}`, store, nil)
	s := sf.f.Get("h")
	_, _ = use(s.Acquire(t.Context(), ""))
	_ = store.Set(t.Context(), "api", "api-key-two")
	_, _ = s.Restart(t.Context())
	_, _ = use(s.Acquire(t.Context(), ""))
	mu.Lock()
	seen := strings.Join(got, ",")
	mu.Unlock()
	if !strings.HasPrefix(seen, "api-key-one") || !strings.Contains(seen, "api-key-two") {
		t.Errorf("the server got X-Api-Key %q, want api-key-one then api-key-two", seen)
	}
	if shown := sf.shown(t, "h"); strings.Contains(shown, "api-key-") {
		t.Errorf("the fleet shows a header value: %s", shown)
	}
	cs, pk, err := sf.f.resolveOAuthSecrets(t.Context(), sf.f.Get("o").Config())
	if err != nil || cs != "client-secret-one" || pk != "" {
		t.Errorf("o's oauth secrets %q %q, %v", cs, pk, err)
	}
	cs, pk, err = sf.f.resolveOAuthSecrets(t.Context(), sf.f.Get("j").Config())
	if err != nil || cs != "" || !strings.HasSuffix(pk, "-----END PRIVATE KEY-----") {
		t.Errorf("j's oauth secrets %q %q, %v", cs, pk, err)
	}
	store.mu.Lock()
	delete(store.m, "client")
	store.mu.Unlock()
	if _, _, err := sf.f.resolveOAuthSecrets(t.Context(), sf.f.Get("o").Config()); err == nil || !strings.Contains(err.Error(), "${keyring:client} could not be resolved") {
		t.Errorf("a missing client secret: %v", err)
	}
}

// The values a running instance's references resolved to stay hidden
// after a reload that keeps the server (its config object is replaced):
// a failure of the instance launched before it, quoting a value, is
// redacted in its status, its events and its history.
func TestResolvedValuesRedactedAfterReload(t *testing.T) {
	const value = "tag-secret-value-123"
	ref := filepath.Join(t.TempDir(), "tag")
	if err := os.WriteFile(ref, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := `"s":{"command":"$FIXTURE","idleTimeout":"0","env":{"FIXTURE_TAG":"${file:` + ref + `}"}}`
	sf := newSecretFleet(t, servers, &memStore{m: map[string]string{}}, nil)
	s := sf.f.Get("s")
	if _, err := use(s.Acquire(t.Context(), "")); err != nil {
		t.Fatal(err)
	}
	in := s.sharedIn()
	pid := s.Status().PID
	cfg, err := config.Parse([]byte(`{"defaults":{"stop":{"stdinWait":"300ms","termWait":"300ms"}},"mcpServers":{`+
		strings.ReplaceAll(servers, "$FIXTURE", testserver.Build(t))+`}}`), "test.json",
		config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	before := s.Config()
	res, err := sf.f.Reload(t.Context(), cfg, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Config() == before || len(res.Servers) != 1 || res.Servers[0].Action != config.ActionUnchanged {
		t.Fatalf("the reload did not keep the server with a new config: %+v", res.Servers)
	}
	if sf.f.Get("s").sharedIn() != in {
		t.Fatal("the reload replaced the instance")
	}
	// The instance launched before the reload fails, quoting its value.
	fail := errors.New("server s: the upstream refused tag " + value)
	in.servingExit(fail, pid)
	in.failed(fail)
	shown := sf.shown(t, "s")
	if strings.Contains(shown, value) {
		t.Errorf("after a reload, the fleet shows the resolved value: %s", shown)
	}
	if !strings.Contains(shown, "the upstream refused tag [redacted]") {
		t.Errorf("the failure is not shown redacted: %s", shown)
	}
	if st := s.Status(); !strings.Contains(st.LastError, "refused tag [redacted]") {
		t.Errorf("last error %q", st.LastError)
	}
}
