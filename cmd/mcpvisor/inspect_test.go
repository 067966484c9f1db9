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
	"github.com/mcpvisor/mcpvisor/internal/cli/call"
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
		{[]string{"x", "echo"}, call.ExitToolError, `missing required argument "text"`, ""},
		{[]string{"x", "sleep", "--arg", "ms=soon"}, 2, "", `--arg ms: the tool's schema says integer, and "soon" is not JSON`},
		{[]string{"x", "echo", "--arg", "text"}, 2, "", `--arg "text": want key=value`},
		{[]string{"x", "echo", "--json", `[1]`}, 2, "", "--json: not a JSON object"},
		{[]string{"x", "nope"}, 1, "", `server x has no tool "nope"`},
		{[]string{"zz", "echo"}, 1, "", `no server named "zz"; configured: p, x`},
		{[]string{"zz", "echo", "--arg", "text"}, 2, "", `--arg "text": want key=value`}, // checked before anything is asked of serve
		// call declares no sampling: the server is told Method not found at once, for it.
		{[]string{"x", "sample", "--arg", "prompt=hi"}, call.ExitToolError, "did not declare the sampling capability", ""},
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
