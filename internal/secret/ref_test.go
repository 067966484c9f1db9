package secret

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type mapStore map[string]string

func (m mapStore) Get(_ context.Context, name string) (string, error) {
	v, ok := m[name]
	if !ok {
		return "", ErrNotFound
	}
	return v, nil
}
func (mapStore) Backend() string { return "Secret Service keyring" }

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"${":                 `unterminated "${"`,
		"x ${HOME":           `unterminated "${HOME"`,
		"${}":                `empty variable name in "${}"`,
		"${1X}":              `"${1X}" is not a supported reference`,
		"${A-b}":             `"${A-b}" is not a supported reference`,
		"${A:=b}":            `"${A:=b}" is not a supported reference`,
		"${vault:x}":         `"${vault:x}" is not a supported reference`,
		"${ENV:X}":           `"${ENV:X}" is not a supported reference`,
		"${keyring:}":        `"${keyring:}" has no keyring name`,
		"${keyring:a b}":     `"${keyring:a b}": secret name "a b" has ' '`,
		"${keyring:x:-d}":    `"${keyring:x:-d}": secret name`,
		"${file:}":           `"${file:}" has no file path`,
		"${file:rel/x}":      `"${file:rel/x}": the path must be absolute`,
		"${env:}":            `empty variable name in "${env:}"`,
		"${UNSET:-${}":       "unterminated",
		"a ${X:-${vault:y}}": `"${vault:y}" is not a supported reference`,
	} {
		if err := Check(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want %q", in, err, want)
		}
	}
}

func TestFind(t *testing.T) {
	refs, err := Find("Bearer ${keyring:github.GITHUB_TOKEN} $$ ${X:-${file:/k}} ${env:Y}")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range refs {
		got = append(got, r.Scheme+"|"+r.Name+"|"+r.Text)
	}
	want := []string{"keyring|github.GITHUB_TOKEN|${keyring:github.GITHUB_TOKEN}", "env|X|${X:-${file:/k}}", "file|/k|${file:/k}", "env|Y|${env:Y}"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Find = %q, want %q", got, want)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tok := write("tok", "file-secret\n")
	two := write("two", "a\n\n")
	crlf := write("crlf", "win\r\n")
	big := write("big", strings.Repeat("x", MaxFileSize+1))
	exact := write("exact", strings.Repeat("y", MaxFileSize))
	src := Sources{
		LookupEnv: envOf(map[string]string{"HOME": "/home/u", "EMPTY": "", "TOKEN": "env-secret"}),
		Store:     mapStore{"gh-token": "kr-secret"},
		Home:      dir,
	}
	ok := map[string]string{
		"plain":                      "plain",
		"${HOME}/x":                  "/home/u/x",
		"${env:TOKEN}":               "env-secret",
		"${UNSET:-d}":                "d",
		"${EMPTY:-d}":                "d",
		"${EMPTY}":                   "",
		"${UNSET:-${env:TOKEN}}":     "env-secret",
		"${env:UNSET:-x}":            "x",
		"$$${HOME}":                  "$/home/u",
		"5$ and $HOME":               "5$ and $HOME",
		"Bearer ${keyring:gh-token}": "Bearer kr-secret",
		"${file:" + tok + "}":        "file-secret",
		"${file:~/tok}":              "file-secret",
		"${file:" + two + "}":        "a\n",
		"${file:" + crlf + "}":       "win",
		"${file:" + exact + "}":      strings.Repeat("y", MaxFileSize),
	}
	for in, want := range ok {
		got, err := Resolve(context.Background(), in, src)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %.40q, %v; want %.40q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"${UNSET}":                  "${UNSET} could not be resolved: environment variable UNSET is not set",
		"x${keyring:nope}":          "${keyring:nope} could not be resolved: not in the keyring (Secret Service keyring); set it with `mcpvisor secret set nope`",
		"${file:" + dir + "/none}":  "${file:" + dir + "/none} could not be resolved: no such file",
		"${file:" + dir + "}":       "${file:" + dir + "} could not be resolved: is a directory, not a file",
		"${file:" + big + "}":       "could not be resolved: the file is larger than 64 KiB",
		"${keyring:gh-token}${A:-}": "", // ok: see below
	}
	for in, want := range bad {
		got, err := Resolve(context.Background(), in, src)
		if want == "" {
			if err != nil {
				t.Errorf("Resolve(%q): %v", in, err)
			}
			continue
		}
		var re *ResolveError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &re) {
			t.Errorf("Resolve(%q) = %q, %v; want error %q", in, got, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "secret\n") || strings.Contains(err.Error(), "kr-secret")) {
			t.Errorf("error %q holds a value", err)
		}
	}
	// No store: a keyring reference is an error naming it.
	if _, err := Resolve(context.Background(), "${keyring:gh-token}", Sources{}); err == nil || !strings.Contains(err.Error(), "${keyring:gh-token} could not be resolved: no secret store") {
		t.Errorf("no store: %v", err)
	}
	// A store error is carried, named.
	if _, err := Resolve(context.Background(), "${keyring:x}", Sources{Store: errStore{}}); err == nil || !strings.Contains(err.Error(), "${keyring:x} could not be resolved: locked") {
		t.Errorf("store error: %v", err)
	}
}

type errStore struct{}

func (errStore) Get(context.Context, string) (string, error) { return "", errors.New("locked") }
func (errStore) Backend() string                             { return "test" }

// TestOAuthNamesReserved: a reference may not name an OAuth record
// (oauth/NAME holds a server's tokens), defaults included; the store
// itself keeps such names.
func TestOAuthNamesReserved(t *testing.T) {
	for _, s := range []string{"${keyring:oauth/linear}", "Bearer ${keyring:oauth/x}", "${T:-${keyring:oauth/x}}"} {
		if err := Check(s); err == nil || !strings.Contains(err.Error(), "is reserved for mcpvisor's OAuth records") {
			t.Errorf("Check(%q): %v", s, err)
		}
	}
	for _, s := range []string{"${keyring:oauthx}", "${keyring:my/oauth/x}", "${file:/oauth/x}"} {
		if err := Check(s); err != nil {
			t.Errorf("Check(%q): %v", s, err)
		}
	}
	if !Reserved("oauth/x") || Reserved("oauth") || Reserved("x/oauth/y") {
		t.Error("Reserved")
	}
	s := OpenFile(t.TempDir())
	if err := s.Set(context.Background(), "oauth/linear", "record"); err != nil {
		t.Fatalf("the store refuses an OAuth record's name: %v", err)
	}
	if v, err := s.Get(context.Background(), "oauth/linear"); err != nil || v != "record" {
		t.Fatalf("Get oauth/linear: %q %v", v, err)
	}
}
