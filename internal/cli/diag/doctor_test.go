package diag

import (
	"bytes"

	"github.com/spf13/cobra"

	"encoding/json"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// doctor says how each kind of limit is enforced on this machine (which
// has the cgroup v1 memory, pids and cpu controllers: the test fails if
// it finds them missing), and with --config checks the servers' limits.
func TestDoctorReportsLimits(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{
		"capped":{"command":"x","limits":{"memory":"64MiB","pids":32,"cpu":0.5}},
		"free":{"command":"y"},
		"remote":{"url":"https://h.example/mcp"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// No session bus: the secrets are in the file, and doctor says why.
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	state := t.TempDir()
	out, err := run(t, "doctor", "--state-dir", state, "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"secrets (${keyring:NAME}): file " + filepath.Join(state, "secrets.json") + " (0600); not the OS keyring: no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)\n",
		"resource limits:",
		"memory  enforced     cgroup v",
		"pids    enforced     cgroup v",
		"cpu     enforced     cgroup v",
		"usage: ",
		"Resource limits of " + cfg + ": \n  capped: memory 64 MiB, pids 32, cpu 0.5: enforced\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "free:") || strings.Contains(out, "remote:") || strings.Contains(out, "WARNING") {
		t.Errorf("doctor names servers without limits, or warns:\n%s", out)
	}

	out, err = run(t, "doctor", "--json", "--state-dir", t.TempDir(), "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var rep doctorJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if len(rep.Limits) != 3 || len(rep.Servers) != 1 || rep.Servers[0].Name != "capped" || rep.Servers[0].NotEnforced != nil || !strings.HasPrefix(rep.Secrets, "file ") {
		t.Errorf("doctor --json: limits %+v, servers %+v", rep.Limits, rep.Servers)
	}

	if _, err := run(t, "doctor", "--state-dir", t.TempDir(), "--config", filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("doctor with a missing config succeeded")
	}
}

// Where a kind cannot be enforced, doctor warns of each server that has
// it, and why.
func TestDoctorWarnsOfLimitsNotEnforced(t *testing.T) {
	rep := proc.Report{OS: "linux", Limits: []proc.Layer{
		{Name: proc.LimitMemory, Detail: "the cgroup v2 hierarchy at /sys/fs/cgroup has no memory controller, only cpu"},
		{Name: proc.LimitPIDs, Active: true, Detail: "cgroup v2 pids controller"},
		{Name: proc.LimitCPU, Active: true, Detail: "cgroup v2 cpu controller"},
	}}
	cfg, err := config.Parse([]byte(`{"mcpServers":{"a":{"command":"x","limits":{"memory":"1GiB","pids":10}},"b":{"command":"x","limits":{"cpu":1}}}}`), "c.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := printDoctor(&b, rep, "/state", cfg, "file /state/secrets.json (0600)", nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"memory  not enforced the cgroup v2 hierarchy at /sys/fs/cgroup has no memory controller",
		"  WARNING a: its memory limit cannot be enforced here, and it runs without it: the cgroup v2 hierarchy at /sys/fs/cgroup has no memory controller, only cpu\n",
		"  b: cpu 1: enforced\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WARNING a: its pids") {
		t.Errorf("warned of an enforced limit:\n%s", out)
	}
}

// run runs the diag command line args, its output and errors in one
// buffer, as the root command runs it.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var cmd *cobra.Command
	switch args[0] {
	case "doctor":
		cmd = NewCmdDoctor(cmdutil.IOStreams{})
	case "validate":
		cmd = NewCmdValidate(cmdutil.IOStreams{})
	default:
		t.Fatalf("not a diag command line: %q", args)
	}
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args[1:])
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}
