package config

import (
	"strings"
	"testing"
)

// limits and maxIdleMemory layer field by field: defaults, then the
// server's own; sizes take units; "unlimited" overrides a default; a
// server with none has nil Limits.
func TestLimits(t *testing.T) {
	cfg := mustParse(t, `{
		"defaults": {"limits": {"memory": "512MiB", "pids": 256}, "maxIdleMemory": "300MB"},
		"mcpServers": {
			"a": {"command": "x"},
			"b": {"command": "x", "limits": {"cpu": 1.5, "pids": 32}},
			"c": {"command": "x", "limits": {"memory": "unlimited", "pids": "unlimited"}, "maxIdleMemory": "unlimited"},
			"d": {"command": "x", "limits": {"memory": 1073741824}, "maxIdleMemory": "1.5 GiB"},
			"e": {"command": "x", "limits": {"memory": "2gb"}, "maxIdleMemory": "64kib"},
			"f": {"command": "x", "limits": {"memory": "3000000"}}
		}}`, LoadOptions{})
	want := map[string]*Limits{
		"a": {Memory: 512 << 20, PIDs: 256, MaxIdleMemory: 300e6},
		"b": {Memory: 512 << 20, PIDs: 32, CPU: 1.5, MaxIdleMemory: 300e6},
		"c": nil,
		"d": {Memory: 1 << 30, PIDs: 256, MaxIdleMemory: 1536 << 20},
		"e": {Memory: 2e9, PIDs: 256, MaxIdleMemory: 64 << 10},
		"f": {Memory: 3e6, PIDs: 256, MaxIdleMemory: 300e6},
	}
	for name, w := range want {
		got := cfg.Server(name).Limits
		if (got == nil) != (w == nil) || got != nil && *got != *w {
			t.Errorf("%s: limits %+v, want %+v", name, got, w)
		}
	}
	if !cfg.Server("b").Limits.Kernel() || cfg.Server("c").Limits.Kernel() {
		t.Error("Kernel()")
	}
	if (&Limits{MaxIdleMemory: 1}).Kernel() {
		t.Error("maxIdleMemory alone is not a kernel limit")
	}
	if l := mustParse(t, `{"mcpServers": {"a": {"command": "x"}}}`, LoadOptions{}).Server("a").Limits; l != nil {
		t.Errorf("no limits configured, yet %+v", l)
	}
	// A remote server runs no process: its limits are ignored, and said so.
	cfg = mustParse(t, `{"defaults": {"limits": {"memory": "1GiB"}}, "mcpServers": {"r": {"url": "https://h.example/mcp", "limits": {"cpu": 1}, "maxIdleMemory": "1GiB"}}}`, LoadOptions{})
	if cfg.Server("r").Limits != nil {
		t.Errorf("remote server limits %+v", cfg.Server("r").Limits)
	}
	for _, f := range []string{"mcpServers.r.limits", "mcpServers.r.maxIdleMemory"} {
		if !strings.Contains(strings.Join(cfg.Warnings, "\n"), f+": ignored for a remote server") {
			t.Errorf("no warning for %s: %q", f, cfg.Warnings)
		}
	}
}

// Bad limits are errors that name the field.
func TestLimitErrors(t *testing.T) {
	tests := []struct{ json, path, want string }{
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": "lots"}}}}`, "mcpServers.a.limits.memory", `"lots" is not a size (use e.g. "512MiB"`},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": "512 M"}}}}`, "mcpServers.a.limits.memory", `"512 M" is not a size`},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": "-5MiB"}}}}`, "mcpServers.a.limits.memory", `"-5MiB" is not a size`},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": "0MiB"}}}}`, "mcpServers.a.limits.memory", `"0MiB" is not a positive size`},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": 0}}}}`, "mcpServers.a.limits.memory", "0 is not a positive size"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": 1.5}}}}`, "mcpServers.a.limits.memory", "1.5 is not a whole, positive number of bytes"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": -1}}}}`, "mcpServers.a.limits.memory", "-1 is not a whole, positive number of bytes"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": "100KiB"}}}}`, "mcpServers.a.limits.memory", `"100KiB" is below 1 MiB`},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": "99999999TiB"}}}}`, "mcpServers.a.limits.memory", "out of range"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"memory": true}}}}`, "mcpServers.a.limits.memory", "must be a size, not a boolean"},
		{`{"defaults": {"limits": {"pids": 0}}, "mcpServers": {"a": {"command": "x"}}}`, "defaults.limits.pids", "0 is not a positive number of tasks"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"pids": 2.5}}}}`, "mcpServers.a.limits.pids", "2.5 is not a whole number"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"pids": "many"}}}}`, "mcpServers.a.limits.pids", "must be a whole number, not a string"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"pids": 99999999}}}}`, "mcpServers.a.limits.pids", "above the kernel's largest pids limit"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"cpu": 0}}}}`, "mcpServers.a.limits.cpu", "0 is not a positive number of CPUs"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"cpu": -1}}}}`, "mcpServers.a.limits.cpu", "-1 is not a positive number of CPUs"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"cpu": 0.001}}}}`, "mcpServers.a.limits.cpu", "below 0.01 CPUs"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"cpu": "2"}}}}`, "mcpServers.a.limits.cpu", "must be a number, not a string"},
		{`{"mcpServers": {"a": {"command": "x", "limits": {"cpu": 1e9}}}}`, "mcpServers.a.limits.cpu", "above 4096 CPUs"},
		{`{"mcpServers": {"a": {"command": "x", "limits": "512MiB"}}}`, "mcpServers.a.limits", "must be an object, not a string"},
		{`{"mcpServers": {"a": {"command": "x", "maxIdleMemory": "big"}}}`, "mcpServers.a.maxIdleMemory", `"big" is not a size`},
		{`{"defaults": {"maxIdleMemory": 0}, "mcpServers": {"a": {"command": "x"}}}`, "defaults.maxIdleMemory", "0 is not a positive size"},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.want, func(t *testing.T) {
			e := parseErr(t, tt.json, LoadOptions{})
			for _, p := range e.Problems {
				if p.Path == tt.path && strings.Contains(p.Message, tt.want) {
					return
				}
			}
			t.Errorf("no problem at %q containing %q; got:\n%v", tt.path, tt.want, e)
		})
	}
	// An unknown limit is a warning that suggests the right one (an
	// error when strict).
	cfg := mustParse(t, `{"mcpServers": {"a": {"command": "x", "limits": {"memroy": "1GiB"}}}}`, LoadOptions{})
	if w := strings.Join(cfg.Warnings, "\n"); !strings.Contains(w, "mcpServers.a.limits.memroy: unknown field") || !strings.Contains(w, `"memory"`) {
		t.Errorf("warnings: %q", cfg.Warnings)
	}
	parseErr(t, `{"mcpServers": {"a": {"command": "x", "limits": {"memroy": "1GiB"}}}}`, LoadOptions{Strict: true})
}

// A change of a kernel limit restarts the server on reload; a change of
// maxIdleMemory applies in place.
func TestCompareLimits(t *testing.T) {
	old := parseDiffCfg(t, `{"mcpServers":{"mem":{"command":"x","limits":{"memory":"1GiB"}},"idle":{"command":"x","maxIdleMemory":"1GiB"},"same":{"command":"x","limits":{"cpu":1}}}}`)
	new := parseDiffCfg(t, `{"defaults":{"limits":{"cpu":1}},"mcpServers":{"mem":{"command":"x","limits":{"memory":"2GiB"}},"idle":{"command":"x","maxIdleMemory":"2GiB","limits":{"cpu":"unlimited"}},"same":{"command":"x"}}}`)
	d := Compare(old, new)
	want := map[string]ServerChange{
		"mem":  {Action: ActionRestarted, Fields: []string{"limits"}},
		"idle": {Action: ActionUpdated, Fields: []string{"maxIdleMemory"}},
		"same": {Action: ActionUnchanged},
	}
	for _, c := range d.Servers {
		w := want[c.Name]
		if c.Action != w.Action || strings.Join(c.Fields, ",") != strings.Join(w.Fields, ",") {
			t.Errorf("%s: %+v, want %+v", c.Name, c, w)
		}
	}
}
