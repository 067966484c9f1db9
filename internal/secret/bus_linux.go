package secret

import (
	"os"
	"path/filepath"
)

// keyringPossible reports whether the Secret Service may be asked: only
// when a session bus is there. Without one, godbus would launch a bus of
// its own (dbus-launch) that outlives mcpvisor.
func keyringPossible() bool {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") != "" {
		return true
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		if fi, err := os.Stat(filepath.Join(dir, "bus")); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return true
		}
	}
	return false
}
