package status

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/launch"
)

func TestPsTable(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := admin.Servers{
		Servers: []fleet.Status{
			{Name: "files", State: "running", PID: 42, MemoryBytes: 52 << 20, StartedAt: now.Add(-90 * time.Second), LastActivity: now.Add(-5 * time.Second), Spawns: 1},
			{Name: "memory", State: "dormant", Spawns: 2},
		},
		Totals: admin.Totals{Total: 2, Active: 1, Dormant: 1, ByState: map[string]int{"running": 1, "dormant": 1}, MemoryBytes: 52 << 20},
	}
	var b strings.Builder
	if err := printPs(&b, st, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if f := strings.Fields(lines[0]); f[3] != "MEMORY" {
		t.Fatalf("header %q", lines[0])
	}
	if f := strings.Fields(lines[1]); f[0] != "files" || f[2] != "42" || f[3]+" "+f[4] != "52.0 MiB" {
		t.Fatalf("running row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "memory" || f[2] != "-" || f[3] != "-" {
		t.Fatalf("dormant row %q", lines[2])
	}
	if !strings.Contains(b.String(), "2 servers: 1 active, 1 dormant (running 1, dormant 1), 52.0 MiB resident") {
		t.Fatalf("summary:\n%s", b.String())
	}
}

// ps names a server's warning and its held tools under the table.
func TestPsWarnings(t *testing.T) {
	st := admin.Servers{Servers: []fleet.Status{
		{Name: "files", State: "running", Learned: true, Warning: "it lists no tools where it had 4: serving none until it lists them again"},
		{Name: "memory", State: "dormant", Learned: true, PendingDefinitions: 2},
		{Name: "quiet", State: "dormant", Learned: true},
	}}
	var b strings.Builder
	if err := printPs(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "warnings:\n  files: it lists no tools where it had 4") ||
		!strings.Contains(out, "  memory: 2 tool(s) held back until approved (mcpvisor tools diff memory)") ||
		strings.Contains(out, "  quiet:") {
		t.Fatalf("ps printed:\n%s", out)
	}
}

// A long last error, with multi-byte text where it is cut and a second
// line, keeps ps and inspect one valid line per row: cut by characters,
// its first line only.
func TestLongLastErrorKeepsRowsWhole(t *testing.T) {
	msg := strings.Repeat("x", 57) + "ééé and more\nsecond line of stderr"
	now := time.Now()
	var b strings.Builder
	st := admin.Servers{Servers: []fleet.Status{{Name: "a", State: "failed", LastError: msg}}}
	if err := printPs(&b, st, now); err != nil {
		t.Fatal(err)
	}
	if err := printInstances(&b, []fleet.InstanceStatus{{Shared: true, State: "failed", LastError: msg}}, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "second line") || !utf8.ValidString(out) || strings.Count(out, strings.Repeat("x", 57)+"éé") != 2 {
		t.Fatalf("rows:\n%s", out)
	}
}

// ps lists how each server run through a package launcher starts: the
// flattened command in short, or as written and why, and says when the
// running process was started otherwise.
func TestPsLaunches(t *testing.T) {
	st := admin.Servers{Servers: []fleet.Status{
		{Name: "everything", State: "dormant", Launcher: &launch.Status{Name: "npx", Flattened: true, Runs: "npx → node …/server-everything@2026.8.31"}},
		{Name: "files", State: "running", PID: 7, Launcher: &launch.Status{Name: "npx", Flattened: true, Runs: "npx → node …/server-filesystem@2026.8.31", Last: "as written"}},
		{Name: "memory", State: "new", Launcher: &launch.Status{Name: "npm exec", Reason: "not installed: npm would install @modelcontextprotocol/server-memory@2026.8.31"}},
		{Name: "plain", State: "new"},
	}}
	var b strings.Builder
	if err := printPs(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"package launchers (flattened: the launcher's program runs directly):\n",
		"  everything  npx → node …/server-everything@2026.8.31\n",
		"  files       npx → node …/server-filesystem@2026.8.31 (the running process was started as written: this applies from its next start)\n",
		"  memory      npm exec as written: not installed: npm would install @modelcontextprotocol/server-memory@2026.8.31\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ps lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "  plain ") {
		t.Errorf("ps lists a server that is no launcher:\n%s", out)
	}
	b.Reset()
	if err := printPs(&b, admin.Servers{Servers: st.Servers[3:]}, time.Now()); err != nil || strings.Contains(b.String(), "package launchers") {
		t.Errorf("ps with no launcher:\n%s", b.String())
	}
}
