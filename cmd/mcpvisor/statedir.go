package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// defaultStateDir is $XDG_STATE_HOME/mcpvisor, else
// ~/.local/state/mcpvisor (userStateDir; with no home at all, a path that
// cannot be made: never a directory another user may have put in a
// shared temp dir).
func defaultStateDir() string {
	d, err := userStateDir()
	if err != nil {
		return filepath.Join(noHome, ".local", "state", "mcpvisor")
	}
	return d
}

// userStateDir is defaultStateDir, or an error that says why there is
// none: no XDG_STATE_HOME, no home directory, and no private directory of
// the user's under the system temp dir (userBase).
func userStateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mcpvisor"), nil
	}
	base, err := userBase()
	if err != nil {
		return "", fmt.Errorf("where is mcpvisor's state directory? %w; set XDG_STATE_HOME or HOME, or pass --state-dir", err)
	}
	return filepath.Join(base, ".local", "state", "mcpvisor"), nil
}
