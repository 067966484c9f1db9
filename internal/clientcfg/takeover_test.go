package clientcfg

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/jsonc"
)

// knownOf reads the servers of an mcpvisor config for InstallOptions.Known.
func knownOf(t *testing.T, cfg string) []*Server {
	t.Helper()
	f, err := Read([]byte(cfg), FormatMCPServers)
	if err != nil {
		t.Fatal(err)
	}
	return f.Servers
}

// TestInstallKeepsCodexToolFilters: a Codex server with disabled_tools
// (what the user denied the model) keeps them. Written per server, the
// new table carries the filter itself (Codex applies it to the server's
// own names, which connect --server passes unchanged). One entry for all
// has no place for it, so mcpvisor's server must filter alike: one
// without the filter is missing (import adds a filtered one), one with
// it is taken.
func TestInstallKeepsCodexToolFilters(t *testing.T) {
	data := []byte("[mcp_servers.fs]\ncommand = \"npx\"\nargs = [\"fs-server\"]\ndisabled_tools = [\"write_file\"]\n")
	plain := knownOf(t, `{"mcpServers":{"fs":{"command":"npx","args":["fs-server"]}}}`)
	filtered := knownOf(t, `{"mcpServers":{"fs":{"command":"npx","args":["fs-server"],"tools":{"deny":["write_file"]}}}}`)
	filteredByDefault := knownOf(t, `{"defaults":{"tools":{"deny":["write_file"]}},"mcpServers":{"fs":{"command":"npx","args":["fs-server"]}}}`)
	plan := func(per bool, known []*Server) *Plan {
		p, err := Lookup("codex").PlanInstall(data, FormatCodex, InstallOptions{Exe: "/usr/bin/mcpvisor", Config: "/c.json", PerServer: per, Known: known})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan(true, plain)
	if len(p.Taken) != 1 || !bytes.Contains(p.Data, []byte(`disabled_tools = ["write_file"]`)) {
		t.Errorf("per server: taken %v, the table lost disabled_tools:\n%s", p.Taken, p.Data)
	}
	if p := plan(false, plain); len(p.Missing) != 1 || len(p.Taken) != 0 {
		t.Errorf("one entry, mcpvisor's fs unfiltered: missing %v taken %v; want fs missing", p.Missing, p.Taken)
	}
	for _, known := range [][]*Server{filtered, filteredByDefault} {
		if p := plan(false, known); len(p.Taken) != 1 || len(p.Missing) != 0 {
			t.Errorf("one entry, mcpvisor's fs filtered alike: missing %v taken %v", p.Missing, p.Taken)
		}
	}
	// Import takes the filter into mcpvisor's config.
	f, err := Lookup("codex").Read(data, FormatCodex)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Servers[0].Entry(); !strings.Contains(mustEncode(t, got), `"tools": {"deny": ["write_file"]}`) {
		t.Errorf("imported entry %s has no tools deny", mustEncode(t, got))
	}
}

func mustEncode(t *testing.T, v any) string {
	t.Helper()
	s, err := jsonc.Encode(v, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInstallLeavesSandboxedServersToTheClient: a VS Code server the
// user runs sandboxed, or with an env file, stays as it is in the
// client's file (mcpvisor would run it unsandboxed, without the
// variables), its fields named; mcpvisor's config need not have it.
func TestInstallLeavesSandboxedServersToTheClient(t *testing.T) {
	data := []byte(`{"servers":{"fs":{"type":"stdio","command":"npx","args":["fs-server"],"sandboxEnabled":true,"envFile":"${workspaceFolder}/.env"}}}`)
	for _, per := range []bool{false, true} {
		plan, err := Lookup("vscode").PlanInstall(data, FormatVSCode, InstallOptions{Exe: "/usr/bin/mcpvisor", Config: "/c.json", PerServer: per})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Taken) != 0 || len(plan.Missing) != 0 || !bytes.Contains(plan.Data, []byte(`"fs":{"type":"stdio","command":"npx","args":["fs-server"],"sandboxEnabled":true,"envFile":"${workspaceFolder}/.env"}`)) {
			t.Errorf("per-server=%v: taken %v missing %v:\n%s", per, plan.Taken, plan.Missing, plan.Data)
		}
		if len(plan.Kept) != 1 || !strings.Contains(plan.Kept[0].Msg, "servers.fs.sandboxEnabled") || !strings.Contains(plan.Kept[0].Msg, "servers.fs.envFile") {
			t.Errorf("per-server=%v: kept %v, want fs with sandboxEnabled and envFile named", per, plan.Kept)
		}
	}
}

// TestProjectServersRunInTheirProject: Claude Code runs a project's
// server in the project's directory; two projects with the same relative
// launch are different programs, and read so. A project's own file
// (.mcp.json, .vscode/mcp.json, …) read as the project's gives its
// servers the project's directory, unless they name one.
func TestProjectServersRunInTheirProject(t *testing.T) {
	data := []byte(`{"projects":{"/src/a":{"mcpServers":{"dev":{"command":"node","args":["./mcp.js"]}}},"/src/b":{"mcpServers":{"dev":{"command":"node","args":["./mcp.js"]}}}}}`)
	f, err := Lookup("claude-code").Read(data, FormatClaudeUser)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 2 {
		t.Fatalf("servers %d", len(f.Servers))
	}
	a, b := f.Servers[0], f.Servers[1]
	if a.Cwd != "/src/a" || b.Cwd != "/src/b" || SameLaunch(a, b) {
		t.Errorf("%s (cwd %q) and %s (cwd %q): same launch %v", a.At, a.Cwd, b.At, b.Cwd, SameLaunch(a, b))
	}
	proj := []byte(`{"servers":{"dev":{"command":"node","args":["./mcp.js"]},"own":{"command":"x","cwd":"/elsewhere"},"web":{"type":"http","url":"https://x"}}}`)
	dir := ProjectDir("/src/c/.vscode/mcp.json", "/home/me")
	if dir != "/src/c" {
		t.Fatalf("ProjectDir = %q", dir)
	}
	f, err = Lookup("vscode").ReadIn(proj, FormatVSCode, dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.Servers[0].Cwd != "/src/c" || f.Servers[1].Cwd != "/elsewhere" || f.Servers[2].Cwd != "" {
		t.Errorf("cwds %q %q %q", f.Servers[0].Cwd, f.Servers[1].Cwd, f.Servers[2].Cwd)
	}
	for path, want := range map[string]string{
		"/p/.mcp.json": "/p", "/p/.cursor/mcp.json": "/p", "/p/.zed/settings.json": "/p", `C:\p\.codex\config.toml`: `C:\p`,
		"/home/me/.cursor/mcp.json": "", "/home/me/.codex/config.toml": "", "/home/me/.config/zed/settings.json": "", "/home/me/.claude.json": "",
	} {
		if got := ProjectDir(path, "/home/me"); got != want {
			t.Errorf("ProjectDir(%s) = %q, want %q", path, got, want)
		}
	}
}

// TestCRLFFileKeepsCRLF: installing into a CRLF file (Windows) writes
// CRLF lines only, in JSON and in TOML.
func TestCRLFFileKeepsCRLF(t *testing.T) {
	json := []byte("{\r\n  \"mcpServers\": {\r\n    \"fs\": {\r\n      \"command\": \"npx\",\r\n      \"args\": [\"fs-server\"]\r\n    }\r\n  }\r\n}\r\n")
	toml := []byte("# c\r\nmodel = \"x\"\r\n\r\n[mcp_servers.fs]\r\ncommand = \"npx\"\r\nargs = [\"fs-server\"]\r\n")
	known := knownOf(t, `{"mcpServers":{"fs":{"command":"npx","args":["fs-server"]}}}`)
	for _, tc := range []struct {
		client string
		data   []byte
		format Format
	}{
		{"claude-desktop", json, FormatMCPServers},
		{"codex", toml, FormatCodex},
	} {
		for _, per := range []bool{false, true} {
			plan, err := Lookup(tc.client).PlanInstall(tc.data, tc.format, InstallOptions{Exe: `C:\mcpvisor.exe`, Config: `C:\c.json`, Known: known, PerServer: per})
			if err != nil {
				t.Fatal(err)
			}
			if lf := bytes.Count(plan.Data, []byte("\n")) - bytes.Count(plan.Data, []byte("\r\n")); lf > 0 || len(plan.Taken) != 1 {
				t.Errorf("%s per-server=%v: %d bare LF line ends in a CRLF file:\n%q", tc.client, per, lf, plan.Data)
			}
		}
	}
}
