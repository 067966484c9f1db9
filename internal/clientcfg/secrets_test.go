package clientcfg

import (
	"fmt"
	"strings"
	"testing"
)

// TestMoveSecrets: the literal secrets of an entry (env and header
// values, secret flags' values, token-shaped args, an oauth client
// secret) are replaced by keyring references under derived names, with
// their real values returned; references, and values that are no
// secrets, stay.
func TestMoveSecrets(t *testing.T) {
	s := &Server{
		Command: "npx",
		Args: []string{"-y", "pkg", "--api-key", "sk-abcdef0123456789abcdef", "--token=ghp_0123456789abcdefghij0123456789abcd",
			"--verbose", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "xoxb-1234-5678-abcdefgh", "Bearer plain-token",
			"-e", "API_TOKEN=t0k", "--api-key", "${KEY}", "https://h.example/?token=abc", "--name", "plain", "--password", "--other"},
		Env: []KV{{"GITHUB_TOKEN", "ghp_$$ecret"}, {"PORT", "8080"}, {"LOG", "debug"}, {"API_KEY", "${env:X}"}, {"OPAQUE", "AKIAABCDEFGHIJKLMNOP"}, {"EMPTY_TOKEN", ""}, {"x y", "secret-ish"}},
	}
	r := &Server{URL: "https://h.example/mcp", Transport: TransportHTTP,
		Headers: []KV{{"Authorization", "Bearer tok-123"}, {"X-Api-Key", "k"}, {"Accept", "text/plain"}, {"X-Ref", "Bearer ${keyring:other}"}},
		OAuth:   &OAuth{ClientID: "id", ClientSecret: "cs"}}

	moved, secrets := s.MoveSecretsAvoiding("srv", nil)
	got := map[string]string{}
	for _, sec := range secrets {
		got[sec.Name+" "+sec.At] = sec.Value()
	}
	want := map[string]string{
		"srv.GITHUB_TOKEN env.GITHUB_TOKEN": "ghp_$ecret",
		"srv.OPAQUE env.OPAQUE":             "AKIAABCDEFGHIJKLMNOP",
		"srv.arg3 args[3]":                  "sk-abcdef0123456789abcdef",
		"srv.arg4 args[4]":                  "ghp_0123456789abcdefghij0123456789abcd",
		"srv.arg6 args[6]":                  "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
		"srv.arg7 args[7]":                  "xoxb-1234-5678-abcdefgh",
		"srv.arg8 args[8]":                  "plain-token",
		"srv.arg10 args[10]":                "t0k",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("secrets\n%v\nwant\n%v", got, want)
	}
	wantArgs := []string{"-y", "pkg", "--api-key", "${keyring:srv.arg3}", "--token=${keyring:srv.arg4}",
		"--verbose", "${keyring:srv.arg6}", "${keyring:srv.arg7}", "Bearer ${keyring:srv.arg8}",
		"-e", "API_TOKEN=${keyring:srv.arg10}", "--api-key", "${KEY}", "https://h.example/?token=abc", "--name", "plain", "--password", "--other"}
	if fmt.Sprintf("%q", moved.Args) != fmt.Sprintf("%q", wantArgs) {
		t.Errorf("args\n%q\nwant\n%q", moved.Args, wantArgs)
	}
	if fmt.Sprint(moved.Env) != "[{GITHUB_TOKEN ${keyring:srv.GITHUB_TOKEN}} {PORT 8080} {LOG debug} {API_KEY ${env:X}} {OPAQUE ${keyring:srv.OPAQUE}} {EMPTY_TOKEN } {x y secret-ish}]" {
		t.Errorf("env %v", moved.Env)
	}
	if s.Env[0].Value != "ghp_$$ecret" || s.Args[3] != "sk-abcdef0123456789abcdef" {
		t.Error("MoveSecrets changed the entry it copied")
	}
	if lit := s.LiteralSecrets("srv"); len(lit) != len(secrets) || s.Args[3] != "sk-abcdef0123456789abcdef" {
		t.Errorf("LiteralSecrets: %v, or it moved them", lit)
	}

	mr, rs := r.MoveSecretsAvoiding("my server", nil)
	if fmt.Sprint(mr.Headers) != "[{Authorization Bearer ${keyring:my_server.header.Authorization}} {X-Api-Key ${keyring:my_server.header.X-Api-Key}} {Accept text/plain} {X-Ref Bearer ${keyring:other}}]" ||
		mr.OAuth.ClientSecret != "${keyring:my_server.oauth.clientSecret}" || r.OAuth.ClientSecret != "cs" {
		t.Errorf("headers %v, oauth %+v", mr.Headers, mr.OAuth)
	}
	if len(rs) != 3 || rs[0].Value() != "tok-123" || rs[2].Value() != "cs" {
		t.Errorf("remote secrets %v", rs)
	}
	// Neither String nor %v nor %#v shows a value.
	for _, sec := range append(secrets, rs...) {
		for _, out := range []string{sec.String(), fmt.Sprintf("%v %+v %#v %s", sec, sec, sec, sec)} {
			if strings.Contains(out, sec.Value()) {
				t.Errorf("%s shows its value: %s", sec.Name, out)
			}
		}
	}
}

// Two fields whose derived names clash get distinct names.
func TestMoveSecretsNamesAreDistinct(t *testing.T) {
	s := &Server{Command: "x", Env: []KV{{"A B_TOKEN", "tok-1"}, {"A_B_TOKEN", "tok-2"}}}
	_, l := s.MoveSecretsAvoiding("s", nil)
	if len(l) != 2 || l[0].Name != "s.A_B_TOKEN" || l[1].Name != "s.A_B_TOKEN-2" {
		t.Errorf("names %v", l)
	}
}

// MoveSecretsAvoiding never takes a name in use (stored, or taken by
// another server of the import).
func TestMoveSecretsAvoidsNamesInUse(t *testing.T) {
	inUse := map[string]bool{"a.b.TOKEN": true, "a.b.TOKEN-2": true}
	s := &Server{Command: "x", Env: []KV{{"TOKEN", "tok-12345678"}}}
	m, l := s.MoveSecretsAvoiding("a.b", func(n string) bool { return inUse[n] })
	if len(l) != 1 || l[0].Name != "a.b.TOKEN-3" || m.Env[0].Value != "${keyring:a.b.TOKEN-3}" {
		t.Errorf("names %v, env %v", l, m.Env)
	}
}

// SameServer: an entry is the same server as the one import wrote with
// its secrets moved, when the stored secrets are its values; under
// another name or with another value, or with no store, it is not.
func TestSameServerWithSecretsMoved(t *testing.T) {
	s := &Server{Name: "gh", Command: "docker", Args: []string{"run", "x"}, Env: []KV{{"GITHUB_TOKEN", "ghp_abc"}}}
	moved, secrets := s.MoveSecretsAvoiding("github", nil)
	moved.Name = "github"
	stored := lookupOf(secrets)
	if SameLaunch(moved, s) || !SameServer(moved, s, stored) {
		t.Error("the moved entry is not the same server")
	}
	if SameServer(moved, s, nil) {
		t.Error("with no store, the moved entry is the same server")
	}
	other, _ := s.MoveSecretsAvoiding("other", nil)
	other.Name = "github"
	if SameServer(other, s, stored) {
		t.Error("secrets moved under another name, not stored, are the same server")
	}
	if SameServer(moved, &Server{Command: "docker", Args: []string{"run", "y"}, Env: []KV{{"GITHUB_TOKEN", "ghp_abc"}}}, stored) {
		t.Error("another launch is the same server")
	}
}

// lookupOf is a store holding secrets.
func lookupOf(secrets []Secret) SecretLookup {
	m := map[string]string{}
	for _, s := range secrets {
		m[s.Name] = s.Value()
	}
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// An entry with another token than the one mcpvisor's entry holds by
// reference is another server (another account): not the same server,
// and install-client does not take it over as mcpvisor's.
func TestSameServerComparesTheStoredSecret(t *testing.T) {
	read := func(token string) *Server {
		f, err := ReadIn([]byte(`{"mcpServers":{"gh":{"type":"http","url":"https://api.example/mcp","headers":{"Authorization":"Bearer `+token+`"}}}}`), FormatMCPServers, "")
		if err != nil {
			t.Fatal(err)
		}
		return f.Servers[0]
	}
	const tokA, tokB = "ghp_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "ghp_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	known, secrets := read(tokA).MoveSecretsAvoiding("gh", nil)
	known.Name = "gh"
	stored := lookupOf(secrets)
	if SameServer(known, read(tokB), stored) {
		t.Error("an entry with another token is the same server as the moved one")
	}
	if !SameServer(known, read(tokA), stored) {
		t.Error("an entry with the stored token is not the same server")
	}
	if SameServer(known, read(tokA), nil) {
		t.Error("with no store, an entry with a literal token is the same server")
	}
	if SameServer(known, read("ghp_$$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), lookupOf(nil)) {
		t.Error("a secret not in the store matches")
	}

	client := []byte(`{"mcpServers":{"gh":{"type":"http","url":"https://api.example/mcp","headers":{"Authorization":"Bearer ` + tokB + `"}}}}`)
	plan, err := Lookup("cursor").PlanInstall(client, FormatMCPServers, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json", Known: []*Server{known}, Secrets: stored})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Missing) != 1 {
		t.Errorf("install-client takes over the entry of another account: missing %v", plan.Missing)
	}
	client = []byte(strings.ReplaceAll(string(client), tokB, tokA))
	for _, st := range []SecretLookup{stored, nil} {
		plan, err = Lookup("cursor").PlanInstall(client, FormatMCPServers, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json", Known: []*Server{known}, Secrets: st})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 0, false: 1}[st != nil]; len(plan.Missing) != want {
			t.Errorf("store %v: missing %v, want %d", st != nil, plan.Missing, want)
		}
	}
}
