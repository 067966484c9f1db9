package clients

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// setStore is a secret store of the test's: Set records, or fails for
// the name failOn.
type setStore struct {
	set    map[string]string
	order  []string
	failOn string
}

func (s *setStore) Set(_ context.Context, name, value string) error {
	if name == s.failOn {
		return errors.New("the keyring is locked")
	}
	if s.set == nil {
		s.set = map[string]string{}
	}
	s.set[name] = value
	s.order = append(s.order, name)
	return nil
}

func (s *setStore) Get(_ context.Context, name string) (string, error) {
	if v, ok := s.set[name]; ok {
		return v, nil
	}
	return "", secret.ErrNotFound
}

// fullStore can also remove, as internal/secret's stores can.
type fullStore struct{ *setStore }

func (s fullStore) Delete(_ context.Context, name string) error {
	if _, ok := s.set[name]; !ok {
		return errors.New("not found")
	}
	delete(s.set, name)
	return nil
}

// The secrets of secretsClient: what import must never write into
// mcpvisor's config with --move-secrets, nor show.
const (
	ghToken    = "ghp_0123456789abcdefABCDEF0123456789abcd"
	asanaAuth  = "sk-live-0123456789abcdefghij"
	apiKeyArg  = "sk-proj-abcdefghij0123456789ABCD"
	staticSecr = "client-s3cr3t-value"
	urlSecret  = "u0123456789abcdefURLSECRET"
)

// secretsClient writes a client file (mcpServers, named on the command
// line) with literal secrets in env, mcp-remote headers, args and an
// mcp-remote static client, and a reference that must stay.
func secretsClient(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client.json")
	data := `{"mcpServers": {
  "github": {"command": "docker", "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
             "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "` + ghToken + `", "LOG_LEVEL": "debug"}},
  "asana": {"command": "npx", "args": ["-y", "mcp-remote", "https://mcp.asana.com/mcp", "--header", "Authorization: Bearer ${AUTH}"],
            "env": {"AUTH": "` + asanaAuth + `"}},
  "search": {"command": "npx", "args": ["-y", "search-mcp", "--api-key", "` + apiKeyArg + `"]},
  "linear": {"command": "npx", "args": ["-y", "mcp-remote", "https://mcp.linear.app/mcp", "--static-oauth-client-info", "{\"client_id\":\"lin\",\"client_secret\":\"` + staticSecr + `\"}"]},
  "ref": {"command": "npx", "args": ["-y", "ref-mcp"], "env": {"REF_TOKEN": "${REF_TOKEN}"}},
  "q": {"url": "https://q.example/mcp?api_key=` + urlSecret + `"}
}}
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var allSecrets = []string{ghToken, asanaAuth, apiKeyArg, staticSecr}

// import --move-secrets stores each literal secret under its derived
// name and writes references in its place: the config holds none, the
// output shows none, references stay; mcp-remote entries become remote
// servers; importing again adds nothing (the moved entries are the same
// servers).
func TestImportMoveSecrets(t *testing.T) {
	client := secretsClient(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	store := &setStore{}
	io, out, errOut := streams()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{client}, Config: cfg, MoveSecrets: true, Secrets: store}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range allSecrets {
		if strings.Contains(string(data), s) || strings.Contains(out.String()+errOut.String(), s) {
			t.Errorf("%s is in the config or the output:\n%s\n%s", s, data, out)
		}
	}
	want := map[string]string{
		"github.GITHUB_PERSONAL_ACCESS_TOKEN": ghToken,
		"asana.header.Authorization":          asanaAuth,
		"search.arg3":                         apiKeyArg,
		"linear.oauth.clientSecret":           staticSecr,
	}
	if len(store.set) != len(want) {
		t.Errorf("stored %v, want %v", store.order, want)
	}
	for name, v := range want {
		if store.set[name] != v {
			t.Errorf("secret %s: %q stored, want %q", name, store.set[name], v)
		}
		if !strings.Contains(string(data), "${keyring:"+name+"}") {
			t.Errorf("no reference to %s in\n%s", name, data)
		}
	}
	for _, w := range []string{`"Authorization": "Bearer ${keyring:asana.header.Authorization}"`, `"url": "https://mcp.asana.com/mcp"`,
		`"REF_TOKEN": "${REF_TOKEN}"`, `"LOG_LEVEL": "debug"`, `"clientId": "lin"`} {
		if !strings.Contains(string(data), w) {
			t.Errorf("the config lacks %s:\n%s", w, data)
		}
	}
	for _, w := range []string{"mcpServers.asana: taken over as a remote server (saves one Node process)",
		"mcpServers.linear: mcpvisor signs in to it now, not the client: log in with `mcpvisor login linear`",
		"stored github.GITHUB_PERSONAL_ACCESS_TOKEN, asana.header.Authorization, search.arg3, linear.oauth.clientSecret in the secret store"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out.String(), "`mcpvisor login asana`") {
		t.Errorf("asana has an Authorization header: mcpvisor does not sign in to it:\n%s", out)
	}

	out.Reset()
	n := len(store.order)
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{client}, Config: cfg, MoveSecrets: true, Secrets: store}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nothing to add") || len(store.order) != n {
		t.Errorf("importing again: stored %v\n%s", store.order[n:], out)
	}

	// A store that holds other values (another account's tokens): the
	// entries holding secrets are other servers, added as such.
	out.Reset()
	other := &setStore{set: map[string]string{}}
	for k := range store.set {
		other.set[k] = "another-account-value"
	}
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{client}, Config: cfg, MoveSecrets: true, Secrets: other, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `mcpServers.github: added as "github-client"`) || strings.Contains(out.String(), "mcpServers.ref: added") {
		t.Errorf("importing against other stored values:\n%s", out)
	}
}

// A dry run stores nothing and shows the references, never a value.
func TestImportMoveSecretsDryRun(t *testing.T) {
	client := secretsClient(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	store := &setStore{}
	io, out, _ := streams()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{client}, Config: cfg, MoveSecrets: true, Secrets: store, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if len(store.set) != 0 {
		t.Errorf("a dry run stored %v", store.order)
	}
	if _, err := os.Stat(cfg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dry run wrote the config: %v", err)
	}
	for _, s := range allSecrets {
		if strings.Contains(out.String(), s) {
			t.Errorf("the dry run shows %s:\n%s", s, out)
		}
	}
	if !strings.Contains(out.String(), "${keyring:github.GITHUB_PERSONAL_ACCESS_TOKEN}") || !strings.Contains(out.String(), "would store github.GITHUB_PERSONAL_ACCESS_TOKEN") {
		t.Errorf("the dry run does not show the references:\n%s", out)
	}
}

// A secret that cannot be stored stops the import before the config is
// written, naming the secret and never its value; the secrets stored
// before it are removed again when the store can, else named.
func TestImportMoveSecretsStoreFails(t *testing.T) {
	for _, deletes := range []bool{true, false} {
		client := secretsClient(t)
		cfg := filepath.Join(t.TempDir(), "config.json")
		old := []byte("{\"mcpServers\": {}}\n")
		if err := os.WriteFile(cfg, old, 0o600); err != nil {
			t.Fatal(err)
		}
		store := &setStore{failOn: "search.arg3"} // the third
		o := &ImportOptions{Sources: []string{client}, Config: cfg, MoveSecrets: true, Secrets: store}
		if deletes {
			o.Secrets = fullStore{store}
		}
		io, out, _ := streams()
		o.IO = io
		err := RunImport(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), "storing secret search.arg3 (args[3])") || !strings.Contains(err.Error(), "the keyring is locked") ||
			!strings.Contains(err.Error(), "is left as it was") {
			t.Fatalf("deletes=%v: %v", deletes, err)
		}
		for _, s := range allSecrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("the error shows %s: %v", s, err)
			}
		}
		if got, _ := os.ReadFile(cfg); !bytes.Equal(got, old) {
			t.Errorf("the config was written:\n%s", got)
		}
		if strings.Contains(out.String(), "written") {
			t.Errorf("said written: %s", out)
		}
		if deletes {
			if len(store.set) != 0 || !strings.Contains(err.Error(), "github.GITHUB_PERSONAL_ACCESS_TOKEN, asana.header.Authorization removed again") {
				t.Errorf("left in the store: %v; %v", store.set, err)
			}
		} else if len(store.set) != 2 || !strings.Contains(err.Error(), "github.GITHUB_PERSONAL_ACCESS_TOKEN, asana.header.Authorization stay in the secret store") {
			t.Errorf("store %v; %v", store.set, err)
		}
	}

}

// With no store given, --move-secrets stores in the one serve reads: the
// config's state directory's (here, with no session bus, its 0600 file).
func TestImportMoveSecretsOpensServesStore(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	io, _, _ := streams()
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{secretsClient(t)}, Config: cfg, MoveSecrets: true}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(state, "mcpvisor", "secrets.json"))
	if err != nil || !strings.Contains(string(data), "github.GITHUB_PERSONAL_ACCESS_TOKEN") {
		t.Errorf("the secret store holds %q (%v)", data, err)
	}
	if merged, _ := os.ReadFile(cfg); !strings.Contains(string(merged), "${keyring:github.GITHUB_PERSONAL_ACCESS_TOKEN}") {
		t.Errorf("the config holds no reference:\n%s", merged)
	}
}

// Without --move-secrets, import copies the literal secrets, warning of
// each entry's fields (never their values) and suggesting the flag.
func TestImportWarnsOfLiteralSecrets(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.json")
	io, out, _ := streams()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{secretsClient(t)}, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"mcpServers.github: warning: copies literal secrets into mcpvisor's config (env.GITHUB_PERSONAL_ACCESS_TOKEN); pass --move-secrets",
		"mcpServers.asana: warning: copies literal secrets into mcpvisor's config (headers.Authorization)",
		"mcpServers.search: warning: copies literal secrets into mcpvisor's config (args[3])",
		"mcpServers.linear: warning: copies literal secrets into mcpvisor's config (oauth.clientSecret)",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
	if !strings.Contains(out.String(), "mcpServers.q: warning: a URL holds a secret (url)") {
		t.Errorf("no warning of the URL's secret:\n%s", out)
	}
	if strings.Contains(out.String(), "mcpServers.ref: warning") {
		t.Errorf("a reference was taken for a secret:\n%s", out)
	}
	for _, s := range allSecrets {
		if strings.Contains(out.String(), s) {
			t.Errorf("the output shows %s", s)
		}
	}
	if data, _ := os.ReadFile(cfg); !strings.Contains(string(data), ghToken) {
		t.Errorf("the secret was not copied:\n%s", data)
	}
}

// Every launcher internal/launch knows runs mcp-remote as the remote
// server it reaches (the real parser, as import and install-client are
// given it); other packages and launcher forms it does not understand
// stay local.
func TestImportMCPRemoteLaunchers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "client.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {
  "npx": {"command": "/usr/local/bin/npx", "args": ["--yes", "mcp-remote@0.1.29", "https://a.example/mcp"]},
  "npxp": {"command": "npx", "args": ["-y", "-p", "mcp-remote@0.1", "mcp-remote", "https://b.example/sse"]},
  "npmexec": {"command": "npm", "args": ["exec", "--yes", "--", "mcp-remote", "https://c.example/mcp"]},
  "pnpm": {"command": "pnpm", "args": ["dlx", "mcp-remote", "https://d.example/mcp"]},
  "bunx": {"command": "bunx", "args": ["mcp-remote", "https://e.example/mcp"]},
  "yarn": {"command": "yarn.cmd", "args": ["dlx", "mcp-remote", "https://f.example/mcp", "--transport", "sse-only"]},
  "other": {"command": "npx", "args": ["-y", "mcp-remote-other", "https://g.example/mcp"]},
  "shell": {"command": "pnpm", "args": ["dlx", "-c", "mcp-remote https://h.example/mcp"]}
}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	io, out, _ := streams()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{path}, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(cfg)
	for _, w := range []string{`"npx": {"url": "https://a.example/mcp"}`, `"npxp": {"url": "https://b.example/sse", "type": "sse"}`,
		`"npmexec": {"url": "https://c.example/mcp"}`, `"pnpm": {"url": "https://d.example/mcp"}`, `"bunx": {"url": "https://e.example/mcp"}`,
		`"yarn": {"url": "https://f.example/mcp", "type": "sse"}`, `"mcp-remote-other"`} {
		if !strings.Contains(oneLine(data), w) {
			t.Errorf("no %s in\n%s", w, data)
		}
	}
	if n := strings.Count(out.String(), "taken over as a remote server (saves one Node process)"); n != 6 {
		t.Errorf("%d taken over, want 6:\n%s", n, out)
	}
	if !strings.Contains(out.String(), "mcpServers.shell.args: runs mcp-remote, but not taken over as a remote server: pnpm dlx command line not understood") {
		t.Errorf("the shell form:\n%s", out)
	}
}

// oneLine squeezes a JSON text's blanks: {"a": 1}.
func oneLine(data []byte) string {
	s := regexp.MustCompile(`\s+`).ReplaceAllString(string(data), " ")
	return strings.NewReplacer("{ ", "{", " }", "}", "[ ", "[", " ]", "]").Replace(s)
}

// The golden files of internal/clientcfg, read there with a stand-in for
// internal/launch's parser, are read alike with the real one: the same
// entries are taken over from mcp-remote.
func TestGoldenFilesWithTheRealLauncherParser(t *testing.T) {
	golden, _ := filepath.Glob("../../clientcfg/testdata/*.read.golden")
	if len(golden) < 7 {
		t.Fatalf("golden files: %v", golden)
	}
	for _, g := range golden {
		file := strings.TrimSuffix(g, ".read.golden")
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		src, err := importSources([]string{file}, new(bytes.Buffer))
		if err != nil {
			t.Fatal(err)
		}
		f, err := readSource(src[0])
		if err != nil {
			t.Fatal(err)
		}
		var got, exp []string
		for _, s := range f.Servers {
			for _, n := range s.Notes {
				if strings.Contains(n.Msg, "mcp-remote") || strings.Contains(n.Msg, "Node process") {
					got = append(got, n.String())
				}
			}
		}
		for _, l := range strings.Split(string(want), "\n") {
			if n, ok := strings.CutPrefix(l, "  note "); ok && (strings.Contains(n, "mcp-remote") || strings.Contains(n, "Node process")) {
				exp = append(exp, n)
			}
		}
		// the stand-in understands less: its "not understood" aside
		if !slices.Equal(got, exp) {
			t.Errorf("%s:\n%s\nwant (as the golden file):\n%s", filepath.Base(file), strings.Join(got, "\n"), strings.Join(exp, "\n"))
		}
	}
}

// Codex's literal bearer_token is a header secret like any other: moved
// with --move-secrets (its scheme kept, its $ literal in the value
// stored), while bearer_token_env_var stays a reference.
func TestImportCodexTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(`[mcp_servers.lit]
url = "https://lit.example/mcp"
bearer_token = "tok$en-0123"

[mcp_servers.env]
url = "https://env.example/mcp"
bearer_token_env_var = "ENV_TOKEN"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	store := &setStore{}
	io, out, _ := streams()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{path}, Config: cfg, MoveSecrets: true, Secrets: store}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(cfg)
	if !strings.Contains(string(data), `"Authorization": "Bearer ${keyring:lit.header.Authorization}"`) ||
		!strings.Contains(string(data), `"Authorization": "Bearer ${ENV_TOKEN}"`) || strings.Contains(string(data), "tok$") {
		t.Errorf("config:\n%s", data)
	}
	if len(store.set) != 1 || store.set["lit.header.Authorization"] != "tok$en-0123" {
		t.Errorf("stored %v", store.set)
	}
	if strings.Contains(out.String(), "mcpvisor login") {
		t.Errorf("servers with an Authorization header are not signed in to:\n%s", out)
	}
}

// install-client takes a client's entry over as mcpvisor's server only
// when the secret it holds is the one mcpvisor's server holds by
// reference: an entry with another account's token is another server,
// which mcpvisor's config lacks.
func TestInstallComparesStoredSecrets(t *testing.T) {
	const tokA, tokB = "ghp_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "ghp_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	f := newInstallFixture(t)
	if err := os.WriteFile(f.config, []byte(`{"mcpServers": {
  "gh": {"url": "https://api.example/mcp", "headers": {"Authorization": "Bearer ${keyring:gh.header.Authorization}"}}
}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	store := &setStore{set: map[string]string{"gh.header.Authorization": tokA}}
	for _, tc := range []struct {
		token string
		store SecretGetter
		ok    bool
	}{{tokB, store, false}, {tokA, store, true}} {
		client := `{"mcpServers": {"gh": {"type": "http", "url": "https://api.example/mcp", "headers": {"Authorization": "Bearer ` + tc.token + `"}}}}`
		if err := os.WriteFile(f.client, []byte(client), 0o600); err != nil {
			t.Fatal(err)
		}
		io, out, _ := streams()
		o := f.install(io)
		o.Remote, o.DryRun, o.Secrets = true, true, tc.store
		err := RunInstall(context.Background(), o)
		if tc.ok && err != nil {
			t.Errorf("the entry with the stored token: %v", err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "lacks mcpServers.gh")) {
			t.Errorf("the entry with another token: %v\n%s", err, out)
		}
		if strings.Contains(out.String(), tokA) || err != nil && strings.Contains(err.Error(), tokA) {
			t.Error("a stored secret is shown")
		}
	}
}

// --move-secrets never overwrites a secret: a name the store holds, or
// another server of the import took, gets a suffix; a failed import
// removes only what it stored.
func TestImportMoveSecretsNamesAreUnique(t *testing.T) {
	path := filepath.Join(t.TempDir(), "client.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {
  "a": {"command": "x", "env": {"b.TOKEN": "tok-aaaaaaaaaaaa"}},
  "a.b": {"command": "y", "env": {"TOKEN": "tok-bbbbbbbbbbbb"}},
  "c": {"command": "z", "env": {"TOKEN": "tok-cccccccccccc"}}
}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	store := &setStore{set: map[string]string{"c.TOKEN": "older-value"}}
	io, out, _ := streams()
	if err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{path}, Config: cfg, MoveSecrets: true, Secrets: fullStore{store}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.b.TOKEN": "tok-aaaaaaaaaaaa", "a.b.TOKEN-2": "tok-bbbbbbbbbbbb", "c.TOKEN": "older-value", "c.TOKEN-2": "tok-cccccccccccc"}
	if fmt.Sprint(store.set) != fmt.Sprint(want) {
		t.Errorf("stored %v, want %v\n%s", store.set, want, out)
	}
	data, _ := os.ReadFile(cfg)
	for _, w := range []string{`"b.TOKEN": "${keyring:a.b.TOKEN}"`, `"TOKEN": "${keyring:a.b.TOKEN-2}"`, `"TOKEN": "${keyring:c.TOKEN-2}"`} {
		if !strings.Contains(string(data), w) {
			t.Errorf("the config lacks %s:\n%s", w, data)
		}
	}

	// A failed import removes what it stored, not what was there.
	cfg2 := filepath.Join(t.TempDir(), "config.json")
	store2 := &setStore{set: map[string]string{"c.TOKEN": "older-value"}, failOn: "c.TOKEN-2"}
	err := RunImport(context.Background(), &ImportOptions{IO: io, Sources: []string{path}, Config: cfg2, MoveSecrets: true, Secrets: fullStore{store2}})
	if err == nil || !strings.Contains(err.Error(), "a.b.TOKEN, a.b.TOKEN-2 removed again") {
		t.Fatalf("failed import: %v", err)
	}
	if fmt.Sprint(store2.set) != fmt.Sprint(map[string]string{"c.TOKEN": "older-value"}) {
		t.Errorf("after the failed import the store holds %v", store2.set)
	}
}
