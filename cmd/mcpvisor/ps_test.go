package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Two servers without a prefix export the same tool names: /mcp lists each
// name once (the first server in name order serves it), and the collision
// is reported by /api/servers and mcpvisor ps, not only in the log.
func TestStatusReportsCollisions(t *testing.T) {
	fixture := testserver.Build(t)
	base := serve(t, fmt.Sprintf(`{"defaults":{"prefix":""},"mcpServers":{"a":{"command":%q},"b":{"command":%q}}}`, fixture, fixture))
	sess := connectHTTP(t, base+"/mcp", nil)
	res, err := sess.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, tool := range res.Tools {
		count[tool.Name]++
	}
	if count["echo"] != 1 {
		t.Fatalf("echo listed %d times: %v", count["echo"], count)
	}

	bin, _ := binaries(t)
	addr := strings.TrimPrefix(base, "http://")
	out, err := exec.Command(bin, "ps", "--addr", addr, "--json").Output()
	if err != nil {
		t.Fatalf("ps --json: %v", err)
	}
	var st admin.Servers
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("ps --json printed %s", out)
	}
	want := `tools "echo": served by a, also exported by b (hidden)`
	found := false
	for _, c := range st.Collisions {
		found = found || c == want
	}
	if !found || st.Totals.Total != 2 {
		t.Fatalf("status: %d servers, collisions %q; want %q among them", st.Totals.Total, st.Collisions, want)
	}
	out, err = exec.Command(bin, "ps", "--addr", addr).Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	if !strings.Contains(string(out), "name collisions on /mcp") || !strings.Contains(string(out), want) {
		t.Fatalf("ps printed:\n%s", out)
	}
}
