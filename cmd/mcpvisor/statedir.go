package main

import (
	"os"
	"path/filepath"
)

// defaultStateDir is $XDG_STATE_HOME/mcpvisor, else ~/.local/state/mcpvisor,
// else a directory under the system temp dir.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mcpvisor")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "mcpvisor")
	}
	return filepath.Join(os.TempDir(), "mcpvisor-state")
}
