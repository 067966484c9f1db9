package clientcfg

import (
	"strings"
	"testing"
)

// TestLocations computes every client's files on Linux, macOS and
// Windows from a home directory and an environment alone.
func TestLocations(t *testing.T) {
	env := func(goos, home string, vars map[string]string) Env {
		return Env{GOOS: goos, Home: home, Getenv: func(k string) string { return vars[k] }, Project: map[bool]string{true: `C:\src\app`, false: "/src/app"}[goos == "windows"]}
	}
	linux := env("linux", "/home/me", nil)
	linuxXDG := env("linux", "/home/me", map[string]string{"XDG_CONFIG_HOME": "/cfg", "CODEX_HOME": "/codex", "CLAUDE_CONFIG_DIR": "/claude"})
	mac := env("darwin", "/Users/me", map[string]string{"XDG_CONFIG_HOME": "/ignored"})
	win := env("windows", `C:\Users\me`, map[string]string{"APPDATA": `C:\Users\me\AppData\Roaming`})
	winNoAppData := env("windows", `C:\Users\me`, nil)
	for _, tc := range []struct {
		client string
		env    Env
		want   []string
	}{
		{"claude-desktop", linux, []string{"/home/me/.config/Claude/claude_desktop_config.json"}},
		{"claude-desktop", linuxXDG, []string{"/cfg/Claude/claude_desktop_config.json"}},
		{"claude-desktop", mac, []string{"/Users/me/Library/Application Support/Claude/claude_desktop_config.json"}},
		{"claude-desktop", win, []string{`C:\Users\me\AppData\Roaming\Claude\claude_desktop_config.json`}},
		{"claude-desktop", winNoAppData, []string{`C:\Users\me\AppData\Roaming\Claude\claude_desktop_config.json`}},
		{"claude-code", linux, []string{"/home/me/.claude.json", "/src/app/.mcp.json"}},
		{"claude-code", linuxXDG, []string{"/claude/.claude.json", "/src/app/.mcp.json"}},
		{"claude-code", win, []string{`C:\Users\me\.claude.json`, `C:\src\app\.mcp.json`}},
		{"cursor", mac, []string{"/Users/me/.cursor/mcp.json", "/src/app/.cursor/mcp.json"}},
		{"cursor", win, []string{`C:\Users\me\.cursor\mcp.json`, `C:\src\app\.cursor\mcp.json`}},
		{"windsurf", linux, []string{"/home/me/.codeium/windsurf/mcp_config.json"}},
		{"windsurf", win, []string{`C:\Users\me\.codeium\windsurf\mcp_config.json`}},
		{"vscode", linux, []string{"/home/me/.config/Code/User/mcp.json", "/home/me/.config/Code/User/profiles/*/mcp.json", "/home/me/.config/Code/User/settings.json", "/src/app/.vscode/mcp.json"}},
		{"vscode", linuxXDG, []string{"/cfg/Code/User/mcp.json", "/cfg/Code/User/profiles/*/mcp.json", "/cfg/Code/User/settings.json", "/src/app/.vscode/mcp.json"}},
		{"vscode", mac, []string{"/Users/me/Library/Application Support/Code/User/mcp.json", "/Users/me/Library/Application Support/Code/User/profiles/*/mcp.json", "/Users/me/Library/Application Support/Code/User/settings.json", "/src/app/.vscode/mcp.json"}},
		{"vscode", win, []string{`C:\Users\me\AppData\Roaming\Code\User\mcp.json`, `C:\Users\me\AppData\Roaming\Code\User\profiles\*\mcp.json`, `C:\Users\me\AppData\Roaming\Code\User\settings.json`, `C:\src\app\.vscode\mcp.json`}},
		{"vscode", env("linux", "/home/me", map[string]string{"VSCODE_PORTABLE": "/opt/vscode/data"}), []string{"/opt/vscode/data/user-data/User/mcp.json", "/opt/vscode/data/user-data/User/profiles/*/mcp.json", "/opt/vscode/data/user-data/User/settings.json", "/src/app/.vscode/mcp.json"}},
		{"zed", linux, []string{"/home/me/.config/zed/settings.json", "/src/app/.zed/settings.json"}},
		{"zed", env("linux", "/home/me", map[string]string{"FLATPAK_XDG_CONFIG_HOME": "/flat"}), []string{"/flat/zed/settings.json", "/src/app/.zed/settings.json"}},
		{"zed", mac, []string{"/Users/me/.config/zed/settings.json", "/src/app/.zed/settings.json"}},
		{"zed", win, []string{`C:\Users\me\AppData\Roaming\Zed\settings.json`, `C:\src\app\.zed\settings.json`}},
		{"codex", linux, []string{"/home/me/.codex/config.toml", "/src/app/.codex/config.toml"}},
		{"codex", linuxXDG, []string{"/codex/config.toml", "/src/app/.codex/config.toml"}},
		{"codex", win, []string{`C:\Users\me\.codex\config.toml`, `C:\src\app\.codex\config.toml`}},
	} {
		var got []string
		for _, l := range Lookup(tc.client).Locations(tc.env) {
			got = append(got, l.Path)
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s on %s: got\n  %s\nwant\n  %s", tc.client, tc.env.GOOS, strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
		}
	}
	// The install target is the user's file, in the client's format.
	for _, c := range Clients() {
		if l := c.Target(linux); l.Scope != ScopeUser || l.Format != c.Format {
			t.Errorf("%s: target %+v, want the user's file in %v", c.Name, l, c.Format)
		}
	}
}
