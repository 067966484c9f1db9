package status

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// ps warns of the trees a server's memory limit killed, the forks its
// pids limit refused and the limits this machine cannot enforce; a server
// whose limits hold quietly gets no note.
func TestPsLimitNotes(t *testing.T) {
	st := admin.Servers{Servers: []fleet.Status{
		{Name: "bloat", State: "restarting", OOMKills: 2, PIDsLimitHits: 7, Limits: &fleet.LimitsStatus{MemoryBytes: 64 << 20, PIDs: 32}},
		{Name: "capped", State: "running", Limits: &fleet.LimitsStatus{MemoryBytes: 64 << 20}},
		{Name: "loose", State: "dormant", Limits: &fleet.LimitsStatus{CPU: 1, PIDs: 8, NotEnforced: []string{"cpu: no cpu controller", "pids: no pids controller"}}},
	}}
	var b strings.Builder
	if err := printPs(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"  bloat: oom: killed 2 time(s) by its memory limit (64 MiB)\n",
		"  bloat: its pids limit (32) refused 7 fork(s)\n",
		"  loose: limits not enforced on this machine, it runs without them: cpu, pids (mcpvisor inspect loose, or mcpvisor doctor, says why)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ps does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "  capped:") {
		t.Errorf("a server within its limits gets a note:\n%s", out)
	}
}

// inspect shows a server's limits, those not enforced and why, its OOM
// kills, and an end its memory limit caused as oom.
func TestPrintDetailLimits(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	code := -1
	d := admin.Detail{
		Status: fleet.Status{Name: "b", State: "running", PID: 9, MemoryBytes: 40 << 20, MemoryPeakBytes: 63 << 20, CPUSeconds: 1.25, OOMKills: 1,
			Limits: &fleet.LimitsStatus{MemoryBytes: 64 << 20, ChargedBytes: 43<<20 + 1<<19, PIDs: 32, CPU: 0.5, MaxIdleMemoryBytes: 32 << 20, NotEnforced: []string{"cpu: no cpu controller here"}}},
		Kind:    config.KindStdio,
		Sharing: config.SharingShared,
		History: []fleet.Exit{{Time: now, Stage: fleet.StageServing, Code: &code, Signal: "killed", Kind: "oom", OOMKills: 1, Error: "server b was killed by its memory limit (oom: signal killed)"}},
	}
	var b strings.Builder
	if err := printDetail(&b, d, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	flat := strings.Join(strings.Fields(out), " ") // the table's padding aside
	for _, want := range []string{
		"Memory: 40.0 MiB resident, peak 63.0 MiB",
		"CPU: 1.25 s",
		"Limits: memory 64 MiB (43.5 MiB counted against it now), pids 32, cpu 0.5; asleep early when idle above 32 MiB",
		"Not enforced: cpu: no cpu controller here — it runs without this limit",
		"OOM kills: 1 (trees its memory limit killed: exit kind oom)",
		"serving oom exit -1 killed: server b was killed by its memory limit",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("inspect does not say %q:\n%s", want, out)
		}
	}
}
