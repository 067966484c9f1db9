package service

import (
	"bytes"
	"context"
	"os"
)

// Installed is the definition mcpvisor service install wrote for this
// user, if there is one: the file where h's service manager reads it,
// carrying Marker. A client's connect asks the manager to start that
// service (Start) rather than start a daemon of its own, which would take
// the socket from the service as it comes up.
func Installed(h Host) (path string, ok bool) {
	path, err := Location(h.GOOS, h.Home, h.XDGConfigHome)
	if err != nil {
		return "", false
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Contains(b, []byte(Marker)) {
		return path, false
	}
	return path, true
}

// StartCommand is the command that starts the installed service now:
// systemctl --user start (a no-op if it runs), launchctl kickstart (the
// same without -k).
func StartCommand(h Host) []string {
	if h.GOOS == "darwin" {
		return []string{"launchctl", "kickstart", launchdTarget(h)}
	}
	return []string{"systemctl", "--user", "start", Unit}
}

// Start has h's service manager start the installed service now, through
// h.Runner; it prints nothing (h.Out is not used). Its failure names the
// command and quotes what it printed.
func Start(ctx context.Context, h Host) error {
	return runQuiet(ctx, h, StartCommand(h))
}
