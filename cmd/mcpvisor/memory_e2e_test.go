//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A server's memory is one figure in every view: ps, inspect, /api/servers
// and /metrics show the resident memory of its process tree, as summed
// from /proc at the same moment, each written as the dashboard writes it
// (proc.FormatMemory; format.js agrees with it: internal/dashboard).
func TestOneMemoryFigure(t *testing.T) {
	fixture := testserver.Build(t)
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{"x":{"command":%q,"eager":true,"env":{"FIXTURE_HOLD_MB":"40"}}}}`, fixture))
	stopAtCleanup(t, s)
	addr := strings.TrimPrefix(s.base, "http://")

	// resident is the resident memory of the server's processes (every
	// process with the marker but serve itself), from /proc.
	resident := func() uint64 {
		var sum uint64
		for _, pid := range testserver.LiveProcesses(s.marker) {
			if pid == s.cmd.Process.Pid {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
			if err != nil {
				continue // gone in between
			}
			var size, pages uint64
			fmt.Sscan(string(b), &size, &pages)

			sum += pages * uint64(os.Getpagesize())
		}
		return sum
	}
	views := func() (map[string]string, error) {
		out := map[string]string{}
		resp, err := http.Get(s.base + "/api/servers")
		if err != nil {
			return nil, err
		}
		var st admin.Servers
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || len(st.Servers) != 1 || st.Servers[0].MemoryBytes == 0 {
			return nil, fmt.Errorf("/api/servers: %v %+v", err, st.Servers)
		}
		out["/api/servers"] = proc.FormatMemory(st.Servers[0].MemoryBytes)
		out["/metrics"] = proc.FormatMemory(uint64(scrape(t, s.base)[`mcpvisor_server_memory_bytes{server="x"}`]))
		code, text, stderr := runBin(t, "ps", "--addr", addr)
		if code != 0 {
			return nil, fmt.Errorf("ps: exit %d %s", code, stderr)
		}
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[0] == "x" {
				out["ps"] = f[3] + " " + f[4]
			}
		}
		code, text, stderr = runBin(t, "inspect", "x", "--addr", addr)
		if code != 0 {
			return nil, fmt.Errorf("inspect: exit %d %s", code, stderr)
		}
		for _, l := range strings.Split(text, "\n") {
			if rest, ok := strings.CutPrefix(l, "Memory:"); ok {
				out["inspect"] = strings.TrimSuffix(strings.Fields(rest)[0]+" "+strings.Fields(rest)[1], ",")
			}
		}
		return out, nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		before := resident()
		got, err := views()
		after := resident()
		want := proc.FormatMemory(before)
		agree := err == nil && before >= 40<<20 && want == proc.FormatMemory(after) && len(got) == 4
		for _, v := range got {
			agree = agree && v == want
		}
		if agree {
			t.Logf("every view: %s (resident, from /proc: %d bytes)", want, before)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the views say %v (%v); the tree's resident memory was %s, then %s", got, err, want, proc.FormatMemory(after))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
