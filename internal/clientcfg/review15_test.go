package clientcfg

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// known reads the servers of an mcpvisor config for InstallOptions.Known.
func review15Known(t *testing.T, cfg string) []*Server {
	t.Helper()
	f, err := Read([]byte(cfg), FormatMCPServers)
	if err != nil {
		t.Fatal(err)
	}
	return f.Servers
}

// TestReview15CodexToolFilterDroppedSilently: a Codex server with
// disabled_tools (what the user denied the model) is taken over by
// install-client --per-server; the new table has no filter, mcpvisor's
// config has none (import does not take it), and the plan says nothing of
// it: the client now sees the tool the user had disabled.
func TestReview15CodexToolFilterDroppedSilently(t *testing.T) {
	data := []byte("[mcp_servers.fs]\ncommand = \"npx\"\nargs = [\"fs-server\"]\ndisabled_tools = [\"write_file\"]\n")
	known := review15Known(t, `{"mcpServers":{"fs":{"command":"npx","args":["fs-server"]}}}`)
	for _, per := range []bool{false, true} {
		plan, err := Lookup("codex").PlanInstall(data, FormatCodex, InstallOptions{Exe: "/usr/bin/mcpvisor", Config: "/c.json", PerServer: per, Known: known})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Taken) != 1 {
			t.Fatalf("taken %v", plan.Taken)
		}
		dropped := !bytes.Contains(plan.Data, []byte("write_file"))
		said := false
		for _, k := range plan.Kept {
			if strings.Contains(k.Msg, "disabled_tools") || strings.Contains(k.At, "disabled_tools") {
				said = true
			}
		}
		if dropped && !said {
			t.Errorf("per-server=%v: disabled_tools [write_file] dropped without a word:\n%s", per, plan.Data)
		}
	}
}

// TestReview15VSCodeSandboxDroppedSilently: a VS Code server the user runs
// sandboxed is taken over, and runs unsandboxed under mcpvisor.
func TestReview15VSCodeSandboxDroppedSilently(t *testing.T) {
	data := []byte(`{"servers":{"fs":{"type":"stdio","command":"npx","args":["fs-server"],"sandboxEnabled":true,"envFile":"${workspaceFolder}/.env"}}}`)
	known := review15Known(t, `{"mcpServers":{"fs":{"command":"npx","args":["fs-server"]}}}`)
	plan, err := Lookup("vscode").PlanInstall(data, FormatVSCode, InstallOptions{Exe: "/usr/bin/mcpvisor", Config: "/c.json", PerServer: true, Known: known})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Taken) == 1 && !bytes.Contains(plan.Data, []byte("sandboxEnabled")) && len(plan.Kept) == 0 {
		t.Errorf("a sandboxed server (and its envFile) taken over silently:\n%s", plan.Data)
	}
}

// TestReview15AtomicWriteReplacesSymlink: a client config kept in a
// dotfiles repository and linked into place is replaced by a regular
// file: the link (and the repository copy) no longer follow the change.
func TestReview15AtomicWriteReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "dotfiles", "claude_desktop_config.json")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "claude_desktop_config.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(link, []byte(`{"mcpServers":{}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(link)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target)
	if fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink %s became a regular file; its target still holds %q", link, got)
	}
}

// TestReview15CRLFInsertMixesLineEndings: installing into a CRLF file
// (Windows) writes LF-only lines in the middle of it.
func TestReview15CRLFInsertMixesLineEndings(t *testing.T) {
	data := []byte("{\r\n  \"mcpServers\": {\r\n    \"fs\": {\r\n      \"command\": \"npx\",\r\n      \"args\": [\"fs-server\"]\r\n    }\r\n  }\r\n}\r\n")
	known := review15Known(t, `{"mcpServers":{"fs":{"command":"npx","args":["fs-server"]}}}`)
	plan, err := Lookup("claude-desktop").PlanInstall(data, FormatMCPServers, InstallOptions{Exe: `C:\mcpvisor.exe`, Config: `C:\c.json`, Known: known})
	if err != nil {
		t.Fatal(err)
	}
	lf := bytes.Count(plan.Data, []byte("\n")) - bytes.Count(plan.Data, []byte("\r\n"))
	if lf > 0 {
		t.Errorf("%d bare LF line ends in a CRLF file:\n%q", lf, plan.Data)
	}
}

// TestReview15ProjectRelativeLaunchLosesItsDirectory: Claude Code runs a
// project's server in the project's directory; two projects with the same
// relative launch are different programs, yet they read as one launch
// with no directory: import keeps one (deduplicated), and install-client
// takes the other project's over with it, run from the daemon's cwd.
func TestReview15ProjectRelativeLaunchLosesItsDirectory(t *testing.T) {
	data := []byte(`{"projects":{"/src/a":{"mcpServers":{"dev":{"command":"node","args":["./mcp.js"]}}},"/src/b":{"mcpServers":{"dev":{"command":"node","args":["./mcp.js"]}}}}}`)
	f, err := Lookup("claude-code").Read(data, FormatClaudeUser)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 2 {
		t.Fatalf("servers %d", len(f.Servers))
	}
	a, b := f.Servers[0], f.Servers[1]
	if a.Cwd == "" || SameLaunch(a, b) {
		t.Errorf("%s (cwd %q) and %s (cwd %q): same launch %v; a relative ./mcp.js imported without its project directory",
			a.At, a.Cwd, b.At, b.Cwd, SameLaunch(a, b))
	}
}
