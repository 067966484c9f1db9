package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/testserver/hydra"
)

func TestMain(m *testing.M) {
	proc.RunShimIfRequested()
	// Under -race the race runtime sleeps a second in every exit of a
	// race-built process; this binary's children are (the shim, and the middle process of the abandon tests), and
	// the second is not what their exit costs in production.
	os.Setenv("GORACE", "atexit_sleep_ms=0")

	if os.Getenv(middleEnv) != "" {
		os.Exit(runMiddle())
	}
	if os.Getenv(floodEnv) != "" {
		os.Exit(runFlood())
	}
	code := m.Run()
	// The tests' Hydra (team_*_test.go), if one ran.
	hydra.StopShared()
	os.Exit(code)
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "mcpvisor ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %q %v", out, err)
	}
}

func TestDoctorReportsEveryLayer(t *testing.T) {
	out, err := run(t, "doctor", "--state-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, layer := range []string{proc.LayerProcessGroup, proc.LayerPidfd, proc.LayerPdeathsig, proc.LayerSubreaper, proc.LayerPIDNamespace, proc.LayerCgroup, proc.LayerStaleSweep} {
		if !strings.Contains(out, layer) {
			t.Errorf("doctor does not mention %s:\n%s", layer, out)
		}
	}
	if !strings.Contains(out, "[on ] process-group") {
		t.Errorf("process groups must always be on:\n%s", out)
	}
	if !strings.Contains(out, "If mcpvisor is SIGKILLed") {
		t.Errorf("doctor does not say what a SIGKILL leaves:\n%s", out)
	}
}

func TestDoctorJSON(t *testing.T) {
	out, err := run(t, "doctor", "--json", "--state-dir", t.TempDir())
	if err != nil || !strings.Contains(out, `"layers"`) || !strings.Contains(out, `"active": true`) {
		t.Fatalf("doctor --json: %q %v", out, err)
	}
}

func TestUnknownCommandFails(t *testing.T) {
	if _, err := run(t, "no-such-command"); err == nil {
		t.Fatal("unknown command accepted")
	}
}
