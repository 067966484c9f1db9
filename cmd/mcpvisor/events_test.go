package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// mcpvisor events lists what serve kept; events -f then prints what
// happens, as it happens: a call that wakes a sleeping server shows as its
// respawn.
func TestEvents(t *testing.T) {
	fixture := testserver.Build(t)
	base := serve(t, fmt.Sprintf(`{"mcpServers":{"x":{"command":%q},"y":{"command":%q}}}`, fixture, fixture))
	addr := strings.TrimPrefix(base, "http://")
	for deadline := time.Now().Add(30 * time.Second); ; {
		var d admin.Detail
		_, out, _ := runBin(t, "inspect", "x", "--json", "--addr", addr)
		if json.Unmarshal([]byte(out), &d) == nil && d.State == "dormant" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("x not asleep after its lists were learned: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, out, stderr := runBin(t, "events", "--addr", addr)
	started := false // a line: time, server, type, details
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		started = started || len(f) >= 3 && f[1] == "x" && f[2] == "started"
	}
	if code != 0 || !started {
		t.Fatalf("events: exit %d, %q %q", code, out, stderr)
	}

	bin, _ := binaries(t)
	cmd := exec.Command(bin, "events", "-f", "--json", "--server", "x", "--addr", addr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan admin.Entry, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e admin.Entry
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				lines <- e
			}
		}
		close(lines)
	}()
	next := func(what string, want func(admin.Entry) bool) {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case e, ok := <-lines:
				if !ok {
					t.Fatalf("events -f ended before %s", what)
				}
				if e.Server != "x" {
					t.Fatalf("--server x printed %+v", e)
				}
				if want(e) {
					return
				}
			case <-timeout:
				t.Fatalf("events -f: no %s within 15 s", what)
			}
		}
	}
	next("replay of x's sleep", func(e admin.Entry) bool { return e.Type == "dormant" })
	if code, _, stderr := runBin(t, "call", "x", "echo", "--arg", "text=wake", "--addr", addr); code != 0 {
		t.Fatalf("call: %d %s", code, stderr)
	}
	next("live respawn of x", func(e admin.Entry) bool { return e.Type == "respawned" })
}
