package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/service"
)

// withService installs a stand-in of the user service for w: a unit
// written by mcpvisor service install (its marker) where systemd reads
// it, and first on connect's PATH a systemctl that logs its arguments and
// then runs script. It returns the log.
func withService(t *testing.T, w *connectWorld, script string) (calls string) {
	t.Helper()
	unit := filepath.Join(w.home, "xdg", "systemd", "user", service.Unit)
	if err := os.MkdirAll(filepath.Dir(unit), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unit, []byte("# "+service.Marker+"\n[Service]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(w.home, "fake-bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	calls = filepath.Join(w.home, "calls")
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\necho \"$@\" >> "+calls+"\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	w.env = append(w.env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return calls
}

// With the user service installed, a connect that finds no daemon has
// the service manager start the service (systemctl --user start), and
// reaches it: it starts no daemon of its own, which would take the socket
// from the service as it comes up.
func TestConnectStartsTheInstalledService(t *testing.T) {
	w := newConnectWorld(t)
	mcpvisor, _ := binaries(t)
	// The manager's start: the service's serve, which stays (no
	// --exit-when-unused), its output away from systemctl's.
	calls := withService(t, w, `[ "$*" = "--user start mcpvisor.service" ] && "`+mcpvisor+`" serve --config "`+w.cfg+`" --state-dir "`+w.state+`" --listen 127.0.0.1:0 >"`+filepath.Join(w.home, "service.log")+`" 2>&1 &
exit 0
`)
	p := w.raw(t)
	p.initialize(t)
	if got := readCalls(t, calls); got != "--user start mcpvisor.service\n" {
		t.Errorf("systemctl was asked:\n%s", got)
	}
	d := w.daemons()
	if len(d) != 1 || slices.Contains(cmdlineOf(d[0]), "--exit-when-unused") {
		t.Errorf("daemons %v (%q): want the service's alone", d, cmdlineOf(d[0]))
	}
	p.in.Close()
	if code := p.exit(t, 10*time.Second); code != 0 || p.stderr.String() != "" {
		t.Errorf("connect: exit %d; stderr:\n%s", code, p.stderr)
	}
}

// A service that cannot be started (systemd gave up on it) is said on
// stderr, and connect starts a daemon of its own, as with no service:
// in the user's home, not in the client's working directory.
func TestConnectFallsBackWhenTheServiceFails(t *testing.T) {
	w := newConnectWorld(t)
	calls := withService(t, w, "echo 'Job for mcpvisor.service failed.' >&2\nexit 1\n")
	p := w.rawIn(t, t.TempDir())
	p.initialize(t)
	if got := readCalls(t, calls); got != "--user start mcpvisor.service\n" {
		t.Errorf("systemctl was asked:\n%s", got)
	}
	if s := p.stderr.String(); !strings.Contains(s, "systemctl --user start mcpvisor.service failed") || !strings.Contains(s, "Job for mcpvisor.service failed.") || !strings.Contains(s, "starting a daemon of its own") {
		t.Errorf("connect's stderr does not say why it starts its own daemon:\n%s", s)
	}
	d := w.daemons()
	if len(d) != 1 || !slices.Contains(cmdlineOf(d[0]), "--exit-when-unused") {
		t.Fatalf("daemons %v: want connect's own", d)
	}
	if cwd, err := os.Readlink("/proc/" + strconv.Itoa(d[0]) + "/cwd"); err != nil || cwd != w.home {
		t.Errorf("the daemon connect started runs in %q (%v), want the home directory %s", cwd, err, w.home)
	}
	p.in.Close()
	if code := p.exit(t, 10*time.Second); code != 0 {
		t.Errorf("connect: exit %d; stderr:\n%s", code, p.stderr)
	}
}
