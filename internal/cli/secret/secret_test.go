package secret

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/secret"
)

// run runs `secret args…` with stdin in, the file store of stateDir, and
// terminal deciding whether stdin is a terminal (then its line is read
// as a hidden one).
func run(t *testing.T, stateDir, in string, terminal bool, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCmdSecret(cmdutil.IOStreams{In: strings.NewReader(in), Out: &out, ErrOut: &errOut}, func(ctx context.Context, action string, o *Options) error {
		o.Open = secret.OpenFile
		o.Terminal = func(io.Reader) bool { return terminal }
		o.ReadHidden = func(r io.Reader) (string, error) {
			b, err := io.ReadAll(r)
			return strings.TrimSuffix(string(b), "\n"), err
		}
		return map[string]func(context.Context, *Options) error{"set": RunSet, "rm": RunRm, "ls": RunLs}[action](ctx, o)
	})
	cmd.SetArgs(append(args, "--state-dir", stateDir))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestSecretCommands(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, secret.FileName)
	if _, stderr, err := run(t, dir, "ghp_value\n", false, "set", "github.GITHUB_TOKEN"); err != nil || !strings.Contains(stderr, "set github.GITHUB_TOKEN in the file "+file+" (0600); refer to it as ${keyring:github.GITHUB_TOKEN}") {
		t.Fatalf("set: %v %q", err, stderr)
	}
	if _, stderr, err := run(t, dir, "typed\n", true, "set", "linear"); err != nil || !strings.Contains(stderr, "Value of linear (not shown): ") {
		t.Fatalf("set from a terminal: %v %q", err, stderr)
	}
	if _, _, err := run(t, dir, "two\nlines\n", false, "set", "multi"); err != nil {
		t.Fatal(err)
	}
	s := secret.OpenFile(dir)
	for name, want := range map[string]string{"github.GITHUB_TOKEN": "ghp_value", "linear": "typed", "multi": "two\nlines"} {
		if v, err := s.Get(context.Background(), name); err != nil || v != want {
			t.Errorf("%s = %q, %v; want %q", name, v, err, want)
		}
	}
	stdout, stderr, err := run(t, dir, "", false, "ls")
	if err != nil || stdout != "github.GITHUB_TOKEN\nlinear\nmulti\n" || !strings.Contains(stderr, "3 secret(s) in the file "+file) {
		t.Fatalf("ls: %v %q %q", err, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, "ghp_value") {
		t.Fatal("ls shows a value")
	}
	if _, _, err := run(t, dir, "", false, "rm", "linear"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, dir, "", false, "rm", "linear"); err == nil || !strings.Contains(err.Error(), "no secret named linear in the file") {
		t.Fatalf("rm of an absent secret: %v", err)
	}
	// Never a value on the command line; no empty value; a bad name.
	if _, _, err := run(t, dir, "", false, "set", "x", "the-value"); err == nil {
		t.Fatal("set NAME VALUE accepted")
	}
	if _, _, err := run(t, dir, "\n", false, "set", "x"); err == nil || !strings.Contains(err.Error(), "empty value") {
		t.Fatalf("empty value: %v", err)
	}
	if _, _, err := run(t, dir, "v", false, "set", "a b"); err == nil || !strings.Contains(err.Error(), `secret name "a b"`) {
		t.Fatalf("bad name: %v", err)
	}
	if _, _, err := run(t, dir, strings.Repeat("x", secret.MaxFileSize+1), false, "set", "big"); err == nil || !strings.Contains(err.Error(), "larger than 64 KiB") {
		t.Fatalf("big value: %v", err)
	}
}

// OAuth records (oauth/NAME) are mcpvisor login's: set and rm refuse
// them, ls lists them and says what they are.
func TestSecretCommandsOAuthRecords(t *testing.T) {
	dir := t.TempDir()
	if err := secret.OpenFile(dir).Set(context.Background(), "oauth/linear", "record"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, dir, "v\n", false, "set", "oauth/linear"); err == nil || !strings.Contains(err.Error(), "oauth/linear is reserved for mcpvisor's OAuth records") {
		t.Fatalf("set oauth/linear: %v", err)
	}
	if _, _, err := run(t, dir, "", false, "rm", "oauth/linear"); err == nil || !strings.Contains(err.Error(), "mcpvisor logout linear") {
		t.Fatalf("rm oauth/linear: %v", err)
	}
	if v, err := secret.OpenFile(dir).Get(context.Background(), "oauth/linear"); err != nil || v != "record" {
		t.Fatalf("the record after set and rm were refused: %q %v", v, err)
	}
	if _, _, err := run(t, dir, "v\n", false, "set", "plain"); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, dir, "", false, "ls")
	if err != nil || stdout != "oauth/linear\nplain\n" || !strings.Contains(stderr, "2 secret(s) in the file") || !strings.Contains(stderr, "1 of them OAuth records (oauth/NAME), kept by mcpvisor login") {
		t.Fatalf("ls: %v %q %q", err, stdout, stderr)
	}
}

// The state directory is serve's: the flag, else the config's stateDir,
// else the default.
func TestStateDir(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"stateDir": "`+dir+`/from-config", "mcpServers": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if d, err := StateDir(cfg, ""); err != nil || d != dir+"/from-config" {
		t.Errorf("StateDir from the config = %q, %v", d, err)
	}
	if d, err := StateDir(cfg, dir+"/flag"); err != nil || d != dir+"/flag" {
		t.Errorf("StateDir from the flag = %q, %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", dir+"/xdg")
	if d, err := StateDir(filepath.Join(dir, "none.json"), ""); err != nil || d != dir+"/xdg/mcpvisor" {
		t.Errorf("default StateDir = %q, %v", d, err)
	}
}
