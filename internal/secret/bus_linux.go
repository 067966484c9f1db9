package secret

import (
	"errors"
	"os"
	"path/filepath"
)

// keyringPossible says why the Secret Service may not be asked: only
// when a session bus is there. Without one, godbus would launch a bus of
// its own (dbus-launch) that outlives mcpvisor.
func keyringPossible() error {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") != "" {
		return nil
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		if fi, err := os.Stat(filepath.Join(dir, "bus")); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
	}
	return errors.New("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)")
}
