package main

import (
	"os"
	"path/filepath"
)

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
