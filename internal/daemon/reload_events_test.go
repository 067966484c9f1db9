package daemon

import (
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

var updateEvents = flag.Bool("update-events", false, "write testdata/events from the events the tests emit")

// TestReloadEventsJSON keeps the JSON of the reload events, as
// /api/events sends it, in testdata/events.
func TestReloadEventsJSON(t *testing.T) {
	a := &app{log: slog.New(slog.NewTextHandler(io.Discard, nil)), events: admin.RestoreEventLog(10, nil)}
	r := &reloader{a: a}
	r.report(admin.ReloadReport{Trigger: "api", Error: "the new configuration has errors", Problems: []admin.ReloadProblem{{Path: "servers.a.command", Line: 3, Column: 7, Message: "required"}}})
	r.report(admin.ReloadReport{Trigger: "signal", Error: "cannot read the file"})
	r.report(admin.ReloadReport{Trigger: "watch", Applied: true, Result: &fleet.ReloadResult{
		Servers:      []fleet.ServerResult{{ServerChange: config.ServerChange{Name: "a", Action: config.ActionUnchanged}}, {ServerChange: config.ServerChange{Name: "b", Action: config.ActionAdded}}},
		NeedsRestart: []string{"admin.listen"},
		TookMs:       1.5,
	}})
	r.report(admin.ReloadReport{Trigger: "api", Applied: true, Result: &fleet.ReloadResult{TookMs: 2}})
	got := map[string][]string{}
	for i, e := range a.events.Events() {
		e.ID = "EPOCH-" + string(rune('1'+i))
		e.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got[string(e.Type)] = append(got[string(e.Type)], string(data))
	}
	for _, typ := range []string{"reload-rejected", "reloaded"} {
		path := filepath.Join("testdata", "events", typ+".json")
		text := strings.Join(got[typ], "\n") + "\n"
		if *updateEvents {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -update-events writes it)", err)
		}
		if string(want) != text {
			t.Errorf("%s: the events' JSON changed:\ngot\n%swant\n%s", path, text, want)
		}
	}
}
