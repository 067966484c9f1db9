package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The fixture's echo changes its schema (and reverse appears, meta goes)
// between two runs of mcpvisor on one state directory: the second run
// reports definitions_changed with the diff, `tools diff` shows it (each
// held tool as TOOL@FINGERPRINT, a new one whole), the pinned server
// refuses the changed tool with an error naming the approval, `tools
// approve` with no tool fails, and so does a name that is not pending;
// the server changes echo again after the operator reviewed it, and the
// token reviewed approves nothing; the new one, shown whole, releases it;
// the call works, and a third run keeps the approval and approves the
// rest with --all.
// Then the server comes back with no tools: tools_lost, a warning in ps,
// and wait refuses to call it ready, until the operator accepts the empty
// list (tools accept-lost), which a server with its tools refuses.
func TestDefinitionDriftAndPinning(t *testing.T) {
	fixture := testserver.Build(t)
	dir := t.TempDir()
	variant := filepath.Join(dir, "variant")
	state := filepath.Join(dir, "state")
	cfg := fmt.Sprintf(`{"mcpServers":{"fx":{"command":%q,"pin":true,"env":{"FIXTURE_TOOLS_VARIANT_FILE":%q}}}}`, fixture, variant)
	run := func() (*started, string) {
		s := startServe(t, cfg, "--state-dir", state)
		return s, strings.TrimPrefix(s.base, "http://")
	}
	stop := func(s *started) {
		t.Helper()
		sent := time.Now()
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		if code, _ := s.exit(t, sent, 10*time.Second); code != 0 {
			t.Fatalf("serve exited with %d", code)
		}
		testserver.WaitGone(t, s.marker, 2*time.Second)
	}
	bin := func(addr string, want int, args ...string) (string, string) {
		t.Helper()
		code, out, stderr := runBin(t, append(args, "--addr", addr)...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, want, out, stderr)
		}
		return out, stderr
	}

	// First run: the baseline, trusted.
	s1, addr := run()
	bin(addr, 0, "wait", "fx", "--timeout", "30s")
	if out, _ := bin(addr, 0, "tools", "diff", "fx"); !strings.Contains(out, "no change of its definitions seen") {
		t.Fatalf("diff after the first learn:\n%s", out)
	}
	stop(s1)

	// The server changes while mcpvisor is down.
	if err := os.WriteFile(variant, []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, addr := run()
	bin(addr, 0, "call", "fx", "pid") // starts it: its start relearns
	ev := waitEvent(t, s2.base, "definitions_changed", 1)
	det, _ := json.Marshal(ev.Details)
	for _, want := range []string{
		`"added":[{"kind":"tool","name":"reverse"}]`,
		`"removed":[{"kind":"tool","name":"meta"}]`,
		`{"fields":["description","inputSchema.properties.upper"],"kind":"tool","name":"echo"}`,
		`"held":["echo","reverse"]`,
	} {
		if !strings.Contains(string(det), want) {
			t.Fatalf("definitions_changed details %s, want %s", det, want)
		}
	}
	out, _ := bin(addr, 0, "tools", "diff", "fx", "--json")
	var diff admin.DefinitionsDiff
	if err := json.Unmarshal([]byte(out), &diff); err != nil || len(diff.Pending) != 2 || diff.Pending[0].Name != "echo" || len(diff.Pending[0].Fingerprint) != 64 {
		t.Fatalf("tools diff --json: %v\n%s", err, out)
	}
	// What the operator reviews: each held tool by its fingerprint, a new
	// one whole, and the command that approves exactly those.
	reviewed := "echo@" + diff.Pending[0].Fingerprint[:32]
	reverse := "reverse@" + diff.Pending[1].Fingerprint[:32]
	out, _ = bin(addr, 0, "tools", "diff", "fx")
	for _, want := range []string{
		"~ tool echo (changed)",
		`inputSchema.properties.upper: (absent) → {"type":"boolean"}`,
		"+ tool reverse (added)",
		"- tool meta (removed)",
		"~ tool " + reviewed + " (changed)",
		"+ tool " + reverse + " (added)",
		`description: "Returns the given text reversed."`,
		"approve what you reviewed with: mcpvisor tools approve fx " + reviewed + " " + reverse + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("tools diff lacks %q:\n%s", want, out)
		}
	}
	if _, stderr := bin(addr, 1, "call", "fx", "echo", "--json", `{"text":"abc","upper":true}`); !strings.Contains(stderr, "mcpvisor tools approve fx echo") {
		t.Fatalf("a call of the held echo: %q", stderr)
	}
	sess := connectHTTP(t, s2.base+"/mcp", nil)
	names := func() []string {
		t.Helper()
		res, err := sess.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return toolNamesOf(res)
	}
	if n := names(); slices.Contains(n, "fx__echo") || slices.Contains(n, "fx__reverse") || !slices.Contains(n, "fx__pid") {
		t.Fatalf("aggregated tools while held: %v", n)
	}
	if res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"text": "x"}}); err == nil || !strings.Contains(err.Error(), "mcpvisor tools approve fx echo") {
		t.Fatalf("an MCP client's call of the held echo: %v, %v", res, err)
	}
	if out, _ := bin(addr, 0, "ps"); !strings.Contains(out, "fx: 2 tool(s) held back until approved") {
		t.Fatalf("ps:\n%s", out)
	}
	if _, stderr := bin(addr, 1, "tools", "approve", "fx", "bogus"); !strings.Contains(stderr, "pending: echo, reverse") {
		t.Fatalf("approving a name that is not pending: %q", stderr)
	}
	if _, stderr := bin(addr, 1, "tools", "approve", "fx"); !strings.Contains(stderr, "name the tools to approve") || !strings.Contains(stderr, "--all") {
		t.Fatalf("approving with no tool named: %q", stderr)
	}
	// The server changes echo again (a long description, on several
	// lines, with markup) after the operator reviewed it: the token
	// reviewed approves nothing.
	if err := os.WriteFile(variant, []byte("3"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin(addr, 0, "restart", "fx")
	waitEvent(t, s2.base, "definitions_changed", 2)
	if _, stderr := bin(addr, 1, "tools", "approve", "fx", reviewed); !strings.Contains(stderr, "nothing approved") || !strings.Contains(stderr, "changed since it was reviewed") {
		t.Fatalf("approving the echo reviewed, since changed: %q", stderr)
	}
	out, _ = bin(addr, 0, "tools", "diff", "fx", "--json")
	diff = admin.DefinitionsDiff{}
	if err := json.Unmarshal([]byte(out), &diff); err != nil || len(diff.Pending) != 2 || diff.Pending[0].Name != "echo" || diff.Pending[0].Fingerprint[:32] == reviewed[5:] {
		t.Fatalf("after a stale approval: %v\n%s", err, out)
	}
	again := "echo@" + diff.Pending[0].Fingerprint[:32]
	// The new description is shown whole, line by line.
	out, _ = bin(addr, 0, "tools", "diff", "fx")
	for _, line := range strings.Split(testserver.InjectedDescription, "\n") {
		if !strings.Contains(out, "\n"+strings.TrimRight("            "+line, " ")+"\n") {
			t.Fatalf("tools diff does not show the line %q of echo's description whole:\n%s", line, out)
		}
	}
	if out, _ := bin(addr, 0, "tools", "approve", "fx", again); !strings.Contains(out, "approved "+again+" of server fx") || !strings.Contains(out, "still held: reverse") {
		t.Fatalf("approve printed %q", out)
	}
	if out, _ := bin(addr, 0, "call", "fx", "echo", "--json", `{"text":"abc","upper":true}`); !strings.Contains(out, "ABC") {
		t.Fatalf("the approved echo: %q", out)
	}
	res, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"text": "x", "upper": true}})
	if err != nil || text(res) != "X" {
		t.Fatalf("aggregated call after approval: %v %v", res, err)
	}
	if n := names(); !slices.Contains(n, "fx__echo") || slices.Contains(n, "fx__reverse") {
		t.Fatalf("aggregated tools after approving echo: %v", n)
	}
	sess.Close()
	stop(s2)

	// A third run keeps the approval, and still holds reverse.
	s3, addr := run()
	stopAtCleanup(t, s3)
	out, _ = bin(addr, 0, "tools", "diff", "fx", "--json")
	diff = admin.DefinitionsDiff{}
	if err := json.Unmarshal([]byte(out), &diff); err != nil || len(diff.Pending) != 1 || diff.Pending[0].Name != "reverse" {
		t.Fatalf("after a restart of mcpvisor: %v\n%s", err, out)
	}
	if out, _ := bin(addr, 0, "tools", "approve", "fx", "--all"); !strings.Contains(out, "approved reverse@"+diff.Pending[0].Fingerprint[:32]+" of server fx") {
		t.Fatalf("approve --all printed %q", out)
	}
	out, _ = bin(addr, 0, "tools", "fx", "--json")
	var listed []admin.Tools
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 1 || len(listed[0].Tools) < 2 || len(listed[0].Held) != 0 {
		t.Fatalf("tools fx --json after approving all: %v\n%s", err, out)
	}
	had := strconv.Itoa(len(listed[0].Tools))

	// The server comes back listing nothing.
	if err := os.WriteFile(variant, []byte("2"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin(addr, 0, "restart", "fx")
	lost := waitEvent(t, s3.base, "tools_lost", 1)
	if fmt.Sprint(lost.Details["previous"]) != had {
		t.Fatalf("tools_lost details %v, want previous %s", lost.Details, had)
	}
	if out, _ := bin(addr, 0, "ps"); !strings.Contains(out, "fx: it lists no tools where it had "+had) {
		t.Fatalf("ps:\n%s", out)
	}
	if _, stderr := bin(addr, 1, "wait", "fx", "--timeout", "300ms"); !strings.Contains(stderr, "it lists no tools where it had "+had) || !strings.Contains(stderr, "mcpvisor tools accept-lost fx") {
		t.Fatalf("wait on a server that lost its tools: %q", stderr)
	}

	// The operator accepts that it has none now: ready again.
	if out, _ := bin(addr, 0, "tools", "accept-lost", "fx"); !strings.Contains(out, "server fx now lists no tools (it had "+had+")") {
		t.Fatalf("tools accept-lost printed %q", out)
	}
	waitEvent(t, s3.base, "tools_lost_accepted", 1)
	bin(addr, 0, "wait", "fx", "--timeout", "10s")
	if out, _ := bin(addr, 0, "ps"); strings.Contains(out, "lists no tools") {
		t.Fatalf("ps after accept-lost still warns:\n%s", out)
	}
	if _, stderr := bin(addr, 1, "tools", "accept-lost", "fx"); !strings.Contains(stderr, "has not lost its tools") {
		t.Fatalf("accept-lost of a server whose tools are not lost: %q", stderr)
	}
}
