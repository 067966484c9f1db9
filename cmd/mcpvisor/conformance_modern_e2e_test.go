package main

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// suiteNext is the conformance suite's 0.2 line, with the 2026-07-28
// requirement set.
func suiteNext(t *testing.T) string {
	return filepath.Join(testserver.Deps(t, "npm-next"), "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
}

// scoredResults runs the 2026-07-28 requirement set against url and
// returns each scored scenario and whether it passed (the unscored ones —
// the tasks extension, pending scenarios — are left out).
func scoredResults(t *testing.T, url string) map[string]bool {
	t.Helper()
	summary, unscored, _ := strings.Cut(suiteSummary(t, url, 5*time.Minute, "--requirements", "2026-07-28"), "Not scored")
	skip := map[string]bool{}
	for _, m := range regexp.MustCompile(`[✓✗] ([a-z0-9-]+) \(`).FindAllStringSubmatch(unscored, -1) {
		skip[m[1]] = true
	}
	res := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([✓✗]) ([a-z0-9-]+):`).FindAllStringSubmatch(summary, -1) {
		if !skip[m[2]] {
			res[m[2]] = m[1] == "✓"
		}
	}
	if len(res) < 30 {
		t.Fatalf("only %d scored scenarios against %s:\n%s", len(res), url, summary)
	}
	return res
}

// suiteSummary runs the 0.2 suite's server scenarios against url with
// args, within d, and returns its summary.
func suiteSummary(t *testing.T, url string, d time.Duration, args ...string) string {
	t.Helper()
	node, _ := node22(t)
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{suiteNext(t), "server", "--url", url}, args...)...)
	cmd.Dir = t.TempDir()
	b, _ := cmd.CombinedOutput()
	out := string(b)
	i := strings.Index(out, "=== SUMMARY ===")
	if i < 0 {
		t.Fatalf("no summary from the suite against %s:\n%s", url, out)
	}
	return out[i:]
}

// failed lists the scenarios of res that failed.
func failed(res map[string]bool) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(res)) {
		if !res[k] {
			out = append(out, k)
		}
	}
	return out
}

// heldCallFailures are the scored scenarios a modern client fails
// through mcpvisor when the server is served as a legacy one ("protocol":
// "legacy", "sharing": "per-session": each modern request has an instance
// of its own). One: it asks for the server's own name for its input
// ("user_name"), which a legacy server's request does not carry — the
// server's go-sdk, talking to a legacy client, sends its inputs as plain
// requests, and mcpvisor names each itself for the held call.
var heldCallFailures = []string{"input-required-result-basic-elicitation"}

// sharedLegacyFailures are those of a legacy server shared by all: after
// the first scenario leaves its round unanswered (its call stays held at
// the server), a request the server sends could be that call's or the
// next one's, and mcpvisor refuses it rather than guess.
var sharedLegacyFailures = []string{
	"input-required-result-basic-elicitation", "input-required-result-basic-list-roots",
	"input-required-result-basic-sampling", "input-required-result-capability-check",
	"input-required-result-multi-round", "input-required-result-multiple-input-requests",
	"input-required-result-non-tool-request", "input-required-result-request-state",
	"input-required-result-result-type", "input-required-result-tampered-state",
}

// TestConformanceModern runs the official suite's 2026-07-28 requirement
// set through mcpvisor in front of the go-sdk conformance server (dual-era)
// over stdio, and against that server directly over its own HTTP, in the
// same run. With the default config (no "protocol", no "sharing") every
// scored scenario it passes directly passes through mcpvisor on
// /servers/everything/mcp and on /mcp (prefix ""): its modern clients are
// served by a process of their own, probed modern, with the server's own
// input_required rounds. Then the pinned variants: as a remote server
// found modern ("protocol": "auto"), the same; served as a legacy server,
// through held calls, all but the one that names the server's own
// input key when each modern request has an instance of its own
// (per-session), and none after an unanswered round when all share one.
func TestConformanceModern(t *testing.T) {
	_, everything := binaries(t)
	direct := scoredResults(t, startEverythingHTTP(t, everything))
	if f := failed(direct); len(f) != 0 {
		t.Fatalf("the server itself fails %v", f)
	}
	for _, tc := range []struct {
		name, settings string
		remote         bool // the server over its own HTTP, not over stdio
		want           []string
	}{
		{name: "default"},
		// Found modern, its input-required scenarios pass, which only
		// the server's own input keys satisfy (those mcpvisor names a
		// held call's inputs by would not).
		{name: "remote_auto", settings: `,"protocol":"auto"`, remote: true},
		{name: "legacy_per-session", settings: `,"protocol":"legacy","sharing":"per-session"`, want: heldCallFailures},
		{name: "legacy_shared", settings: `,"protocol":"legacy","sharing":"shared"`, want: sharedLegacyFailures},
	} {
		server, paths := fmt.Sprintf(`"command":%q`, everything), []string{"/servers/everything/mcp", "/mcp"}
		if tc.remote {
			server, paths = fmt.Sprintf(`"url":%q`, startEverythingHTTP(t, everything)), paths[:1]
		}
		base := serve(t, fmt.Sprintf(`{"mcpServers":{"everything":{%s,"prefix":""%s}}}`, server, tc.settings))
		for _, path := range paths {
			t.Run(tc.name+strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
				got := scoredResults(t, base+path)
				if f := failed(got); !slices.Equal(f, tc.want) {
					t.Fatalf("failed scored scenarios %v, want %v", f, tc.want)
				}
				for k := range direct {
					if _, ok := got[k]; !ok {
						t.Errorf("scenario %s did not run through mcpvisor", k)
					}
				}
				t.Logf("%s, %s: %d of %d scored scenarios pass (the server directly: %d of %d)",
					tc.name, path, len(got)-len(failed(got)), len(got), len(direct), len(direct))
			})
		}
	}
}

// startEverythingHTTP runs the conformance server on its own HTTP
// (stateless unless args say otherwise) and returns its URL.
func startEverythingHTTP(t *testing.T, everything string, args ...string) string {
	t.Helper()
	return "http://" + testserver.StartHTTP(t, everything, args...) + "/"
}
