package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

func alice() *identity.Identity {
	return (&identity.Identity{
		Kind: identity.Token, Issuer: "https://as", Subject: "alice", ClientID: "cli-1",
		Groups: []string{"ops"}, Scopes: []string{"mcp"},
		Claims: map[string]any{"sub": "alice", "team": "a", "level": float64(3)},
	}).Finish()
}

func mustCompile(t testing.TB, rules ...Rule) *Policy {
	t.Helper()
	p, err := Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func allow(name, when string) Rule { return Rule{Name: name, Effect: Allow, When: when} }
func deny(name, when string) Rule  { return Rule{Name: name, Effect: Deny, When: when} }

func call(id *identity.Identity, server, tool, args string) *Request {
	r := &Request{Identity: id, Server: server, Method: "tools/call", Tool: tool}
	if args != "" {
		r.Arguments = json.RawMessage(args)
	}
	return r
}

func TestCompileNamesEveryBadRule(t *testing.T) {
	_, err := Compile([]Rule{
		{Name: "ok", Effect: Allow, When: `tool == "x"`, Path: "policy.rules[0].when"},
		{Name: "type", Effect: Allow, When: `tool == 3`, Path: "policy.rules[1].when"},
		{Name: "syntax", Effect: Deny, When: `tool ==`, Path: "policy.rules[2].when"},
		{Name: "notbool", Effect: Deny, When: `tool`, Path: "policy.rules[3].when"},
		{Name: "dyn", Effect: Deny, When: `identity.claims.admin`, Path: "policy.rules[4].when"},
		{Name: "effect", Effect: "permit", When: `true`, Path: "policy.rules[5].effect"},
		{Name: "empty", Effect: Allow, When: ``, Path: "policy.rules[6].when"},
		{Name: "undeclared", Effect: Allow, When: `user == "x"`, Path: "policy.rules[7].when"},
		{Name: "shadow", Effect: Deny, When: `[1].exists(identity, .identity.sub == "a")`, Path: "policy.rules[8].when"},
		{Name: "shadow2", Effect: Deny, When: `arguments.all(tool, tool != "x")`, Path: "policy.rules[9].when"},
	})
	if err == nil {
		t.Fatal("bad rules compiled")
	}
	msg := err.Error()
	for _, want := range []string{
		"policy.rules[1].when: ", "no matching overload",
		"policy.rules[2].when: ", "Syntax error",
		"policy.rules[3].when: ", "string, not bool",
		"policy.rules[4].when: ",
		"policy.rules[5].effect: ", `"permit"`,
		"policy.rules[6].when: empty condition",
		"policy.rules[7].when: ", "undeclared reference to 'user'",
		`policy.rules[8].when: the macro's variable "identity" hides`,
		`policy.rules[9].when: the macro's variable "tool" hides`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "policy.rules[0]") {
		t.Errorf("error names the good rule:\n%s", msg)
	}
}

func TestNoRulesAllows(t *testing.T) {
	var nilPolicy *Policy
	empty := mustCompile(t)
	for _, p := range []*Policy{nilPolicy, empty} {
		if d := p.Decide(call(nil, "s", "t", `{"x":1}`)); !d.Allowed || d.Rule != "default" {
			t.Errorf("no rules: %+v", d)
		}
		if !p.Visible(nil, "s", KindTool, "t") || p.Visible(nil, "s", "widget", "t") {
			t.Error("no rules: visibility")
		}
	}
}

// TestDenyOverrides states the combining rule as a table.
func TestDenyOverrides(t *testing.T) {
	const T, F = "true", "false"
	cases := []struct {
		name    string
		rules   []Rule
		allowed bool
		rule    string
	}{
		{"only a false deny", []Rule{deny("d", F)}, true, "default"},
		{"only a true deny", []Rule{deny("d", T)}, false, "d"},
		{"only a true allow", []Rule{allow("a", T)}, true, "a"},
		{"only a false allow", []Rule{allow("a", F)}, false, "default"},
		{"true allow, true deny", []Rule{allow("a", T), deny("d", T)}, false, "d"},
		{"true deny before true allow", []Rule{deny("d", T), allow("a", T)}, false, "d"},
		{"true allow, false deny", []Rule{allow("a", T), deny("d", F)}, true, "a"},
		{"false allow, false deny", []Rule{allow("a", F), deny("d", F)}, false, "default"},
		{"false then true allow", []Rule{allow("a1", F), allow("a2", T)}, true, "a2"},
		{"two true denies: first", []Rule{allow("a", T), deny("d1", T), deny("d2", T)}, false, "d1"},
	}
	for _, c := range cases {
		d := mustCompile(t, c.rules...).Decide(call(alice(), "s", "t", ""))
		if d.Allowed != c.allowed || d.Rule != c.rule {
			t.Errorf("%s: got %+v, want allowed=%v rule=%s", c.name, d, c.allowed, c.rule)
		}
	}
}

func TestFailClosed(t *testing.T) {
	missing := `arguments.repo.startsWith("team-a/")`
	cases := []struct {
		name    string
		rules   []Rule
		args    string
		allowed bool
		reason  string
	}{
		{"allow errors: no match", []Rule{allow("a", missing)}, `{}`, false, "no allow rule matched; rule a failed: no such key: repo"},
		{"deny errors: match", []Rule{allow("a", "true"), deny("d", missing)}, `{}`, false, "rule d failed: no such key: repo"},
		{"deny false with the key", []Rule{allow("a", "true"), deny("d", missing)}, `{"repo":"team-b/x"}`, true, "allowed by rule a"},
		{"wrong type", []Rule{allow("a", missing)}, `{"repo":7}`, false, "no allow rule matched; rule a failed: no such overload"},
		{"guarded by has", []Rule{allow("a", `has(arguments.repo) && `+missing)}, `{}`, false, "no allow rule matched"},
		{"missing claim in a deny", []Rule{allow("a", "true"), deny("d", `identity.claims.nope == "x"`)}, ``, false, "rule d failed: no such key: nope"},
	}
	for _, c := range cases {
		d := mustCompile(t, c.rules...).Decide(call(alice(), "s", "t", c.args))
		if d.Allowed != c.allowed || !strings.HasPrefix(d.Reason, c.reason) {
			t.Errorf("%s: got %+v, want allowed=%v reason %q", c.name, d, c.allowed, c.reason)
		}
	}
}

func TestVariables(t *testing.T) {
	id := alice()
	req := &Request{Identity: id, Server: "github", Method: "prompts/get", Prompt: "summary",
		Arguments: json.RawMessage(`{"n": 5, "nested": {"list": [1, "two"]}}`)}
	for _, when := range []string{
		`identity.sub == "alice" && identity.iss == "https://as" && identity.client == "cli-1"`,
		`"ops" in identity.groups && "mcp" in identity.scopes && identity.kind == "token"`,
		`identity.claims.team == "a" && identity.claims.level > 2`,
		`server == "github" && method == "prompts/get" && prompt == "summary" && tool == "" && resource == ""`,
		`arguments.n == 5 && arguments.n > 4 && arguments.nested.list[1] == "two"`,
	} {
		if d := mustCompile(t, allow("a", when)).Decide(req); !d.Allowed {
			t.Errorf("%s: %+v", when, d)
		}
	}
	anon := &Request{Server: "s", Method: "resources/read", Resource: "file:///x"}
	when := `identity.kind == "" && identity.sub == "" && size(identity.groups) == 0 && size(identity.claims) == 0 && resource == "file:///x" && arguments == {}`
	if d := mustCompile(t, allow("a", when)).Decide(anon); !d.Allowed {
		t.Errorf("anonymous: %+v", d)
	}
}

// TestNamesExact: a rule sees the exact name it is given; near misses do
// not match an allow, and do not escape a deny written for another name.
func TestNamesExact(t *testing.T) {
	p := mustCompile(t, deny("no-delete", `tool == "delete_repo"`), allow("gh", `server == "github"`))
	for _, name := range []string{"Delete_repo", "DELETE_REPO", "delete_rеpo" /* Cyrillic е */, "delete_repo ", "delete_repo_x", "delete", "ｄelete_repo"} {
		d := p.Decide(call(alice(), "github", name, ""))
		if !d.Allowed {
			t.Errorf("%q was taken for delete_repo: %+v", name, d)
		}
	}
	if d := p.Decide(call(alice(), "github", "delete_repo", "")); d.Allowed || d.Rule != "no-delete" {
		t.Errorf("delete_repo: %+v", d)
	}
	allowOnly := mustCompile(t, allow("read", `server == "github" && tool == "read_file"`))
	for _, name := range []string{"read_file2", "Read_file", "rеad_file", "read_fil", "read_file\x00"} {
		if d := allowOnly.Decide(call(alice(), "github", name, "")); d.Allowed {
			t.Errorf("allow rule for read_file allowed %q", name)
		}
		if allowOnly.Visible(alice(), "github", KindTool, name) {
			t.Errorf("%q listed", name)
		}
	}
	if d := allowOnly.Decide(call(alice(), "GitHub", "read_file", "")); d.Allowed {
		t.Error("server name compared without case")
	}
}

func TestClientIsTheTokens(t *testing.T) {
	p := mustCompile(t, allow("cli", `identity.client == "trusted"`))
	id := (&identity.Identity{Kind: identity.Token, Subject: "bob", ClientID: "other",
		Claims: map[string]any{"client_name": "trusted", "clientInfo": map[string]any{"name": "trusted"}}}).Finish()
	if p.Decide(call(id, "s", "t", `{"client":"trusted","identity":{"client":"trusted"}}`)).Allowed {
		t.Error("a claim or an argument passed for the token's client")
	}
	id2 := (&identity.Identity{Kind: identity.Token, Subject: "bob", ClientID: "trusted"}).Finish()
	if !p.Decide(call(id2, "s", "t", "")).Allowed {
		t.Error("the token's client_id was not seen")
	}
}

func TestArgumentsShapes(t *testing.T) {
	reads := mustCompile(t, allow("a", `!has(arguments.x)`))
	denyReads := mustCompile(t, allow("a", `true`), deny("d", `has(arguments.x)`))
	huge := `{"y":"` + strings.Repeat("a", MaxArgumentBytes) + `"}`
	deep := strings.Repeat(`{"a":`, 20000) + `1` + strings.Repeat(`}`, 20000)
	deepOK := strings.Repeat(`{"a":`, 500) + `1` + strings.Repeat(`}`, 500)
	for _, c := range []struct {
		name, args string
		ok         bool
	}{
		{"absent", ``, true},
		{"null", `null`, true},
		{"empty object", ` {} `, true},
		{"array", `[{"x":1}]`, false},
		{"string", `"x"`, false},
		{"number", `1`, false},
		{"malformed", `{"x":`, false},
		{"trailing garbage", `{} {}`, false},
		{"huge", huge, false},
		{"too deep", deep, false},
		{"deep", deepOK, true},
	} {
		d := reads.Decide(call(alice(), "s", "t", c.args))
		if d.Allowed != c.ok {
			t.Errorf("%s: allow rule reading arguments: %+v", c.name, d)
		}
		d = denyReads.Decide(call(alice(), "s", "t", c.args))
		if d.Allowed != c.ok {
			t.Errorf("%s: deny rule reading arguments: %+v", c.name, d)
		}
	}
	// Rules that do not read arguments do not care what they are.
	p := mustCompile(t, allow("a", `tool == "t"`))
	if !p.Decide(call(alice(), "s", "t", `[not json`)).Allowed {
		t.Error("arguments decoded though no rule reads them")
	}
}

func TestArgumentsNotDecodedWhenNoRuleReadsThem(t *testing.T) {
	p := mustCompile(t, allow("a", `server == "github" && tool == "t"`),
		deny("d", `server == "other" && arguments.x == 1`))
	args := json.RawMessage(`{"x":1,"y":[1,2,3,4,5,6,7,8],"z":{"a":"b"}}`)
	req := &Request{Identity: alice(), Server: "github", Method: "tools/call", Tool: "t", Arguments: args}
	with := testing.AllocsPerRun(100, func() { p.Decide(req) })
	req.Arguments = nil
	without := testing.AllocsPerRun(100, func() { p.Decide(req) })
	if with != without {
		t.Errorf("arguments decoded for a server no argument rule names: %v allocs with, %v without", with, without)
	}
	req.Server, req.Arguments = "other", args
	if d := p.Decide(req); d.Allowed || d.Rule != "d" {
		t.Errorf("the deny on other: %+v", d)
	}
}

func TestCachesBounded(t *testing.T) {
	defer func(s, v int) { maxSubjects, maxVisible = s, v }(maxSubjects, maxVisible)
	maxSubjects, maxVisible = 8, 16
	p := mustCompile(t, allow("a", `identity.sub != "x"`))
	for i := 0; i < 100; i++ {
		id := (&identity.Identity{Kind: identity.Token, Subject: string(rune('a' + i))}).Finish()
		p.Decide(call(id, "s", "t", ""))
		p.Visible(id, "s", KindTool, "t")
		p.Visible(id, "s", KindPrompt, "t")
	}
	if len(p.subjects) > 8 || len(p.visible) > 16 || len(p.bases) > 16 {
		t.Errorf("caches grew to %d subjects, %d answers, %d bases", len(p.subjects), len(p.visible), len(p.bases))
	}
}

func TestVisibleCacheKeyedByClaims(t *testing.T) {
	p := mustCompile(t, allow("a", `identity.claims.team == "a"`))
	a := alice()
	b := alice()
	b.Claims = map[string]any{"team": "b"}
	b.Finish()
	if !p.Visible(a, "s", KindTool, "t") {
		t.Fatal("team a hidden")
	}
	if p.Visible(b, "s", KindTool, "t") {
		t.Error("another identity with the same key and other claims got a cached answer")
	}
}

func TestConcurrent(t *testing.T) {
	p := mustCompile(t, allow("a", `"ops" in identity.groups`), deny("d", `has(arguments.x) && arguments.x == 1`))
	ids := []*identity.Identity{alice(), nil, (&identity.Identity{Subject: "bob"}).Finish()}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				id := ids[(g+i)%len(ids)]
				d := p.Decide(call(id, "s", "t", `{"x":2}`))
				v := p.Visible(id, "s", KindTool, "t")
				if d.Allowed != (id == ids[0]) || v != d.Allowed {
					errs <- errors.New("inconsistent decision under concurrency")
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestNilRequest(t *testing.T) {
	p := mustCompile(t, allow("anon", `identity.kind == "" && server == "" && arguments == {}`))
	if d := p.Decide(nil); !d.Allowed {
		t.Errorf("nil request: %+v", d)
	}
}

func TestEvaluationCostBounded(t *testing.T) {
	p := mustCompile(t, allow("a", `true`),
		deny("quadratic", `has(arguments.l) && arguments.l.exists(x, arguments.l.exists(y, x + y == -1))`))
	n := 5000 // 25 million steps unbounded
	l := make([]int, n)
	b, _ := json.Marshal(map[string]any{"l": l})
	d := p.Decide(call(alice(), "s", "t", string(b)))
	if d.Allowed || !strings.Contains(d.Reason, "cost limit") {
		t.Errorf("quadratic rule over %d elements: %+v", n, d)
	}
	small, _ := json.Marshal(map[string]any{"l": l[:10]})
	if d := p.Decide(call(alice(), "s", "t", string(small))); !d.Allowed {
		t.Errorf("quadratic rule over 10 elements: %+v", d)
	}
}

func TestBadRegexFoundAtLoad(t *testing.T) {
	_, err := Compile([]Rule{{Name: "re", Effect: Allow, When: `tool.matches("read_[")`, Path: "policy.rules[0].when"}})
	if err == nil || !strings.Contains(err.Error(), "policy.rules[0].when: ") {
		t.Fatalf("a bad regular expression compiled: %v", err)
	}
	p := mustCompile(t, allow("re", `tool.matches("^read_[a-z]+$")`))
	if !p.Decide(call(alice(), "s", "read_file", "")).Allowed || p.Decide(call(alice(), "s", "read_File", "")).Allowed {
		t.Error("regular expression")
	}
}

// TestDecideAllocations: the identity's part is built once per identity
// and the variables need no map per request.
func TestDecideAllocations(t *testing.T) {
	p := mustCompile(t, rules20()...)
	req := &Request{Identity: alice(), Server: "fs", Method: "tools/call", Tool: "read_file"}
	if d := p.Decide(req); !d.Allowed {
		t.Fatalf("%+v", d)
	}
	if n := testing.AllocsPerRun(200, func() { p.Decide(req) }); n > 6 {
		t.Errorf("%v allocations for a decision without arguments", n)
	}
}

// Kept list answers are keyed by what the rules read of the identity:
// a person's next token (another exp and jti) and a colleague the rules
// cannot tell apart share them; anyone the rules can tell apart does not.
func TestKeyIsWhatTheRulesRead(t *testing.T) {
	tok := func(sub, team, jti string, groups ...string) *identity.Identity {
		return (&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: sub, ClientID: "c", Groups: groups,
			Claims: map[string]any{"team": team, "jti": jti, "exp": float64(len(jti))}}).Finish()
	}
	p := mustCompile(t, allow("a", `"ops" in identity.groups`), deny("d", `has(identity.claims.team) && identity.claims.team == "x"`))
	alice1, alice2 := tok("alice", "a", "j1", "ops"), tok("alice", "a", "j22", "ops")
	bob := tok("bob", "a", "j3", "ops")
	if p.Key(alice1) == "" || p.Key(alice1) != p.Key(alice2) || p.Key(alice1) != p.Key(bob) {
		t.Error("identities alike to the rules have different keys")
	}
	for _, other := range []*identity.Identity{tok("alice", "x", "j1", "ops"), tok("alice", "a", "j1"), nil} {
		if p.Key(other) == p.Key(alice1) {
			t.Errorf("%v has alice's key though the rules tell them apart", other)
		}
	}
	for _, when := range []string{`identity.sub == "bob"`, `identity["sub"] == "bob"`, `size(identity) > 0`, `"jti" in identity.claims`, `identity.claims.exists(k, identity.claims[k] == "j1")`, `.identity.sub == "bob"`} {
		p := mustCompile(t, allow("a", when))
		if p.Key(alice1) == p.Key(bob) {
			t.Errorf("%s: alice and bob have one key", when)
		}
	}
	if p := mustCompile(t, allow("a", `identity["claims"]["team"] == "a"`)); p.Key(alice1) != p.Key(bob) {
		t.Error(`identity["claims"]["team"]: alice and bob have different keys`)
	}
}
