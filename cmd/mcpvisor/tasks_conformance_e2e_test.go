package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// pendingResults runs the suite's pending scenarios (the extensions'
// among them) against url and returns, for each scenario whose name
// starts with prefix, its passed and failed checks.
func pendingResults(t *testing.T, url, prefix string) map[string][2]int {
	t.Helper()
	// No --spec-version: an extension's scenario is not on the spec's
	// timeline and would be skipped.
	summary := suiteSummary(t, url, 3*time.Minute, "--suite", "pending")
	res := map[string][2]int{}
	for _, m := range regexp.MustCompile(`(?m)^[✓✗] ([a-z0-9-]+): (\d+) passed, (\d+) failed`).FindAllStringSubmatch(summary, -1) {
		if strings.HasPrefix(m[1], prefix) {
			p, _ := strconv.Atoi(m[2])
			f, _ := strconv.Atoi(m[3])
			res[m[1]] = [2]int{p, f}
		}
	}
	return res
}

// TestTasksConformance runs the official suite's tasks-* scenarios (the
// 2026-07-28 tasks extension, 0.2.0-alpha.12) against the tasks fixture
// directly over its own HTTP, and through mcpvisor with the default
// config — the fixture over stdio, on /servers/tasks/mcp and on /mcp
// (prefix "": the suite calls its tools by their own names), and a second
// one over its own HTTP as a remote server, on /servers/remote/mcp (on
// /mcp its tools' names would collide with the first's) —, in the same
// run, and asserts that every check passes through mcpvisor that
// passes directly, and that the checks ran (a scenario whose checks
// were all skipped would "pass" with none).
func TestTasksConformance(t *testing.T) {
	direct := testserver.StartTasksHTTP(t)
	base := serve(t, fmt.Sprintf(`{"mcpServers":{"tasks":{"command":"node","args":[%q,"stdio"],"prefix":""},"remote":{"url":%q,"prefix":""}}}`,
		testserver.TasksFixture(t), testserver.StartTasksHTTP(t)))
	targets := []struct{ name, url string }{{"direct", direct}, {"per-server", base + "/servers/tasks/mcp"}, {"aggregated", base + "/mcp"},
		{"remote per-server", base + "/servers/remote/mcp"}}
	results := make([]map[string][2]int, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		wg.Go(func() { results[i] = pendingResults(t, tg.url, "tasks-") })
	}
	wg.Wait()
	want := results[0]
	checks := 0
	for name, r := range want {
		checks += r[0]
		if r[1] != 0 {
			t.Errorf("directly, %s fails %d checks: the fixture is wrong", name, r[1])
		}
	}
	// tasks-status-notifications runs no check in this version of the
	// suite ("pending subscriptions/listen rewrite"); the other nine do.
	if len(want) != 10 || checks < 40 {
		t.Fatalf("directly, %d tasks scenarios ran %d checks, want 10 scenarios and at least 40 checks: %v", len(want), checks, want)
	}
	for i, tg := range targets[1:] {
		got := results[i+1]
		for name, r := range want {
			if got[name] != r {
				t.Errorf("%s: %s passed %d and failed %d checks, directly %d and %d", tg.name, name, got[name][0], got[name][1], r[0], r[1])
			}
		}
		t.Logf("%s (%s): %v", tg.name, tg.url, got)
	}
}
