package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// redactConfig is a config whose one server s, the fixture, writes
// "stderr line 1" to "stderr line 3" at start, with env TOKEN set to
// token (one of those lines: a secret it prints).
func redactConfig(fixture, token string) string {
	return fmt.Sprintf(`{"mcpServers":{"s":{"command":%q,"args":["-stderr-lines","3"],"eager":true,"idleTimeout":"0","env":{"TOKEN":%q}}}}`, fixture, token)
}

// fixtureLines is, by pid, the fixture's numbered start-up lines among es
// ("stderr line N", or that line redacted), in order.
func fixtureLines(es []logbuf.Entry) map[int][]string {
	out := map[int][]string{}
	for _, e := range es {
		if strings.HasPrefix(e.Line, "stderr line ") || e.Line == "[redacted]" {
			out[e.PID] = append(out[e.PID], e.Line)
		}
	}
	return out
}

// A secret the server prints to stderr is redacted in the logs API —
// JSON and stream — as in inspect, and with the config of the launch
// that wrote each line: after a reload rotates the secret, the old
// process's lines still hide the old one (which the config in force no
// longer names) and the new process's the new one.
func TestLogsAndInspectRedactEachLaunchsSecret(t *testing.T) {
	fixture := testserver.Build(t)
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(redactConfig(fixture, "stderr line 2")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeFile(t, cfg, "", "--no-watch", "--no-learn")
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	oldPID := waitRunning(t, base, "s")["s"]

	if err := os.WriteFile(cfg, []byte(redactConfig(fixture, "stderr line 1")), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/api/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Applied bool }
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || !rep.Applied {
		t.Fatalf("reload: %d %+v %v", resp.StatusCode, rep, err)
	}
	resp.Body.Close()

	var want map[int][]string
	var logs admin.Logs
	for deadline := time.Now().Add(10 * time.Second); ; {
		newPID := waitRunning(t, base, "s")["s"]
		want = map[int][]string{
			oldPID: {"stderr line 1", "[redacted]", "stderr line 3"},
			newPID: {"[redacted]", "stderr line 2", "stderr line 3"},
		}
		resp, err := http.Get(base + "/api/servers/s/logs")
		if err != nil {
			t.Fatal(err)
		}
		logs = admin.Logs{}
		err = json.NewDecoder(resp.Body).Decode(&logs)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := fixtureLines(logs.Lines)
		if newPID != oldPID && len(got[newPID]) == 3 {
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("logs, by pid (%d, then %d): %v, want %v\n%+v", oldPID, newPID, got, want, logs.Lines)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new launch's lines were not kept: %+v", logs.Lines)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The stream serves the same lines.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/servers/s/logs?follow=1", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	last := logs.Lines[len(logs.Lines)-1].Seq
	var streamed []logbuf.Entry
	for data, err := range sseData(resp.Body) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		var e logbuf.Entry
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("stream: %q: %v", data, err)
		}
		if streamed = append(streamed, e); e.Seq >= last {
			break
		}
	}
	if got := fixtureLines(streamed); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream, by pid: %v, want %v\n%+v", got, want, streamed)
	}

	// inspect: neither launch's secret among its own lines.
	code, out, stderr := runBin(t, "inspect", "s", "--addr", addr, "--json")
	if code != 0 {
		t.Fatalf("inspect: %d %s", code, stderr)
	}
	var det admin.Detail
	if err := json.Unmarshal([]byte(out), &det); err != nil {
		t.Fatal(err)
	}
	got := fixtureLines(det.Stderr)
	for pid, lines := range want {
		if n := len(got[pid]); n == 0 || fmt.Sprint(got[pid]) != fmt.Sprint(lines[len(lines)-n:]) {
			t.Fatalf("inspect's stderr, by pid: %v, want the end of %v\n%+v", got, want, det.Stderr)
		}
	}
}
