// Package service writes, installs and removes the user service that runs
// `mcpvisor serve` at login: a systemd user unit on Linux, a launchd agent
// on macOS. What is written is a pure function of the target OS, the
// paths and the settings (Definition), so that both are golden-tested on
// any OS; what is run goes through a Runner, so that tests check the exact
// argv without running systemctl or launchctl.
package service

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Unit is the systemd unit's name, Label the launchd job's.
const (
	Unit  = "mcpvisor.service"
	Label = "io.github.mcpvisor.serve"
)

// Marker is in every file this package writes: Uninstall removes no file
// without it unless forced.
const Marker = "Written by mcpvisor service install"

// DefaultShutdownTimeout is the --shutdown-timeout the service gives
// mcpvisor serve (its own default too): the first SIGTERM stops every
// server within it, then what is left is killed.
const DefaultShutdownTimeout = 10 * time.Second

// stopMargin is how much longer than mcpvisor's own shutdown bound the
// service manager waits before it SIGKILLs what is left: mcpvisor's
// forced kill and the reaping after it (process stops are bounded by the
// same deadline) fit well within it, so the manager's kill is for an
// mcpvisor that hangs, never for one that is stopping its servers.
const stopMargin = 20 * time.Second

// ErrUnsupported: the OS has no service manager this package knows.
var ErrUnsupported = errors.New("mcpvisor service supports Linux (systemd user units) and macOS (launchd agents)")

// Spec is everything a service definition depends on. Paths are absolute.
type Spec struct {
	GOOS string // "linux" or "darwin"
	// Executable is the mcpvisor binary the service runs.
	Executable string
	// Config is the configuration file serve is given (--config).
	Config string
	// StateDir, if not "", is given to serve as --state-dir; LogDir is
	// where launchd writes serve's output (mcpvisor.log); systemd sends it
	// to the journal.
	StateDir string
	LogDir   string
	// ShutdownTimeout is serve's --shutdown-timeout (0:
	// DefaultShutdownTimeout); the manager's stop timeout is above it.
	ShutdownTimeout time.Duration
	// Path is the PATH the servers are looked up in and run with, "" for
	// the service manager's (systemd's user manager and launchd give a
	// minimal one: /usr/bin:/bin, where npx and uvx are seldom found).
	Path string
}

func (s Spec) shutdownTimeout() time.Duration {
	if s.ShutdownTimeout <= 0 {
		return DefaultShutdownTimeout
	}
	return s.ShutdownTimeout
}

// stopTimeout is how long the manager waits after its SIGTERM.
func (s Spec) stopTimeout() time.Duration { return s.shutdownTimeout() + stopMargin }

// args is the command line the service runs.
func (s Spec) args() []string {
	a := []string{s.Executable, "serve", "--config", s.Config}
	if s.StateDir != "" {
		a = append(a, "--state-dir", s.StateDir)
	}
	return append(a, "--shutdown-timeout", s.shutdownTimeout().String())
}

// check refuses what cannot be written in a definition.
func (s Spec) check() error {
	for _, p := range []struct{ name, v string }{{"the mcpvisor binary", s.Executable}, {"the config file", s.Config}, {"the state directory", s.StateDir}, {"the log directory", s.LogDir}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			return fmt.Errorf("%s: %q is not an absolute path", p.name, p.v)
		}
		if strings.ContainsFunc(p.v, isControl) {
			return fmt.Errorf("%s: %q has a control character, which a service definition cannot hold", p.name, p.v)
		}
	}
	if strings.ContainsFunc(s.Path, isControl) {
		return fmt.Errorf("PATH %q has a control character, which a service definition cannot hold", s.Path)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Location is where the definition for goos goes: the systemd user unit
// under $XDG_CONFIG_HOME/systemd/user (xdgConfigHome "" means
// home/.config), the launchd agent under home/Library/LaunchAgents.
func Location(goos, home, xdgConfigHome string) (string, error) {
	switch goos {
	case "linux":
		if xdgConfigHome == "" {
			xdgConfigHome = filepath.Join(home, ".config")
		}
		return filepath.Join(xdgConfigHome, "systemd", "user", Unit), nil
	case "darwin":
		return filepath.Join(home, "Library", "LaunchAgents", Label+".plist"), nil
	}
	return "", fmt.Errorf("%w, not %s", ErrUnsupported, goos)
}

// Definition is the file that runs s: a systemd unit for linux, a launchd
// property list for darwin. It depends on s alone.
func Definition(s Spec) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	switch s.GOOS {
	case "linux":
		return systemdUnit(s), nil
	case "darwin":
		return launchdPlist(s), nil
	}
	return nil, fmt.Errorf("%w, not %s", ErrUnsupported, s.GOOS)
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
