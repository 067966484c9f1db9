package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// restart, stop, start, sleep and reload against a real serve of the quick-start
// config: stop makes the server refuse (a call says it was stopped) until
// start; restart gives it a new process; sleep makes it dormant (a
// second sleep is refused, saying so) until a call wakes it; a reload of an unchanged file
// changes nothing; an unknown server, nothing answering at --addr and a
// bad --timeout each get their exit code and a message that says so.
func TestServerActions(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	s := startServeFile(t, filepath.Join(root, "examples", "quickstart.json"), root)
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	bin := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, stderr := runBin(t, append(args, "--addr", addr)...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, want, out, stderr)
		}
		return out, stderr
	}

	if out, _ := bin(0, "stop", "demo"); !strings.Contains(out, "stopped demo") {
		t.Fatalf("stop printed %q", out)
	}
	if st := servers(t, base)["demo"]; st.State != "stopped" || st.PID != 0 {
		t.Fatalf("after stop: %+v", st)
	}
	if _, stderr := bin(1, "call", "demo", "echo", "--arg", "text=x"); !strings.Contains(stderr, "stopped by the operator") {
		t.Fatalf("a call to a stopped server: %q", stderr)
	}
	bin(0, "start", "demo")
	first := servers(t, base)["demo"]
	if first.State != "running" || first.PID == 0 {
		t.Fatalf("after start: %+v", first)
	}
	if out, _ := bin(0, "call", "demo", "echo", "--arg", "text=back"); !strings.Contains(out, "back") {
		t.Fatalf("a call after start printed %q", out)
	}
	if out, _ := bin(0, "restart", "demo"); !strings.Contains(out, "restarted demo") {
		t.Fatalf("restart printed %q", out)
	}
	if second := servers(t, base)["demo"]; second.State != "running" || second.PID == 0 || second.PID == first.PID {
		t.Fatalf("restart kept pid %d: %+v", first.PID, second)
	}
	if out, _ := bin(0, "sleep", "demo"); !strings.Contains(out, "put demo to sleep") {
		t.Fatalf("sleep printed %q", out)
	}
	if st := servers(t, base)["demo"]; st.State != "dormant" || st.PID != 0 {
		t.Fatalf("after sleep: %+v", st)
	}
	if _, stderr := bin(1, "sleep", "demo"); !strings.Contains(stderr, "server demo is dormant, not running") {
		t.Fatalf("sleep of a dormant server: %q", stderr)
	}
	if out, _ := bin(0, "call", "demo", "echo", "--arg", "text=awake"); !strings.Contains(out, "awake") {
		t.Fatalf("a call after sleep printed %q", out)
	}
	if out, _ := bin(0, "reload"); !strings.Contains(out, "2 server(s) unchanged") {
		t.Fatalf("reload of an unchanged file printed %q", out)
	}

	if _, stderr := bin(1, "restart", "nope"); !strings.Contains(stderr, `no server named "nope"`) {
		t.Fatalf("restart of an unknown server: %q", stderr)
	}
	for _, verb := range []string{"restart", "stop", "start", "sleep"} {
		if code, _, stderr := runBin(t, verb, "demo", "--timeout", "0s", "--addr", addr); code != 2 || !strings.Contains(stderr, "--timeout") {
			t.Fatalf("%s --timeout 0s: exit %d %q", verb, code, stderr)
		}
	}
	for _, args := range [][]string{{"reload"}, {"restart", "demo"}} {
		code, _, stderr := runBin(t, append(args, "--addr", "127.0.0.1:1")...)
		if code != 1 || !strings.Contains(stderr, "is mcpvisor serve running at 127.0.0.1:1") {
			t.Fatalf("%v with nothing answering: exit %d %q", args, code, stderr)
		}
	}
}
