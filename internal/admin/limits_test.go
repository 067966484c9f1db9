package admin

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// A server's limits show in /api/servers (with those this runtime cannot
// enforce, and why) and in /metrics, from zero for a server without any;
// its OOM and pids-limit counters start at zero.
func TestLimitsExposition(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"mcpServers":{"a":{"command":"x","limits":{"memory":"64MiB","pids":32,"cpu":0.5},"maxIdleMemory":"32MiB"},"b":{"command":"y"}}}`), "t.json", config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A runtime with cgroups off: no limit can be enforced.
	rt, err := proc.Open(proc.Options{NoCgroup: true, NoPIDNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(t.Context())
	f, err := fleet.New(cfg, fleet.Options{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(f, nil, Options{}))
	defer srv.Close()

	var body Servers
	if err := json.NewDecoder(get(t, srv.URL+"/api/servers").Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	a, b := body.Servers[0], body.Servers[1]
	if a.Limits == nil || a.Limits.MemoryBytes != 64<<20 || a.Limits.PIDs != 32 || a.Limits.CPU != 0.5 || a.Limits.MaxIdleMemoryBytes != 32<<20 {
		t.Fatalf("a's limits: %+v", a.Limits)
	}
	if len(a.Limits.NotEnforced) != 3 || !strings.HasPrefix(a.Limits.NotEnforced[0], "memory: ") || !strings.Contains(a.Limits.NotEnforced[0], "turned off by configuration") {
		t.Errorf("not enforced: %q", a.Limits.NotEnforced)
	}
	if b.Limits != nil {
		t.Errorf("b has no limits, yet %+v", b.Limits)
	}

	text, _ := io.ReadAll(get(t, srv.URL+"/metrics").Body)
	samples := parseExposition(t, string(text))
	for series, want := range map[string]float64{
		`mcpvisor_server_memory_limit_bytes{server="a"}`:         64 << 20,
		`mcpvisor_server_pids_limit{server="a"}`:                 32,
		`mcpvisor_server_cpu_limit_cores{server="a"}`:            0.5,
		`mcpvisor_server_limits_not_enforced{server="a"}`:        3,
		`mcpvisor_server_oom_kills_total{server="a"}`:            0,
		`mcpvisor_server_pids_limit_hits_total{server="a"}`:      0,
		`mcpvisor_server_memory_limit_bytes{server="b"}`:         0,
		`mcpvisor_server_memory_limit_charged_bytes{server="a"}`: 0, // a runs no tree
		`mcpvisor_server_memory_limit_charged_bytes{server="b"}`: 0,
		`mcpvisor_server_limits_not_enforced{server="b"}`:        0,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if !strings.Contains(string(text), "# TYPE mcpvisor_server_oom_kills_total counter") {
		t.Error("no oom kills counter family")
	}
}

// What a tree's cgroup is charged goes with the server's limits, in the
// status's own copy of them; the memory shown stays the resident one.
func TestSetUsageChargedGoesWithTheLimits(t *testing.T) {
	shared := &fleet.LimitsStatus{MemoryBytes: 64 << 20}
	st := fleet.Status{Limits: shared}
	setUsage(&st, proc.Usage{MemoryBytes: 10 << 20, ChargedBytes: 13 << 20})
	if st.MemoryBytes != 10<<20 || st.Limits.ChargedBytes != 13<<20 || st.Limits.MemoryBytes != 64<<20 {
		t.Errorf("status %+v, limits %+v", st, st.Limits)
	}
	if shared.ChargedBytes != 0 {
		t.Error("the limits the status was given were written to")
	}
	none := fleet.Status{}
	setUsage(&none, proc.Usage{ChargedBytes: 1})
	if none.Limits != nil {
		t.Errorf("a server without limits got %+v", none.Limits)
	}
}
