package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/authn"
	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/policy"
)

// twentyRules are a team's policy of 20 rules: allows by group and
// server, denies by tool and by argument.
func twentyRules() []policy.Rule {
	var rules []policy.Rule
	for i := range 8 {
		rules = append(rules, policy.Rule{Name: fmt.Sprintf("allow-%d", i), Effect: policy.Allow,
			When: fmt.Sprintf(`"team-%d" in identity.groups && server == "s%d"`, i, i)})
	}
	for i := range 6 {
		rules = append(rules, policy.Rule{Name: fmt.Sprintf("deny-tool-%d", i), Effect: policy.Deny,
			When: fmt.Sprintf(`tool == "delete_%d"`, i)})
	}
	for i := range 4 {
		rules = append(rules, policy.Rule{Name: fmt.Sprintf("deny-arg-%d", i), Effect: policy.Deny,
			When: fmt.Sprintf(`server == "a" && has(arguments.path) && arguments.path.startsWith("/secret-%d")`, i)})
	}
	rules = append(rules,
		policy.Rule{Name: "allow-a", Effect: policy.Allow, When: `server == "a" && identity.client == "client-1"`},
		policy.Rule{Name: "deny-night", Effect: policy.Deny, When: `identity.sub == "mallory"`})
	return rules
}

// cpuRounds runs each of parts per times in each of 15 interleaved
// rounds, on a thread of its own, with b's timer on, and returns the
// median thread CPU time of one run of each, in nanoseconds.
func cpuRounds(b *testing.B, per int, parts ...func()) []float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	samples := make([][]float64, len(parts))
	b.ResetTimer()
	for range 15 {
		for i, fn := range parts {
			start := threadCPU()
			for range per {
				fn()
			}
			samples[i] = append(samples[i], float64(threadCPU()-start)/float64(per))
		}
	}
	b.StopTimer()
	meds := make([]float64, len(parts))
	for i, v := range samples {
		slices.Sort(v)
		meds[i] = v[len(v)/2]
	}
	return meds
}

// BenchmarkTeamCost is what team identity adds to a call, part by part,
// in thread CPU time, against the same call's path without it, measured
// in interleaved rounds of the same run: the token's check with its key
// and verification cached (verify), the 20 rules (policy), the audit
// line's enqueue with the call's end (audit). make bench-team runs it.
func BenchmarkTeamCost(b *testing.B) {
	w := newWorld(b, `{"a":{"command":"$FIXTURE"}}`)
	g := w.gw
	srv := w.fleet.Get("a")
	iss := authntest.Start(b, authntest.Options{InMemory: true})
	const pub = "https://mcp.example.test"
	v, err := authn.New(authn.Options{Issuer: iss.URL, Audiences: []string{pub + "/mcp"}, HTTPClient: iss.Client()})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	team := &guard.Team{}
	team.Set(&guard.TeamConfig{Verifier: v, PublicURL: pub, Issuer: iss.URL, AdminScope: "admin"})
	claims := iss.Claims("alice", pub+"/mcp")
	claims["groups"] = []any{"team-1"}
	tok := iss.Mint(b, claims, authntest.MintOptions{})
	withTeam := guard.New(guard.Options{Team: team, Route: guard.Route{Path: "/mcp"}})
	without := guard.New(guard.Options{Route: guard.Route{Path: "/mcp"}})
	req := httptest.NewRequest("POST", "/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, nil))
	rec := httptest.NewRecorder()
	r0, status := withTeam.Admit(rec, req)
	if status != 0 {
		b.Fatalf("the token is refused: %d %s", status, rec.Body)
	}
	who := identity.FromContext(r0.Context())
	pol, err := policy.Compile(twentyRules())
	if err != nil {
		b.Fatal(err)
	}
	log, err := audit.Open(audit.Options{File: filepath.Join(b.TempDir(), "audit.jsonl"), Queue: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close(context.Background())
	s := NewSession(newRecorder())
	s.SetIdentity(who)
	params := json.RawMessage(`{"name":"echo","arguments":{"path":"/home/alice/notes.txt","text":"hello"}}`)
	id := json.RawMessage(`1`)
	ctx := context.Background()

	// The parts, each with what it adds over the baseline.
	base := func() {
		_, _ = without.Admit(rec, req)
		f, _ := g.newFlight(ctx, nil, legacySender(s), srv, "tools/call", params, id, nil)
		_ = f
	}
	verify := func() { _, _ = withTeam.Admit(rec, req) }
	decide := func(f *flight, raw json.RawMessage) {
		if g.prepare(f, raw, params) != nil || g.permit(f) != nil || g.admit(f) != nil {
			b.Fatal("the call is refused")
		}
	}
	g.SetPolicy(pol)
	g.SetAudit(log)
	defer g.SetPolicy(nil)
	defer g.SetAudit(nil)
	full := func() {
		verify()
		f, raw := g.newFlight(ctx, nil, legacySender(s), srv, "tools/call", params, id, nil)
		decide(f, raw)
		f.auditCall(f.start)
	}
	parts := []struct {
		name string
		fn   func()
	}{
		{"baseline", base},
		{"verify", verify},
		{"policy", func() {
			_, _ = without.Admit(rec, req)
			f, raw := g.newFlight(ctx, nil, legacySender(s), srv, "tools/call", params, id, nil)
			decide(f, raw)
		}},
		{"audit", func() {
			_, _ = without.Admit(rec, req)
			f, _ := g.newFlight(ctx, nil, legacySender(s), srv, "tools/call", params, id, nil)
			f.preq, f.auditTarget = &policy.Request{Tool: "echo"}, "echo"
			f.auditCall(f.start)
		}},
		{"all", func() { base(); full() }},
	}
	fns := make([]func(), len(parts))
	for i, p := range parts {
		fns[i] = p.fn
	}
	meds := cpuRounds(b, max(b.N/15, 2000), fns...)
	med := func(i int) float64 { return meds[i] }
	baseNs := med(0)
	b.ReportMetric(baseNs, "baseline-cpu-ns")
	b.ReportMetric(med(1), "verify-cpu-ns")
	// The policy and audit parts each check a request without team
	// identity and make a flight, as the baseline does: their own cost
	// is what they take over it.
	b.ReportMetric(med(2)-baseNs, "policy-cpu-ns")
	b.ReportMetric(med(3)-baseNs, "audit-cpu-ns")
	// all runs the baseline, then the call with team identity (verify,
	// flight, policy, audit): what team identity adds over a call without
	// it is (all − baseline) − baseline.
	b.ReportMetric(med(4)-2*baseNs, "added-cpu-ns")
}
