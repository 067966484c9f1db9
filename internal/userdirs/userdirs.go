// Package userdirs says where mcpvisor keeps a user's files by default:
// its config (which import fills and connect serves) and its state
// directory (the state file, the daemon's socket, install records), and
// the user's home, even when HOME is not set.
package userdirs

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"

	"github.com/mcpvisor/mcpvisor/internal/bridge"
)

// Home is the user's home directory: $HOME, else the user database's
// (a client or a service manager may start mcpvisor without HOME).
func Home() (string, error) {
	if home, err := os.UserHomeDir(); err == nil {
		return home, nil
	}
	if home := databaseHome(); filepath.IsAbs(home) {
		return home, nil
	}
	return "", errors.New("no home directory: HOME is not set, and the user database has none for this user")
}

// databaseHome is the user database's home directory for this user, or
// "" (a variable: tests stand in for a user the database does not know).
var databaseHome = func() string {
	if u, err := user.Current(); err == nil {
		return u.HomeDir
	}
	return ""
}

// DefaultConfigFile is the user's mcpvisor configuration, which import
// fills and connect serves: $XDG_CONFIG_HOME/mcpvisor/config.json, else
// ~/.config/mcpvisor/config.json (ConfigFile; with no home at all, a
// path that cannot be made, so that nothing is read from or written to a
// directory another user may have put there).
func DefaultConfigFile() string {
	f, err := ConfigFile()
	if err != nil {
		return filepath.Join(NoHome, ".config", "mcpvisor", "config.json")
	}
	return f
}

// ConfigFile is DefaultConfigFile, or an error that says why there is
// none: no XDG_CONFIG_HOME and no home directory. With no home, a
// directory of this user's under the system temp dir (mcpvisor-UID, made
// 0700 and checked to be this user's alone) stands in for it; never a
// shared path.
func ConfigFile() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "mcpvisor", "config.json"), nil
	}
	home, err := base()
	if err != nil {
		return "", fmt.Errorf("where is mcpvisor's config? %w; set XDG_CONFIG_HOME or HOME, or pass --config", err)
	}
	return filepath.Join(home, ".config", "mcpvisor", "config.json"), nil
}

// NoHome is the base of the defaults when there is no home directory and
// no private directory of the user's: a path that does not exist and that
// only root could make.
const NoHome = "/nonexistent/mcpvisor-has-no-home"

// base is the user's home directory, else a directory of this user's
// alone under the system temp dir (bridge.UserTempDir, the one the socket
// falls back to), else an error.
func base() (string, error) {
	if home, err := Home(); err == nil {
		return home, nil
	}
	dir, err := bridge.UserTempDir()
	if err != nil {
		return "", fmt.Errorf("no home directory (HOME is not set, and the user database has none), and %w", err)
	}
	return dir, nil
}

// DaemonStateDir is the state directory a daemon serving cfg is told
// (--state-dir) by what launches it later — a service manager, a client
// launching connect — or "" when its config sets its own stateDir
// (configured), which serve reads there. It is serve's default as it is here and now: the
// environment of a service manager or of a client may have no
// XDG_STATE_HOME, or another (Codex clears it), and connect and the
// daemon must agree on the one directory, where the socket is.
func DaemonStateDir(configured string) string {
	if configured != "" {
		return ""
	}
	d := DefaultStateDir()
	if abs, err := filepath.Abs(d); err == nil {
		d = abs
	}
	return d
}

// DefaultStateDir is $XDG_STATE_HOME/mcpvisor, else
// ~/.local/state/mcpvisor (StateDir; with no home at all, a path that
// cannot be made: never a directory another user may have put in a
// shared temp dir).
func DefaultStateDir() string {
	d, err := StateDir()
	if err != nil {
		return filepath.Join(NoHome, ".local", "state", "mcpvisor")
	}
	return d
}

// StateDir is DefaultStateDir, or an error that says why there is
// none: no XDG_STATE_HOME, no home directory, and no private directory of
// the user's under the system temp dir (base).
func StateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mcpvisor"), nil
	}
	base, err := base()
	if err != nil {
		return "", fmt.Errorf("where is mcpvisor's state directory? %w; set XDG_STATE_HOME or HOME, or pass --state-dir", err)
	}
	return filepath.Join(base, ".local", "state", "mcpvisor"), nil
}
