package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// clientHome is a home directory for the real binary's client commands.
type clientHome struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

func newClientHome(t *testing.T) *clientHome {
	t.Helper()
	bin := testserver.BuildPackage(t, "github.com/mcpvisor/mcpvisor/cmd/mcpvisor", "mcpvisor")
	dir := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "VSCODE_PORTABLE", "VSCODE_APPDATA", "FLATPAK_XDG_CONFIG_HOME":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"), "XDG_STATE_HOME="+filepath.Join(dir, ".local", "state"))
	return &clientHome{t: t, bin: bin, dir: dir, env: env}
}

// run runs mcpvisor in the home's project directory and returns its
// output and whether it succeeded.
func (h *clientHome) run(args ...string) (string, bool) {
	h.t.Helper()
	cmd := exec.Command(h.bin, args...)
	cmd.Env = h.env
	cmd.Dir = h.dir
	out, err := cmd.CombinedOutput()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		h.t.Fatal(err)
	}
	return string(out), err == nil
}

// target is where the client keeps its user config in this home.
func (h *clientHome) target(client string) string {
	return clientcfg.Lookup(client).Target(clientcfg.Env{GOOS: runtime.GOOS, Home: h.dir, Project: h.dir,
		Getenv: func(k string) string {
			if k == "XDG_CONFIG_HOME" {
				return filepath.Join(h.dir, ".config")
			}
			return ""
		}}).Path
}

func (h *clientHome) backups(path string) []string {
	b, _ := filepath.Glob(path + ".mcpvisor-backup-*")
	return b
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

var clientGoldens = map[string]string{
	"claude-desktop": "claude-desktop.json", "claude-code": "claude-code.json", "cursor": "cursor.json",
	"windsurf": "windsurf.json", "vscode": "vscode.json", "zed": "zed.json", "codex": "codex.toml",
}

// TestInstallClientRoundTrip takes each client's golden file through the
// real binary: install-client refuses until the servers are imported;
// dry runs write nothing; import fills mcpvisor's config; install-client
// rewrites the file once (a second run changes nothing and makes no
// second backup); uninstall-client restores it byte for byte, mode
// included.
func TestInstallClientRoundTrip(t *testing.T) {
	for client, golden := range clientGoldens {
		t.Run(client, func(t *testing.T) {
			h := newClientHome(t)
			orig := mustRead(t, filepath.Join("..", "..", "internal", "clientcfg", "testdata", golden))
			path := h.target(client)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, orig, 0o640); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(h.dir, ".config", "mcpvisor", "config.json")

			out, ok := h.run("install-client", client)
			if ok || !strings.Contains(out, "mcpvisor import "+client) {
				t.Fatalf("install-client before import: ok=%v, output:\n%s", ok, out)
			}
			out, ok = h.run("install-client", client, "--import", "--dry-run")
			if !ok || !strings.Contains(out, "+++ "+path+" (installed)") || !strings.Contains(out, "+++ "+cfg+" (imported)") {
				t.Fatalf("dry run: ok=%v, output:\n%s", ok, out)
			}
			if _, err := os.Stat(cfg); err == nil {
				t.Fatal("the dry run wrote mcpvisor's config")
			}
			if got := mustRead(t, path); string(got) != string(orig) || len(h.backups(path)) > 0 {
				t.Fatal("the dry run changed the client's file")
			}

			if out, ok = h.run("import", client); !ok {
				t.Fatalf("import: %s", out)
			}
			imported := mustRead(t, cfg)
			if out, ok = h.run("import", client); !ok || !strings.Contains(out, "nothing to add") || string(mustRead(t, cfg)) != string(imported) {
				t.Fatalf("a second import changed something: %s", out)
			}

			if out, ok = h.run("install-client", client); !ok {
				t.Fatalf("install-client: %s", out)
			}
			installed := mustRead(t, path)
			if string(installed) == string(orig) || !strings.Contains(string(installed), "connect") {
				t.Fatalf("install-client did not rewrite the file:\n%s", installed)
			}
			if mode(t, path) != 0o640 {
				t.Errorf("the file's mode is %v, want 0640", mode(t, path))
			}
			b := h.backups(path)
			if len(b) != 1 || string(mustRead(t, b[0])) != string(orig) || mode(t, b[0]) != 0o640 {
				t.Fatalf("backups %v: want one, identical to the original, mode 0640", b)
			}
			if out, ok = h.run("install-client", client); !ok || !strings.Contains(out, "nothing to do") {
				t.Fatalf("second install-client: ok=%v %s", ok, out)
			}
			if string(mustRead(t, path)) != string(installed) || len(h.backups(path)) != 1 {
				t.Fatal("the second install-client changed the file or made another backup")
			}

			if out, ok = h.run("uninstall-client", client, "--dry-run"); !ok || !strings.Contains(out, "+++ "+path+" (restored)") || string(mustRead(t, path)) != string(installed) {
				t.Fatalf("uninstall dry run: %s", out)
			}
			if out, ok = h.run("uninstall-client", client); !ok {
				t.Fatalf("uninstall-client: %s", out)
			}
			if got := mustRead(t, path); string(got) != string(orig) {
				t.Fatalf("not restored byte for byte:\n%s", clientcfg.Diff(orig, got, "original", "restored"))
			}
			if mode(t, path) != 0o640 || len(h.backups(path)) != 0 {
				t.Errorf("mode %v, backups %v after uninstall", mode(t, path), h.backups(path))
			}
			if out, ok = h.run("uninstall-client", client); ok || !strings.Contains(out, "has not changed it") {
				t.Errorf("a second uninstall-client: ok=%v %s", ok, out)
			}
		})
	}
}

// TestUninstallClientKeepsWhatChangedSince: a file changed after
// install-client outside the entries it wrote (the client's own state, a
// server added by hand) is spliced: the entries go back, the changes
// stay. An edit of an entry install-client wrote is refused, shown,
// unless --force, which puts the entry back and still keeps the rest.
func TestUninstallClientKeepsWhatChangedSince(t *testing.T) {
	h := newClientHome(t)
	path := h.target("claude-code")
	orig := []byte("{\n  \"numStartups\": 1,\n  \"mcpServers\": {\"a\": {\"command\": \"srv-a\"}}\n}\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, ok := h.run("install-client", "claude-code", "--import", "--per-server"); !ok {
		t.Fatal(out)
	}
	// Claude Code counts its startups, the user adds a server.
	edited := strings.Replace(string(mustRead(t, path)), `"numStartups": 1`, `"numStartups": 2`, 1)
	edited = strings.Replace(edited, `"a": {`, `"b": {"command": "added-by-hand"}, "a": {`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, ok := h.run("install-client", "claude-code", "--per-server"); ok || !strings.Contains(out, "uninstall-client claude-code") {
		t.Fatalf("install-client over a changed install: ok=%v %s", ok, out)
	}
	out, ok := h.run("uninstall-client", "claude-code")
	want := "{\n  \"numStartups\": 2,\n  \"mcpServers\": {\"b\": {\"command\": \"added-by-hand\"}, \"a\": {\"command\": \"srv-a\"}}\n}\n"
	if !ok || !strings.Contains(out, "only the server entries it changed are put back") || string(mustRead(t, path)) != want {
		t.Fatalf("uninstall of a file changed outside its entries: ok=%v\n%s\n%s", ok, out, mustRead(t, path))
	}
	if len(h.backups(path)) != 0 {
		t.Errorf("backups left: %v", h.backups(path))
	}

	// The entry install-client wrote is edited: refused, then forced.
	if out, ok := h.run("install-client", "claude-code", "--import", "--per-server"); !ok {
		t.Fatal(out)
	}
	before := string(mustRead(t, path))
	edited = strings.Replace(before, `"numStartups": 2`, `"numStartups": 3`, 1)
	edited = strings.Replace(edited, `"--server"`, `"--verbose", "--server"`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	out, ok = h.run("uninstall-client", "claude-code")
	if ok || !strings.Contains(out, "in the entries it wrote (mcpServers.b)") || !strings.Contains(out, `+  "mcpServers": {"b": {"command": `) || !strings.Contains(out, `["connect", "--verbose", "--server", "b"`) {
		t.Fatalf("uninstall of an edited entry: ok=%v\n%s", ok, out)
	}
	if string(mustRead(t, path)) != edited {
		t.Fatal("the refused uninstall changed the file")
	}
	if out, ok := h.run("uninstall-client", "claude-code", "--force"); !ok {
		t.Fatal(out)
	}
	if got := string(mustRead(t, path)); got != strings.Replace(want, `"numStartups": 2`, `"numStartups": 3`, 1) {
		t.Fatalf("--force: \n%s", got)
	}
}

// TestInstallClientDiscardsARecordThatNeverReachedTheFile: install-client
// stopped between its record and the file (a crash) does not block the
// next one, which installs.
func TestInstallClientDiscardsARecordThatNeverReachedTheFile(t *testing.T) {
	h := newClientHome(t)
	path := h.target("cursor")
	orig := []byte(`{"mcpServers": {"a": {"command": "srv-a"}}}` + "\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, ok := h.run("install-client", "cursor", "--import"); !ok {
		t.Fatal(out)
	}
	// As if the file had never been written: the original back.
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	out, ok := h.run("install-client", "cursor")
	if !ok || !strings.Contains(out, "never reached the file; its record is discarded") || !strings.Contains(string(mustRead(t, path)), "connect") {
		t.Fatalf("ok=%v\n%s", ok, out)
	}
	if b := h.backups(path); len(b) != 1 {
		t.Errorf("backups %v, want the new one only", b)
	}
	if out, ok := h.run("uninstall-client", "cursor"); !ok || string(mustRead(t, path)) != string(orig) {
		t.Fatalf("uninstall: %s", out)
	}
}

// TestInstallClientRefusesWhatItCannotParse leaves a broken file as it is
// and names the line and column.
func TestInstallClientRefusesWhatItCannotParse(t *testing.T) {
	h := newClientHome(t)
	for client, data := range map[string]string{
		"cursor": "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n    \"b\": {}\n",
		"codex":  "[mcp_servers.a]\ncommand = \"x\nargs = []\n",
		"zed":    "{\n  // comment\n  \"context_servers\": {,}\n}",
	} {
		path := h.target(client)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"install-client", client, "--import"}, {"import", client}} {
			out, ok := h.run(args...)
			if ok || !strings.Contains(out, path+":") || !strings.Contains(out, ":4:") && !strings.Contains(out, ":2:") && !strings.Contains(out, ":3:") {
				t.Errorf("%v on a broken file: ok=%v\n%s", args, ok, out)
			}
			if string(mustRead(t, path)) != data || len(h.backups(path)) != 0 {
				t.Errorf("%v touched the broken file", args)
			}
		}
	}
}

// TestImportMergesClients: identical launches under other names are
// skipped, a clash of names with another launch is renamed and said so,
// and mcpvisor's own config keeps every byte it had.
func TestImportMergesClients(t *testing.T) {
	h := newClientHome(t)
	write := func(path, data string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(h.dir, "mine.json")
	mine := "{\n  \"listen\": \"127.0.0.1:7400\",\n  \"mcpServers\": {\n    \"mem\": {\"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-memory\"], \"idleTimeout\": \"5m\"}\n  },\n  \"defaults\": {\"eager\": false}\n}\n"
	write(cfg, mine)
	if err := os.Chmod(cfg, 0o640); err != nil {
		t.Fatal(err)
	}
	write(h.target("cursor"), `{"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}, "mem": {"command": "other"}}}`)
	write(filepath.Join(h.dir, "extra.toml"), "[mcp_servers.mem]\ncommand = \"third\"\n")
	out, ok := h.run("import", "cursor", "extra.toml", "--config", cfg)
	if !ok {
		t.Fatal(out)
	}
	for _, want := range []string{`mcpServers.memory: the same server as "mem", skipped`, `mcpServers.mem: added as "mem-cursor"`, `mcp_servers.mem: added as "mem-extra"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	got := string(mustRead(t, cfg))
	if !strings.HasPrefix(got, mine[:strings.Index(mine, `"5m"}`)+5]) || !strings.HasSuffix(got, "  },\n  \"defaults\": {\"eager\": false}\n}\n") {
		t.Errorf("mcpvisor's config changed beyond the added entries:\n%s", got)
	}
	if mode(t, cfg) != 0o640 {
		t.Errorf("mode %v, want 0640 kept", mode(t, cfg))
	}
	if out, ok := h.run("validate", "-c", cfg); !ok || !strings.Contains(out, "3 servers") {
		t.Errorf("the merged config does not validate: %s", out)
	}
}
