package main

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// skillsScenarios are the conformance suite's server scenarios of the
// skills extension (SEP-2640).
var skillsScenarios = []string{"sep-2640-skills-enumeration", "sep-2640-skills-manifest", "sep-2640-skills-directory"}

// scenarioChecks runs one scenario of the 0.2 suite against url (at the
// suite's default, 2026-07-28: no --spec-version, which would skip the
// extension's scenarios) and returns the status of each of its checks by
// id.
func scenarioChecks(t *testing.T, url, scenario string) (map[string]string, string) {
	node, _ := node22(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, suiteNext(t), "server", "--url", url, "--scenario", scenario)
	cmd.Dir = t.TempDir()
	b, _ := cmd.CombinedOutput()
	out := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(string(b), "")
	checks := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)\[([a-z0-9-]+)\s*\] (SUCCESS|FAILURE|WARNING|SKIPPED|INFO)`).FindAllStringSubmatch(out, -1) {
		checks[m[1]] = m[2]
	}
	return checks, out
}

// TestSkillsConformance runs the suite's skills scenarios against the
// fixture's skills (-skills) directly, over the fixture's own HTTP
// (-http, as a 2026-07-28 server: the suite's client speaks only that
// per request), and through mcpvisor with the default config on
// /servers/NAME/mcp and on /mcp: every check that passes directly passes
// through mcpvisor, and every one of them ran (a server that does not
// declare the extension would have the checks SKIPPED and the scenario
// "pass"). Through mcpvisor the fixture is a 2025 one (its 2026-07-28
// clients' requests translated, ttlMs and cacheScope added), beside a
// server without skills, and, on /mcp, a 2026-07-28-only one (its own
// endpoint only passes its answers through). Twelve runs of the suite, in
// parallel: each costs node's start, most of the test's time.
func TestSkillsConformance(t *testing.T) {
	fixture := testserver.Build(t)
	direct := "http://" + testserver.StartHTTP(t, fixture, "-modern-only", "-skills", "pdf-processing") + "/mcp"
	legacy := serve(t, fmt.Sprintf(`{"mcpServers":{
		"skills":{"command":%q,"args":["-skills","pdf-processing"],"env":{"FIXTURE_TAG":"legacy"}},
		"plain":{"command":%q}}}`, fixture, fixture))
	modern := serve(t, fmt.Sprintf(`{"mcpServers":{
		"skills":{"command":%q,"args":["-skills","pdf-processing","-modern-only"],"env":{"FIXTURE_TAG":"modern"}}}}`, fixture))
	targets := map[string]string{
		"direct":                   direct,
		"2025 fixture, per-server": legacy + "/servers/skills/mcp",
		"2025 fixture, /mcp":       legacy + "/mcp",
		"2026-07-28 fixture, /mcp": modern + "/mcp",
	}
	type run struct {
		checks map[string]string
		out    string
	}
	runs := map[string]*run{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for target, url := range targets {
		for _, sc := range skillsScenarios {
			wg.Go(func() {
				checks, out := scenarioChecks(t, url, sc)
				mu.Lock()
				runs[target+" "+sc] = &run{checks, out}
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	passed := func(checks map[string]string) int {
		n := 0
		for _, st := range checks {
			if st == "SUCCESS" {
				n++
			}
		}
		return n
	}
	total := map[string]int{}
	for _, sc := range skillsScenarios {
		d := runs["direct "+sc]
		// The fixture passes every check directly, none skipped.
		if len(d.checks) == 0 || passed(d.checks) != len(d.checks) || !strings.Contains(d.out, fmt.Sprintf("Passed: %d/%d", len(d.checks), len(d.checks))) {
			t.Fatalf("%s directly: %v\n%s", sc, d.checks, d.out)
		}
		total["direct"] += passed(d.checks)
		for target := range targets {
			if target == "direct" {
				continue
			}
			r := runs[target+" "+sc]
			bad := false
			for _, id := range slices.Sorted(maps.Keys(d.checks)) {
				if st := r.checks[id]; st != "SUCCESS" {
					t.Errorf("%s, %s: check %s is %q, passes directly", target, sc, id, st)
					bad = true
				}
			}
			if bad {
				t.Logf("%s, %s:\n%s", target, sc, r.out)
			}
			total[target] += passed(r.checks)
		}
	}
	for _, target := range slices.Sorted(maps.Keys(targets)) {
		t.Logf("%s: %d checks passed", target, total[target])
	}
}
