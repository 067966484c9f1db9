package main

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
)

// userHome is the user's home directory: $HOME, else the user database's
// (a client or a service manager may start mcpvisor without HOME).
func userHome() (string, error) {
	if home, err := os.UserHomeDir(); err == nil {
		return home, nil
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
		return u.HomeDir, nil
	}
	return "", errors.New("no home directory: HOME is not set, and the user database has none for this user")
}

// defaultConfigFile is the user's mcpvisor configuration, which import
// fills and connect serves: $XDG_CONFIG_HOME/mcpvisor/config.json, else
// ~/.config/mcpvisor/config.json (else config.json under the system temp
// dir, when there is no home).
func defaultConfigFile() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "mcpvisor", "config.json")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".config", "mcpvisor", "config.json")
	}
	return filepath.Join(os.TempDir(), "mcpvisor", "config.json")
}

// daemonStateDir is the state directory a daemon serving cfg is told
// (--state-dir) by what launches it later — a service manager, a client
// launching connect — or "" when its config sets its own stateDir
// (configured), which serve reads there. It is serve's default as it is here and now: the
// environment of a service manager or of a client may have no
// XDG_STATE_HOME, or another (Codex clears it), and connect and the
// daemon must agree on the one directory, where the socket is.
func daemonStateDir(configured string) string {
	if configured != "" {
		return ""
	}
	d := defaultStateDir()
	if abs, err := filepath.Abs(d); err == nil {
		d = abs
	}
	return d
}
