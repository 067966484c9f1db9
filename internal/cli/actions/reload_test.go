package actions

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// The reload table: a row per server that changed, with its fields and how
// its drain went — stopped, cut at the bound, or still draining when the
// caller stopped waiting — and a count of the unchanged ones.
func TestPrintReloadTable(t *testing.T) {
	rep := admin.ReloadReport{Trigger: "api", Applied: true, Result: &fleet.ReloadResult{Servers: []fleet.ServerResult{
		{ServerChange: config.ServerChange{Name: "a", Action: config.ActionUnchanged}},
		{ServerChange: config.ServerChange{Name: "b", Action: config.ActionRestarted, Fields: []string{"env.TOKEN", "cwd"}}, Drained: &fleet.Drained{Stopped: 2, Cut: 1}},
		{ServerChange: config.ServerChange{Name: "c", Action: config.ActionRemoved}, Drained: &fleet.Drained{Pending: true}},
		{ServerChange: config.ServerChange{Name: "d", Action: config.ActionAdded}},
	}}}
	var b strings.Builder
	printReload(&b, rep, false)
	out := b.String()
	for _, want := range []string{"env.TOKEN, cwd", "2 stopped, 1 cut", "removed", "draining", "added", "1 server(s) unchanged"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "a ") {
			t.Errorf("an unchanged server has a row:\n%s", out)
		}
	}
}
