package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// runBin runs the mcpvisor binary with args and returns its exit code,
// stdout and stderr.
func runBin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	bin, _ := binaries(t)
	return runService(t, bin, nil, args...)
}

// mcpvisor inspect and mcpvisor tools against a real serve: the tools come
// from the cache (a dormant server is not started for them), filtered as
// clients see them; the detail names env variables, never their values
// (the redaction of arguments and URLs is TestServerDetail's); an unknown server and no
// serve at the address are errors that say so, with exit code 1.
func TestInspectAndTools(t *testing.T) {
	fixture := testserver.Build(t)
	base := serve(t, fmt.Sprintf(`{"mcpServers":{
		"x":{"command":%q,"env":{"API_TOKEN":"hunter2-secret"}},
		"d":{"command":%q,"tools":{"deny":["crash"]}}}}`, fixture, fixture))
	addr := strings.TrimPrefix(base, "http://")

	// serve learns every server's lists at start, then puts it to sleep.
	var tools []admin.Tools
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, out, stderr := runBin(t, "tools", "--addr", addr, "--json")
		if code != 0 {
			t.Fatalf("tools --json: exit %d: %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &tools); err != nil {
			t.Fatalf("tools --json printed %q: %v", out, err)
		}
		if len(tools) == 2 && tools[0].Learned && tools[1].Learned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lists not learned within 30 s: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	names := func(t admin.Tools) map[string]bool {
		m := map[string]bool{}
		for _, tool := range t.Tools {
			var v struct{ Name string }
			json.Unmarshal(tool, &v)
			m[v.Name] = true
		}
		return m
	}
	d, x := names(tools[0]), names(tools[1])
	if tools[0].Server != "d" || tools[1].Server != "x" || !x["echo"] || !x["crash"] || !d["echo"] || d["crash"] {
		t.Fatalf("tools: d %v, x %v", d, x)
	}

	// Asleep once learned: listing its tools must not wake it.
	var before admin.Detail
	for deadline := time.Now().Add(30 * time.Second); before.State != "dormant"; {
		code, out, stderr := runBin(t, "inspect", "x", "--addr", addr, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &before) != nil {
			t.Fatalf("inspect --json: exit %d: %s%s", code, out, stderr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("x not asleep: %s", out)
		}
	}
	for _, args := range [][]string{{"tools"}, {"tools", "x"}, {"tools", "x", "--json"}} {
		if code, _, stderr := runBin(t, append(args, "--addr", addr)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	var code int
	var out, stderr string
	if before.Lists["tools"] != len(x) || before.Era == "" || before.ServerInfo == nil {
		t.Fatalf("inspect: %+v, want %d tools and the era it spoke", before, len(x))
	}
	code, out, _ = runBin(t, "inspect", "x", "--addr", addr)
	for _, want := range []string{"Name:", "x", "Env:", "API_TOKEN", "Launch:", fixture, fmt.Sprintf("%d tools", len(x))} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("inspect (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Fatalf("inspect shows a secret:\n%s", out)
	}
	code, out, _ = runBin(t, "tools", "d", "--addr", addr)
	if code != 0 || !strings.Contains(out, "echo") || strings.Contains(out, "crash") {
		t.Fatalf("tools d (exit %d):\n%s", code, out)
	}
	var after admin.Detail
	_, out, _ = runBin(t, "inspect", "x", "--addr", addr, "--json")
	json.Unmarshal([]byte(out), &after)
	if after.Spawns != before.Spawns || after.State != "dormant" {
		t.Fatalf("listing tools woke server x: spawns %d → %d, state %s", before.Spawns, after.Spawns, after.State)
	}

	for _, args := range [][]string{{"inspect", "nope"}, {"tools", "nope"}} {
		code, out, stderr = runBin(t, append(args, "--addr", addr)...)
		if code != 1 || out != "" || !strings.Contains(stderr, `no server named "nope"; configured: d, x`) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}

	// Nothing listens at a port just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{{"inspect", "x"}, {"tools"}, {"ps"}} {
		code, out, stderr = runBin(t, append(args, "--addr", closed)...)
		if code != 1 || out != "" || !strings.Contains(stderr, "is mcpvisor serve running at "+closed+"?") {
			t.Errorf("%v with nothing running: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
}

// mcpvisor call against a real serve: the result's text, exit 4 for a
// tool's isError, 2 for arguments the tool's schema refuses, 1 for what
// cannot be called; a per-session server's instance ends with the call.
func TestCall(t *testing.T) {
	fixture := testserver.Build(t)
	base := serve(t, fmt.Sprintf(`{"mcpServers":{"x":{"command":%q},"p":{"command":%q,"sharing":"per-session"}}}`, fixture, fixture))
	addr := strings.TrimPrefix(base, "http://")
	cases := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"x", "echo", "--arg", "text=42"}, 0, "42\n", ""}, // a string property: text, not a number
		{[]string{"x", "echo", "--json", `{"text":"a b"}`}, 0, "a b\n", ""},
		{[]string{"x", "sleep", "--arg", "ms=1"}, 0, "slept 1 ms\n", ""},
		{[]string{"x", "echo"}, exitToolError, `missing required argument "text"`, ""},
		{[]string{"x", "sleep", "--arg", "ms=soon"}, 2, "", `--arg ms: the tool's schema says integer, and "soon" is not JSON`},
		{[]string{"x", "echo", "--arg", "text"}, 2, "", `--arg "text": want key=value`},
		{[]string{"x", "echo", "--json", `[1]`}, 2, "", "--json: not a JSON object"},
		{[]string{"x", "nope"}, 1, "", `server x has no tool "nope"`},
		{[]string{"zz", "echo"}, 1, "", `no server named "zz"; configured: p, x`},
		{[]string{"zz", "echo", "--arg", "text"}, 2, "", `--arg "text": want key=value`}, // checked before anything is asked of serve
		// call declares no sampling: the server is told Method not found at once, for it.
		{[]string{"x", "sample", "--arg", "prompt=hi"}, exitToolError, "did not declare the sampling capability", ""},
		{[]string{"p", "echo", "--arg", "text=mine"}, 0, "mine\n", ""},
	}
	for _, c := range cases {
		code, out, stderr := runBin(t, append(append([]string{"call"}, c.args...), "--addr", addr)...)
		if code != c.code || !strings.Contains(out, c.out) || (c.out == "" && out != "") || !strings.Contains(stderr, c.err) {
			t.Errorf("call %v: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out, stderr, c.code, c.out, c.err)
		}
	}
	code, out, _ := runBin(t, "call", "x", "echo", "--arg", "text=hi", "--output-json", "--addr", addr)
	var r struct {
		Content []struct{ Type, Text string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.Content) != 1 || r.Content[0].Text != "hi" {
		t.Errorf("--output-json: exit %d, %q", code, out)
	}
	// Each call's session ends with it, so p's instance for it stops — an
	// interrupted call's too.
	instancesOfP := func() int {
		var d admin.Detail
		_, out, _ := runBin(t, "inspect", "p", "--json", "--addr", addr)
		if json.Unmarshal([]byte(out), &d) != nil {
			t.Fatalf("inspect p: %s", out)
		}
		return d.Sessions
	}
	waitInstances := func(what string, ok func(int) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(instancesOfP()); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: p has %d instances after 10 s", what, instancesOfP())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitInstances("the finished calls' sessions end", func(n int) bool { return n == 0 })
	bin, _ := binaries(t)
	interrupted := exec.Command(bin, "call", "p", "sleep", "--arg", "ms=60000", "--addr", addr)
	if err := interrupted.Start(); err != nil {
		t.Fatal(err)
	}
	waitInstances("the interrupted call reaches p", func(n int) bool { return n == 1 })
	_ = interrupted.Process.Signal(os.Interrupt)
	if err := interrupted.Wait(); err == nil {
		t.Errorf("an interrupted call exited 0")
	}
	waitInstances("the interrupted call's session ends", func(n int) bool { return n == 0 })
}

// mcpvisor wait returns once every server (or the named ones) is ready —
// its tools known, running, asleep or startable — and otherwise says,
// after its timeout, which one is not and why.
func TestWait(t *testing.T) {
	fixture := testserver.Build(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	code, _, stderr := runBin(t, "wait", "--addr", closed, "--timeout", "300ms")
	if code != 1 || !strings.Contains(stderr, "not ready after 300ms: is mcpvisor serve running at "+closed+"?") {
		t.Errorf("wait with nothing running: exit %d, %q", code, stderr)
	}

	base := serve(t, fmt.Sprintf(`{"mcpServers":{"slow":{"command":%q,"args":["-slow-start","1s"]},"bad":{"command":%q,"args":["-no-such-flag"]}}}`, fixture, fixture))
	addr := strings.TrimPrefix(base, "http://")
	code, out, stderr := runBin(t, "wait", "slow", "--addr", addr, "--timeout", "30s")
	if code != 0 || out != "" || stderr != "" {
		t.Fatalf("wait slow: exit %d, %q %q", code, out, stderr)
	}
	var d admin.Detail
	_, out, _ = runBin(t, "inspect", "slow", "--json", "--addr", addr)
	if json.Unmarshal([]byte(out), &d) != nil || !d.Learned || d.Lists["tools"] == 0 {
		t.Fatalf("wait returned before slow was ready: %s", out)
	}
	code, _, stderr = runBin(t, "wait", "--addr", addr, "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, "not ready after 2s: waiting for bad (") || strings.Contains(stderr, "slow (") {
		t.Errorf("wait for all with one that cannot start: exit %d, %q", code, stderr)
	}
	code, _, stderr = runBin(t, "wait", "nope", "--addr", addr, "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, `no server named "nope"; configured: bad, slow`) {
		t.Errorf("wait nope: exit %d, %q", code, stderr)
	}
}

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
