package status

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// inspect shows the containment layers a stdio server's processes run
// under (those on, then those off), and a per-session server's instances
// as a table, each session by its label; an http server's containment
// says it has no local process, and a shared server with its one
// instance gets no table.
func TestPrintDetailContainmentAndInstances(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	d := admin.Detail{
		Status:  fleet.Status{Name: "p", State: "running", Sessions: 2},
		Kind:    config.KindStdio,
		Sharing: config.SharingPerSession,
		Containment: []proc.Layer{
			{Name: proc.LayerProcessGroup, Active: true, Detail: "own process group"},
			{Name: proc.LayerCgroup, Active: true, Detail: "own cgroup"},
			{Name: proc.LayerPIDNamespace, Active: false, Detail: "no user namespaces"},
		},
		Instances: []fleet.InstanceStatus{
			{Shared: true, State: "dormant", Spawns: 1},
			{Session: "1a2b3c4d", State: "running", PID: 4242, StartedAt: now.Add(-3 * time.Minute), LastActivity: now.Add(-5 * time.Second), InFlight: 1, Spawns: 1},
			{Session: "9f8e7d6c", State: "failed", Spawns: 3, LastError: "exit code 1"},
		},
	}
	var b strings.Builder
	if err := printDetail(&b, d, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("inspect p:\n%s", out)
	lines := strings.Split(out, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		t.Fatalf("no line %q in:\n%s", prefix, out)
		return ""
	}
	if l := find("Containment:"); !strings.Contains(l, "process-group, cgroup-v2 (off: pid-namespace)") {
		t.Errorf("containment line %q", l)
	}
	if l := find("Instances:"); l != "Instances:" {
		t.Errorf("instances heading %q", l)
	}
	if l := find("Sessions:"); !strings.Contains(l, "2, an instance each") {
		t.Errorf("sessions line %q", l)
	}
	if l := find("INSTANCE"); !strings.Contains(l, "STATE") || !strings.Contains(l, "PID") || !strings.Contains(l, "IN-FLIGHT") {
		t.Errorf("instances header %q", l)
	}
	if l := find("shared"); !strings.Contains(l, "dormant") {
		t.Errorf("shared instance row %q", l)
	}
	if l := find("session 1a2b3c4d"); !strings.Contains(l, "running") || !strings.Contains(l, "4242") || !strings.Contains(l, "3m0s") {
		t.Errorf("session row %q", l)
	}
	if l := find("session 9f8e7d6c"); !strings.Contains(l, "failed") || !strings.Contains(l, "exit code 1") {
		t.Errorf("session row %q", l)
	}

	remote := admin.Detail{
		Status:         fleet.Status{Name: "r", State: "new"},
		Kind:           config.KindHTTP,
		Sharing:        config.SharingShared,
		Containment:    []proc.Layer{},
		NoLocalProcess: "no local process to contain: an http server runs elsewhere",
		Instances:      []fleet.InstanceStatus{{Shared: true, State: "new"}},
	}
	b.Reset()
	if err := printDetail(&b, remote, now); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	t.Logf("inspect r:\n%s", out)
	if !strings.Contains(out, "Containment:") || !strings.Contains(out, "no local process") || strings.Contains(out, "Instances:") {
		t.Errorf("http server's detail:\n%s", out)
	}
}

// inspect says what a launcher server's next start runs — flattened, in
// full and in short, what its spec resolved to and when — or why it runs
// as written; and when the running process was started otherwise.
func TestPrintDetailLaunch(t *testing.T) {
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	d := admin.Detail{
		Status: fleet.Status{Name: "everything", State: "running", PID: 77, Launcher: &launch.Status{
			Name: "npx", Flattened: true, Runs: "npx → node …/server-everything@2026.8.31",
			Command: []string{"/usr/bin/node", "/root/.npm/_npx/5b2d/node_modules/@modelcontextprotocol/server-everything/dist/index.js"},
			Spec:    "@modelcontextprotocol/server-everything", Package: "@modelcontextprotocol/server-everything", Version: "2026.8.31",
			ResolvedAt: now.Add(-2 * time.Hour), Last: "as written"}},
		Kind:   config.KindStdio,
		Launch: "npx -y @modelcontextprotocol/server-everything",
	}
	var b strings.Builder
	if err := printDetail(&b, d, now); err != nil {
		t.Fatal(err)
	}
	out := squeeze(b.String())
	for _, want := range []string{
		"Runs as: npx → node …/server-everything@2026.8.31 (flattened: the launcher's program runs directly)",
		"Runs: /usr/bin/node /root/.npm/_npx/5b2d/node_modules/@modelcontextprotocol/server-everything/dist/index.js (then the server's arguments)",
		"Resolved: @modelcontextprotocol/server-everything@2026.8.31 (from @modelcontextprotocol/server-everything), 2h0m0s ago (mcpvisor refresh everything resolves it again)",
		"Running: started as written; the above applies from its next start",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
	d.Status.Launcher = &launch.Status{Name: "npx", Reason: "npx command line not understood: option -c is not followed when flattening (it runs a shell command line)"}
	b.Reset()
	if err := printDetail(&b, d, now); err != nil {
		t.Fatal(err)
	}
	if out := squeeze(b.String()); !strings.Contains(out, "Runs as: npx as written: npx command line not understood: option -c") || strings.Contains(out, "Running:") {
		t.Errorf("inspect of a server as written:\n%s", out)
	}
}

// inspect says what mcpvisor declares to the server as its client, and to
// whom: the shared process, each session's, each request; nothing.
func TestPrintDetailDeclares(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	all := json.RawMessage(`{"roots":{"listChanged":true},"sampling":{},"elicitation":{}}`)
	for _, tc := range []struct {
		name     string
		d        admin.Detail
		want     string
		notWant  string
		wantList string
	}{
		{"shared", admin.Detail{Sharing: config.SharingShared, Declares: all},
			"the process every client shares", "", "roots, sampling, elicitation"},
		{"per-session", admin.Detail{Sharing: config.SharingPerSession, Declares: json.RawMessage(`{"elicitation":{},"roots":{}}`)},
			"to each session's process, what its client declared", "sampling", "roots, elicitation"},
		{"modern", admin.Detail{Status: fleet.Status{Era: "2026-07-28"}, Sharing: config.SharingShared, Declares: all},
			"in each request, what its client declared", "", "roots, sampling, elicitation"},
		{"none", admin.Detail{Sharing: config.SharingShared, Declares: json.RawMessage(`{}`)},
			"nothing (clientCapabilities: [])", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.d.Name, tc.d.State, tc.d.Kind = "x", "running", config.KindStdio
			var b strings.Builder
			if err := printDetail(&b, tc.d, now); err != nil {
				t.Fatal(err)
			}
			var line string
			for _, l := range strings.Split(b.String(), "\n") {
				if strings.HasPrefix(l, "Declares:") {
					line = l
				}
			}
			if !strings.Contains(line, tc.want) || !strings.Contains(line, tc.wantList) || tc.notWant != "" && strings.Contains(line, tc.notWant) {
				t.Errorf("declares line %q, want %q and %q", line, tc.want, tc.wantList)
			}
		})
	}
}

// squeeze makes each "Key:   value" line of inspect "Key: value".
func squeeze(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if k, v, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(l, " ") {
			lines[i] = k + ": " + strings.TrimLeft(v, " ")
		}
	}
	return strings.Join(lines, "\n")
}

// The last five ends are shown, newest last, each with how it ended and
// its stderr lines; older ones are left out.
func TestPrintDetailHistory(t *testing.T) {
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	code := 3
	d := admin.Detail{Status: fleet.Status{Name: "x", State: "running"}}
	for i := range 7 {
		e := fleet.Exit{Time: now.Add(time.Duration(i) * time.Minute), Stage: "running", Error: fmt.Sprintf("end %d", i)}
		switch i {
		case 4:
			e.Kind, e.Signal = "oom", "killed"
		case 6:
			e.Code, e.Stderr = &code, []string{"boom", "trace"}
		}
		d.History = append(d.History, e)
	}
	var b strings.Builder
	if err := printDetail(&b, d, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	_, hist, ok := strings.Cut(out, "Last ends (newest last):\n")
	if !ok {
		t.Fatalf("no history:\n%s", out)
	}
	var ends []string
	for _, l := range strings.Split(strings.TrimSpace(hist), "\n") {
		if i := strings.Index(l, "running"); i >= 0 {
			l = l[i:] // past the local time
		}
		ends = append(ends, strings.TrimSpace(l))
	}
	want := []string{"running: end 2", "running: end 3", "running oom killed: end 4", "running: end 5", "running exit 3: end 6", "| boom", "| trace"}
	if len(ends) != len(want) {
		t.Fatalf("history lines %q, want %q", ends, want)
	}
	for i := range want {
		if ends[i] != want[i] {
			t.Errorf("history line %d: %q, want %q", i, ends[i], want[i])
		}
	}
}

// A per-identity server's instances are named by their identity.
func TestPrintDetailPerIdentityInstances(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	d := admin.Detail{
		Status:  fleet.Status{Name: "p", State: "running"},
		Kind:    config.KindStdio,
		Sharing: config.SharingPerIdentity,
		Instances: []fleet.InstanceStatus{
			{Shared: true, State: "dormant"},
			{Session: "identity/ab12", Identity: "ab12", IdentityName: "alice", State: "running", PID: 4242},
		},
	}
	var b strings.Builder
	if err := printDetail(&b, d, now); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "identity alice") || !strings.Contains(out, "4242") {
		t.Errorf("inspect of a per-identity server:\n%s", out)
	}
}
