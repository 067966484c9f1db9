package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A server whose memory limit kills it while it starts, before its
// initialize answer, is counted in oomKills and its history says oom, as
// for one killed while it serves (real cgroups, the real binary).
func TestOOMAtStartIsCounted(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"bloat":{"command":%q,"args":["-grow-mb","512"],"eager":true,"idleTimeout":0,
		"limits":{"memory":"64MiB"},
		"restart":{"policy":"never"}}}}`, fixture))
	stopAtCleanup(t, s)
	waitEvent(t, s.base, "failed", 1) // counted and recorded before it is reported
	resp, err := http.Get(s.base + "/api/servers/bloat")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d admin.Detail
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range d.History {
		kinds = append(kinds, e.Kind+" | "+e.Error)
	}
	if st := servers(t, s.base)["bloat"]; st.OOMKills != 1 {
		t.Errorf("a server OOM-killed while starting: oomKills %d (history %q)", st.OOMKills, kinds)
	}
	if len(d.History) == 0 || d.History[len(d.History)-1].Kind != "oom" {
		t.Errorf("its history does not say oom: %q", kinds)
	}
}
