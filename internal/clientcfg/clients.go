// Package clientcfg knows the MCP configuration files of desktop clients
// (Claude Desktop, Claude Code, Cursor, Windsurf, VS Code, Zed, Codex):
// where each keeps them on Linux, macOS and Windows, how to read their
// servers into one common form (Server) that says what mcpvisor cannot
// take from each entry, and how to change a file's server entries by
// splicing bytes, keeping every other byte of it.
package clientcfg

import (
	"path"
	"strings"
)

// Format is the layout of a client's configuration file.
type Format uint8

const (
	// FormatMCPServers is a JSON object with "mcpServers" (Claude
	// Desktop, Claude Code's .mcp.json, Cursor, Windsurf, mcpvisor).
	FormatMCPServers Format = iota
	// FormatClaudeUser is Claude Code's ~/.claude.json: "mcpServers" for
	// the user's servers and "projects"."<dir>"."mcpServers" for each
	// project's local ones.
	FormatClaudeUser
	// FormatVSCode is VS Code's mcp.json: "servers" and "inputs", JSONC.
	FormatVSCode
	// FormatVSCodeSettings is VS Code's settings.json, whose legacy "mcp"
	// object holds "servers"; read only (VS Code migrates it to mcp.json).
	FormatVSCodeSettings
	// FormatZed is Zed's settings.json, "context_servers", JSONC.
	FormatZed
	// FormatCodex is Codex's config.toml, tables [mcp_servers.NAME].
	FormatCodex
)

// String names the format.
func (f Format) String() string {
	switch f {
	case FormatMCPServers:
		return "mcpServers JSON"
	case FormatClaudeUser:
		return "Claude Code user JSON"
	case FormatVSCode:
		return "VS Code mcp.json"
	case FormatVSCodeSettings:
		return "VS Code settings.json"
	case FormatZed:
		return "Zed settings.json"
	case FormatCodex:
		return "Codex config.toml"
	}
	return "format?"
}

// serversKey is the key of a JSON format's server object.
func (f Format) serversKey() string {
	switch f {
	case FormatVSCode:
		return "servers"
	case FormatZed:
		return "context_servers"
	}
	return "mcpServers"
}

// Scopes of a location.
const (
	ScopeUser    = "user"    // the user's own configuration
	ScopeProject = "project" // a project's, in the directory it runs in
	ScopeProfile = "profile" // a VS Code profile's
	ScopeLegacy  = "legacy"  // read only: an older place the client migrates from
)

// Location is one configuration file of a client.
type Location struct {
	Path   string
	Format Format
	Scope  string
	// Glob means Path is a pattern (VS Code profiles).
	Glob bool
	// Unverified marks a path no primary source confirms: the most likely
	// place, which --config-path overrides.
	Unverified bool
}

// Env is what locations depend on: the operating system (a GOOS value),
// the home directory, the environment and the project directory (the
// working directory; "" for none).
type Env struct {
	GOOS    string
	Home    string
	Getenv  func(string) string
	Project string
}

func (e Env) get(name string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(name)
}

// join joins path elements with the separator of e.GOOS, so that the
// locations of every system can be computed (and tested) anywhere.
func (e Env) join(elem ...string) string {
	if e.GOOS != "windows" {
		return path.Join(elem...)
	}
	var parts []string
	for i, el := range elem {
		el = strings.ReplaceAll(el, "/", `\`)
		if i > 0 {
			el = strings.Trim(el, `\`)
		} else {
			el = strings.TrimRight(el, `\`)
		}
		if el != "" {
			parts = append(parts, el)
		}
	}
	return strings.Join(parts, `\`)
}

// appData is Windows' %APPDATA% (Roaming), from the environment or under
// the home directory.
func (e Env) appData() string {
	if d := e.get("APPDATA"); d != "" {
		return d
	}
	return e.join(e.Home, "AppData", "Roaming")
}

// xdgConfig is $XDG_CONFIG_HOME, else ~/.config.
func (e Env) xdgConfig() string {
	if d := e.get("XDG_CONFIG_HOME"); d != "" {
		return d
	}
	return e.join(e.Home, ".config")
}

// Client is one MCP client whose configuration mcpvisor reads and edits.
type Client struct {
	// Name is what the command line calls it ("claude-desktop").
	Name string
	// Title is how people call it ("Claude Desktop").
	Title string
	// Format of the client's own files.
	Format    Format
	locations func(Env) []Location
	// vars is how the client's values reference variables.
	vars varSyntax
}

// Locations returns the client's configuration files in env, the one
// install-client edits first (see Target).
func (c *Client) Locations(env Env) []Location { return c.locations(env) }

// Target returns the file install-client edits by default: the client's
// user configuration.
func (c *Client) Target(env Env) Location { return c.locations(env)[0] }

// Clients lists every client known, in a stable order.
func Clients() []*Client { return clients }

// Lookup returns the client named name, or nil.
func Lookup(name string) *Client {
	for _, c := range clients {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Names lists the clients' names.
func Names() []string {
	var n []string
	for _, c := range clients {
		n = append(n, c.Name)
	}
	return n
}

var clients = []*Client{
	{Name: "claude-desktop", Title: "Claude Desktop", Format: FormatMCPServers, vars: varsNone,
		locations: func(e Env) []Location {
			switch e.GOOS {
			case "darwin":
				return []Location{{Path: e.join(e.Home, "Library", "Application Support", "Claude", "claude_desktop_config.json"), Scope: ScopeUser}}
			case "windows":
				// A Microsoft Store (MSIX) install keeps it under
				// %LOCALAPPDATA%\Packages\Claude_…\LocalCache\Roaming\Claude
				// (unverified): use --config-path there.
				return []Location{{Path: e.join(e.appData(), "Claude", "claude_desktop_config.json"), Scope: ScopeUser}}
			}
			// Unverified: there is no official Linux build; community
			// builds use the XDG config directory.
			return []Location{{Path: e.join(e.xdgConfig(), "Claude", "claude_desktop_config.json"), Scope: ScopeUser, Unverified: true}}
		}},
	{Name: "claude-code", Title: "Claude Code", Format: FormatClaudeUser, vars: varsClaude,
		locations: func(e Env) []Location {
			dir := e.Home
			if d := e.get("CLAUDE_CONFIG_DIR"); d != "" {
				dir = d
			}
			// Windows: %USERPROFILE%\.claude.json, the home directory
			// (unverified).
			l := []Location{{Path: e.join(dir, ".claude.json"), Format: FormatClaudeUser, Scope: ScopeUser, Unverified: e.GOOS == "windows"}}
			if e.Project != "" {
				l = append(l, Location{Path: e.join(e.Project, ".mcp.json"), Format: FormatMCPServers, Scope: ScopeProject})
			}
			return l
		}},
	{Name: "cursor", Title: "Cursor", Format: FormatMCPServers, vars: varsVSCode,
		locations: func(e Env) []Location {
			// Windows: %USERPROFILE%\.cursor\mcp.json (unverified).
			l := []Location{{Path: e.join(e.Home, ".cursor", "mcp.json"), Scope: ScopeUser, Unverified: e.GOOS == "windows"}}
			if e.Project != "" {
				l = append(l, Location{Path: e.join(e.Project, ".cursor", "mcp.json"), Scope: ScopeProject})
			}
			return l
		}},
	{Name: "windsurf", Title: "Windsurf", Format: FormatMCPServers, vars: varsVSCode,
		locations: func(e Env) []Location {
			// Windows: %USERPROFILE%\.codeium\windsurf\mcp_config.json
			// (unverified).
			return []Location{{Path: e.join(e.Home, ".codeium", "windsurf", "mcp_config.json"), Scope: ScopeUser, Unverified: e.GOOS == "windows"}}
		}},
	{Name: "vscode", Title: "VS Code", Format: FormatVSCode, vars: varsVSCode,
		locations: func(e Env) []Location {
			user := e.join(e.xdgConfig(), "Code", "User")
			switch {
			case e.get("VSCODE_PORTABLE") != "":
				user = e.join(e.get("VSCODE_PORTABLE"), "user-data", "User")
			case e.get("VSCODE_APPDATA") != "":
				user = e.join(e.get("VSCODE_APPDATA"), "Code", "User")
			case e.GOOS == "darwin":
				user = e.join(e.Home, "Library", "Application Support", "Code", "User")
			case e.GOOS == "windows":
				user = e.join(e.appData(), "Code", "User")
			}
			l := []Location{
				{Path: e.join(user, "mcp.json"), Format: FormatVSCode, Scope: ScopeUser},
				{Path: e.join(user, "profiles", "*", "mcp.json"), Format: FormatVSCode, Scope: ScopeProfile, Glob: true},
				{Path: e.join(user, "settings.json"), Format: FormatVSCodeSettings, Scope: ScopeLegacy},
			}
			if e.Project != "" {
				l = append(l, Location{Path: e.join(e.Project, ".vscode", "mcp.json"), Format: FormatVSCode, Scope: ScopeProject})
			}
			return l
		}},
	{Name: "zed", Title: "Zed", Format: FormatZed, vars: varsNone,
		locations: func(e Env) []Location {
			dir := e.join(e.xdgConfig(), "zed")
			switch {
			case e.GOOS == "windows":
				dir = e.join(e.appData(), "Zed")
			case e.GOOS == "darwin":
				dir = e.join(e.Home, ".config", "zed")
			case e.get("FLATPAK_XDG_CONFIG_HOME") != "":
				dir = e.join(e.get("FLATPAK_XDG_CONFIG_HOME"), "zed")
			}
			l := []Location{{Path: e.join(dir, "settings.json"), Format: FormatZed, Scope: ScopeUser}}
			if e.Project != "" {
				l = append(l, Location{Path: e.join(e.Project, ".zed", "settings.json"), Format: FormatZed, Scope: ScopeProject})
			}
			return l
		}},
	{Name: "codex", Title: "Codex", Format: FormatCodex, vars: varsNone,
		locations: func(e Env) []Location {
			dir := e.join(e.Home, ".codex")
			if d := e.get("CODEX_HOME"); d != "" {
				dir = d
			}
			l := []Location{{Path: e.join(dir, "config.toml"), Format: FormatCodex, Scope: ScopeUser, Unverified: e.GOOS == "windows"}}
			if e.Project != "" {
				// Read by Codex for trusted projects only (unverified).
				l = append(l, Location{Path: e.join(e.Project, ".codex", "config.toml"), Format: FormatCodex, Scope: ScopeProject, Unverified: true})
			}
			return l
		}},
}
