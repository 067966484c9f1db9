package gateway

import (
	"fmt"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/policy"
)

// fiftyRules are a team's policy of 50 rules over benchFleet's names:
// allows by server and group, denies by argument, and rules for every
// server. The benchmark's identity (group dev) may call every tool, so
// that the list it gets is the whole list, as without a policy: what is
// measured is the filtering, not a shorter answer.
func fiftyRules() []policy.Rule {
	var rules []policy.Rule
	for i := range 30 {
		rules = append(rules, policy.Rule{Name: fmt.Sprintf("a%d", i), Effect: policy.Allow,
			When: fmt.Sprintf(`server == "s%04d" && tool == "tool%02d" && "ops" in identity.groups`, i*3, i%20)})
	}
	for i := range 10 {
		rules = append(rules, policy.Rule{Name: fmt.Sprintf("d%d", i), Effect: policy.Deny,
			When: fmt.Sprintf(`server == "s%04d" && has(arguments.text) && arguments.text.startsWith("/etc")`, i*7)})
	}
	for i, when := range []string{
		`tool == "drop_db"`,
		`tool.startsWith("admin_") && !("admin" in identity.groups)`,
		`identity.kind == ""`,
		`has(arguments.force) && arguments.force == true`,
		`method == "tools/call" && tool.endsWith("_dangerous")`,
	} {
		rules = append(rules, policy.Rule{Name: fmt.Sprintf("g%d", i), Effect: policy.Deny, When: when})
	}
	for i, when := range []string{
		`"ops" in identity.groups && identity.client == "cli-1"`,
		`tool.startsWith("read_")`,
		`identity.claims.team == "a" && server.startsWith("team-a-")`,
		`"sre" in identity.groups && has(arguments.ticket)`,
		`"dev" in identity.groups`,
	} {
		rules = append(rules, policy.Rule{Name: fmt.Sprintf("h%d", i), Effect: policy.Allow, When: when})
	}
	return rules
}

// BenchmarkPolicyList is what the policy's filtering adds to a tools/list
// of 100 servers × 20 tools under 50 rules, through the aggregate
// endpoint, in thread CPU time against the same list request without a
// policy, in interleaved rounds of one run: warm (the identity's answer
// kept), token (another token, of this or another person the rules read
// alike: another subject, jti and exp) and cold (an identity the rules
// tell apart from every one before, a group of its own: every item
// evaluated partially, as once per such identity, policy and list).
// go test -run '^$' -bench BenchmarkPolicyList -count 3 ./internal/gateway/
func BenchmarkPolicyList(b *testing.B) {
	plain, filtered := benchFleet(b, 100), benchFleet(b, 100)
	pol, err := policy.Compile(fiftyRules())
	if err != nil {
		b.Fatal(err)
	}
	filtered.SetPolicy(pol)
	user := func(sub string, groups ...string) *identity.Identity {
		return (&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: sub, ClientID: "c",
			Groups: append([]string{"dev"}, groups...), Claims: map[string]any{"team": "b", "jti": sub}}).Finish()
	}
	open := func(g *Gateway) (Endpoint, *Session) {
		ep := g.Aggregate()
		s := ep.Open(newRecorder())
		b.Cleanup(func() { ep.Close(s) })
		s.SetIdentity(user("dana"))
		return ep, s
	}
	pe, ps := open(plain)
	fe, fs := open(filtered)
	dana := fs.Identity()
	id := 0
	list := func(ep Endpoint, s *Session) string { id++; return listTools(b, ep, s, id) }
	if a, f := list(pe, ps), list(fe, fs); a != f {
		b.Fatalf("the policy changes dana's list: %d bytes without, %d with", len(a), len(f))
	}
	fresh := 0
	meds := cpuRounds(b, max(b.N/15, 20),
		func() { list(pe, ps) },                                                                // none
		func() { fs.SetIdentity(dana); list(fe, fs) },                                          // warm
		func() { fresh++; fs.SetIdentity(user(fmt.Sprint("u", fresh))); list(fe, fs) },         // token
		func() { fresh++; fs.SetIdentity(user("dana", fmt.Sprint("g", fresh))); list(fe, fs) }, // cold
	)
	med := func(i int) float64 { return meds[i] }
	none := med(0)
	b.ReportMetric(none/1e3, "list-cpu-us")
	b.ReportMetric((med(1)-none)/none, "warm-added-ratio")
	b.ReportMetric((med(2)-none)/none, "token-added-ratio")
	b.ReportMetric((med(3)-none)/none, "cold-added-ratio")
}
