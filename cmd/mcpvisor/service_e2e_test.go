package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// runService runs the binary bin with args in this environment, env
// added, and returns its exit code, stdout and stderr.
func runService(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

// serviceHome is a user's home for the service commands: HOME and
// XDG_CONFIG_HOME in a temporary directory, a valid config, and on PATH
// first a systemctl that logs its arguments (one line per call) to the
// file it returns, and does nothing else.
func serviceHome(t *testing.T) (env []string, home, cfg, calls string) {
	t.Helper()
	home = t.TempDir()
	fixture := filepath.Join(home, "fake-bin")
	if err := os.MkdirAll(fixture, 0o755); err != nil {
		t.Fatal(err)
	}
	calls = filepath.Join(home, "calls")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\n"
	for _, name := range []string{"systemctl", "launchctl"} {
		if err := os.WriteFile(filepath.Join(fixture, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg = filepath.Join(home, "my config.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"x":{"command":"echo"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "xdg"), "XDG_STATE_HOME=" + filepath.Join(home, "state"),
		"PATH=" + fixture + string(os.PathListSeparator) + os.Getenv("PATH")}
	return env, home, cfg, calls
}

// mcpvisor service on the real binary (Linux: systemd), its manager a
// stand-in that logs what it is asked: --dry-run prints the unit (this
// binary, the config, the state directory) and the commands, and does
// nothing; install writes the unit where systemd reads user units and
// runs daemon-reload and enable --now; the same install again is a no-op;
// uninstall disables, removes and reloads.
func TestServiceInstallUninstall(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("this test drives systemd's commands (Linux); %s has launchd: see internal/service's tests", runtime.GOOS)
	}
	bin, _ := binaries(t)
	env, home, cfg, calls := serviceHome(t)
	unit := filepath.Join(home, "xdg", "systemd", "user", "mcpvisor.service")
	state := filepath.Join(home, "state", "mcpvisor")

	code, out, stderr := runService(t, bin, env, "service", "install", "--config", cfg, "--dry-run")
	if code != 0 {
		t.Fatalf("dry run: exit %d %s", code, stderr)
	}
	quotedCfg := `"` + cfg + `"` // a space in it: quoted for systemd
	for _, want := range []string{"would write " + unit, "ExecStart=" + bin + " serve --config " + quotedCfg + " --state-dir " + state + " --shutdown-timeout 10s",
		"KillMode=mixed", "would run: systemctl --user daemon-reload", "would run: systemctl --user enable --now mcpvisor.service"} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run does not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Fatalf("the dry run wrote the unit: %v", err)
	}
	if _, err := os.Stat(calls); !os.IsNotExist(err) {
		t.Fatal("the dry run ran systemctl")
	}

	code, out, stderr = runService(t, bin, env, "service", "install", "--config", cfg)
	if code != 0 {
		t.Fatalf("install: exit %d %s\n%s", code, stderr, out)
	}
	written, err := os.ReadFile(unit)
	if err != nil || !strings.Contains(string(written), "ExecStart="+bin+" serve --config "+quotedCfg) {
		t.Fatalf("the unit: %v\n%s", err, written)
	}
	if got := readCalls(t, calls); got != "--user daemon-reload\n--user enable --now mcpvisor.service\n" {
		t.Errorf("systemctl was asked:\n%s", got)
	}
	if !strings.Contains(out, "wrote "+unit) || !strings.Contains(out, "systemctl --user status mcpvisor.service") {
		t.Errorf("install said:\n%s", out)
	}

	if code, out, _ = runService(t, bin, env, "service", "install", "--config", cfg); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Errorf("the same install again: exit %d\n%s", code, out)
	}
	if got := readCalls(t, calls); strings.Count(got, "\n") != 2 {
		t.Errorf("the same install again ran systemctl:\n%s", got)
	}

	// Another state directory: a different unit, refused without --force.
	code, out, stderr = runService(t, bin, env, "service", "install", "--config", cfg, "--state-dir", filepath.Join(home, "elsewhere"))
	if code == 0 || !strings.Contains(stderr, "--force replaces it") || !strings.Contains(out, "+ExecStart=") {
		t.Errorf("a different unit without --force: exit %d\n%s\n%s", code, out, stderr)
	}
	if again, _ := os.ReadFile(unit); !bytes.Equal(again, written) {
		t.Error("the unit changed without --force")
	}

	if code, out, stderr = runService(t, bin, env, "service", "uninstall"); code != 0 {
		t.Fatalf("uninstall: exit %d %s\n%s", code, stderr, out)
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Errorf("the unit is still there: %v", err)
	}
	if got := readCalls(t, calls); !strings.HasSuffix(got, "--user disable --now mcpvisor.service\n--user daemon-reload\n") {
		t.Errorf("systemctl was asked:\n%s", got)
	}
}

func readCalls(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// What install refuses, with the reason, writing and running nothing: a
// config that does not validate (its problem named), a config that is
// not there, a config whose stateDir is relative, and a binary go run
// built in a temporary directory.
func TestServiceInstallRefuses(t *testing.T) {
	bin, _ := binaries(t)
	env, home, _, calls := serviceHome(t)
	bad := filepath.Join(home, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"mcpServers":{"x":{"command":"echo","idleTimeout":"soon"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	relative := filepath.Join(home, "relative.json")
	if err := os.WriteFile(relative, []byte(`{"stateDir":"state","mcpServers":{"x":{"command":"echo"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--config", bad}, 2, []string{"does not validate", bad, "idleTimeout"}},
		{[]string{"--config", filepath.Join(home, "none.json")}, 1, []string{"no config file at " + filepath.Join(home, "none.json")}},
		{[]string{"--config", relative}, 1, []string{`stateDir "state" is relative`}},
		{nil, 1, []string{"no config file at " + filepath.Join(home, "xdg", "mcpvisor", "config.json")}}, // the default: not there
	} {
		code, out, stderr := runService(t, bin, env, append([]string{"service", "install"}, c.args...)...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.code, out, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: the error does not say %q:\n%s", c.args, w, stderr)
			}
		}
	}

	// go run's binary: a copy of mcpvisor under TMPDIR/go-build….
	tmp := t.TempDir()
	goRun := filepath.Join(tmp, "go-build1234", "b001", "exe", "mcpvisor")
	if err := os.MkdirAll(filepath.Dir(goRun), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, bin, goRun)
	cfg := filepath.Join(home, "my config.json")
	code, _, stderr := runService(t, goRun, append(env, "TMPDIR="+tmp), "service", "install", "--config", cfg)
	if code != 2 || !strings.Contains(stderr, "temporary `go run` build") || !strings.Contains(stderr, goRun) {
		t.Errorf("go run's binary: exit %d\n%s", code, stderr)
	}
	// The same binary elsewhere is taken (the check can pass).
	if code, _, stderr := runService(t, goRun, append(env, "TMPDIR="+t.TempDir()), "service", "install", "--config", cfg, "--dry-run"); code != 0 {
		t.Errorf("the same binary, not under TMPDIR: exit %d %s", code, stderr)
	}

	if _, err := os.Stat(filepath.Join(home, "xdg", "systemd")); !os.IsNotExist(err) {
		t.Errorf("a refused install wrote: %v", err)
	}
	if _, err := os.Stat(calls); !os.IsNotExist(err) {
		t.Error("a refused install ran the service manager")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
