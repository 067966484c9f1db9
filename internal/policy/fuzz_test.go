package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// A small grammar of conditions: atoms combined by &&, || and !.
var atoms = []string{
	`true`, `false`,
	`server == "s0"`, `server == "s1"`, `"s1" == server`,
	`tool == "t0"`, `tool == "t1"`, `tool == "t2"`, `tool.startsWith("t")`,
	`method == "tools/call"`, `method == "resources/read"`, `prompt == ""`, `prompt == "t1"`,
	`resource.startsWith("file:")`, `resource == "file:t0"`,
	`"ops" in identity.groups`, `identity.sub == "alice"`, `identity.client == "c1"`,
	`identity.claims.team == "a"`, `identity.claims.missing == 1`,
	`has(arguments.x)`, `arguments.x == 1`, `arguments.x > 0`, `arguments.y.startsWith("a")`,
	`size(arguments) > 1`, `arguments.all(k, k != "z")`,
	// What they read of the identity decides what list answers are kept
	// by: whole claims, an index, a has().
	`"jti" in identity.claims`, `identity["sub"] == "bob"`, `identity.claims.exists(k, k == "jti")`,
	`has(identity.claims.jti)`, `identity["claims"]["team"] == "b"`,
	// Literal conjuncts the rules are filtered by before evaluation.
	`tool.endsWith("1")`, `server.contains("1")`, `resource.startsWith("mem:")`, `prompt.startsWith("t")`,
	// Variables named from the root, with a leading dot.
	`.identity.sub == "alice"`, `.tool == "t1"`, `has(.arguments.x)`, `.identity["claims"].team == "a"`,
}

type source struct{ b []byte }

func (s *source) next(n int) int {
	if len(s.b) == 0 {
		return 0
	}
	v := int(s.b[0])
	s.b = s.b[1:]
	return v % n
}

func (s *source) cond(depth int) string {
	if depth > 2 {
		return atoms[s.next(len(atoms))]
	}
	switch s.next(6) {
	case 0:
		return s.cond(depth+1) + " && " + s.cond(depth+1)
	case 1:
		return "(" + s.cond(depth+1) + " || " + s.cond(depth+1) + ")"
	case 2:
		return "!(" + s.cond(depth+1) + ")"
	default:
		return atoms[s.next(len(atoms))]
	}
}

func (s *source) rules() []Rule {
	n := 1 + s.next(6)
	rules := make([]Rule, n)
	for i := range rules {
		e := Allow
		if s.next(3) == 0 {
			e = Deny
		}
		rules[i] = Rule{Name: fmt.Sprintf("r%d", i), Effect: e, When: s.cond(0)}
	}
	return rules
}

var fuzzIDs = []*identity.Identity{
	nil,
	(&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: "alice", ClientID: "c1", Groups: []string{"ops"}, Claims: map[string]any{"team": "a"}}).Finish(),
	(&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: "bob", ClientID: "c2", Claims: map[string]any{"team": "b"}}).Finish(),
	identity.LocalUser(1000, "carol"),
	// alice's next token; bob's double but for the subject: alike to
	// rules that do not read what differs.
	(&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: "alice", ClientID: "c1", Groups: []string{"ops"}, Claims: map[string]any{"team": "a", "jti": "x2"}}).Finish(),
	(&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: "dave", ClientID: "c2", Claims: map[string]any{"team": "b"}}).Finish(),
}

// reference decides by the combining rule, evaluating every rule on its
// own with cel-go's ordinary activation.
func reference(p *Policy, req *Request) (allowed bool) {
	sub := newSubject(req.Identity)
	vars := map[string]any{"identity": sub.val, "server": req.Server, "method": req.Method,
		"tool": req.Tool, "prompt": req.Prompt, "resource": req.Resource}
	vars["arguments"] = types.NewErr("bad arguments")
	raw := strings.TrimSpace(string(req.Arguments))
	switch {
	case len(req.Arguments) > MaxArgumentBytes:
	case raw == "" || raw == "null":
		vars["arguments"] = map[string]any{}
	case raw[0] == '{':
		var m map[string]any
		if json.Unmarshal([]byte(raw), &m) == nil {
			vars["arguments"] = m
		}
	}
	act, _ := cel.NewActivation(vars)
	someAllow, anyAllow := false, false
	for _, r := range p.rules {
		out, _, err := r.prg.Eval(act)
		o, _ := result(out, err)
		if r.deny && (o == isTrue || o == isError) {
			return false
		}
		if !r.deny {
			anyAllow = true
			someAllow = someAllow || o == isTrue
		}
	}
	return !anyAllow || someAllow
}

func checkProperties(t *testing.T, data []byte, args []byte) {
	s := &source{b: data}
	rules := s.rules()
	p, err := Compile(rules)
	if err != nil {
		t.Fatalf("grammar made a bad rule: %v", err)
	}
	req := &Request{Identity: fuzzIDs[s.next(len(fuzzIDs))], Server: fmt.Sprintf("s%d", s.next(3)), Arguments: args}
	name := fmt.Sprintf("t%d", s.next(4))
	kind := []string{KindTool, KindPrompt, KindResource}[s.next(3)]
	switch kind {
	case KindTool:
		req.Method, req.Tool = "tools/call", name
	case KindPrompt:
		req.Method, req.Prompt = "prompts/get", name
	case KindResource:
		req.Method, req.Resource, req.Arguments = "resources/read", []string{"file:", "mem:"}[s.next(2)]+name, nil
		name = req.Resource
	}
	d := p.Decide(req)
	if strings.Contains(d.Reason, "panicked") {
		t.Fatalf("evaluation panicked: %s", d.Reason)
	}
	if want := reference(p, req); d.Allowed != want {
		t.Fatalf("rules %q, request %+v: Decide %+v, deny overrides says %v", rules, req, d, want)
	}
	if u := p.decide(req, false); u != d {
		t.Fatalf("rules %q: indexed %+v, unindexed %+v", rules, d, u)
	}
	if d.Allowed && !p.MayUse(req.Identity, req.Server) {
		t.Fatalf("rules %q: %s may %s on %s, but may use nothing of it", rules, req.Identity.Name(), req.Method, req.Server)
	}
	// What is kept of other items of the server never changes this
	// item's answer.
	fresh, _ := Compile(rules)
	for _, other := range []string{"t0", "t1", "t2", "t3", "file:t1", "mem:t0"} {
		p.Visible(req.Identity, req.Server, kind, other)
	}
	if got, want := p.Visible(req.Identity, req.Server, kind, name), fresh.Visible(req.Identity, req.Server, kind, name); got != want {
		t.Fatalf("rules %q: %s %s/%s is %v after other items, %v alone", rules, kind, req.Server, name, got, want)
	}
	// A Viewer, asked of several servers' items in turn (its memo of the
	// last server's base), answers as Visible does.
	v := p.Viewer(req.Identity)
	for _, server := range []string{"s0", "s0", "s1", "s2", "s1", req.Server} {
		for _, k := range []string{KindTool, KindPrompt, kind} {
			if got, want := v.Visible(server, k, name), p.Visible(req.Identity, server, k, name); got != want {
				t.Fatalf("rules %q: the Viewer says %v of %s %s/%s, Visible %v", rules, got, k, server, name, want)
			}
		}
	}
	// Identities with the same key get one another's kept answers: they
	// must be their own.
	for _, other := range fuzzIDs {
		if other == req.Identity || p.Key(other) != p.Key(req.Identity) {
			continue
		}
		p.Visible(req.Identity, req.Server, kind, name) // kept
		fresh, _ := Compile(rules)
		if got, want := p.Visible(other, req.Server, kind, name), fresh.Visible(other, req.Server, kind, name); got != want {
			t.Fatalf("rules %q: %s's kept answer for %s/%s (%v) given to %s, whose own is %v", rules, req.Identity.Name(), req.Server, name, got, other.Name(), want)
		}
		o := *req
		o.Identity = other
		if p.Decide(&o).Allowed != d.Allowed {
			t.Fatalf("rules %q: %s and %s have one key but differ in %+v", rules, req.Identity.Name(), other.Name(), req)
		}
	}
	if d.Allowed && !p.Visible(req.Identity, req.Server, kind, name) {
		t.Fatalf("rules %q: %s may %s %s/%s with %s but it is not listed", rules, req.Identity.Name(), req.Method, req.Server, name, args)
	}
	if d.Allowed && kind == KindResource && !p.Visible(req.Identity, req.Server, KindTemplate, "file:{x}") {
		t.Fatalf("rules %q: %s may read %s/%s but templates are not listed", rules, req.Identity.Name(), req.Server, name)
	}
}

var fuzzArgs = []string{``, `null`, `{}`, `{"x":1}`, `{"x":0,"y":"abc"}`, `{"x":"1"}`, `{"y":"b","z":1}`, `[1]`, `{"x":`, `"s"`, `{"x":1e400}`}

func FuzzDecide(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		data := make([]byte, 24)
		for j := range data {
			data[j] = byte(r.IntN(256))
		}
		f.Add(data, []byte(fuzzArgs[i%len(fuzzArgs)]))
	}
	f.Fuzz(func(t *testing.T, data, args []byte) { checkProperties(t, data, args) })
}

// TestProperties runs the fuzz properties on many more random rule sets
// than the seed corpus, every time.
func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	n := 800 // about a second under -race
	if testing.Short() {
		n = 200
	}
	for i := 0; i < n; i++ {
		data := make([]byte, 32)
		for j := range data {
			data[j] = byte(r.IntN(256))
		}
		checkProperties(t, data, []byte(fuzzArgs[r.IntN(len(fuzzArgs))]))
	}
}

// Conjuncts on a name with a literal (startsWith, endsWith, contains,
// and == on a prompt or resource) are found, so that a rule they make
// false is not evaluated; others are not taken for them.
func TestNameConjuncts(t *testing.T) {
	p := mustCompile(t,
		deny("a", `tool.startsWith("admin_") && !("admin" in identity.groups)`),
		deny("b", `method == "tools/call" && tool.endsWith("_dangerous") && server.contains("prod")`),
		allow("c", `prompt == "p" && resource.startsWith("mem:")`),
		allow("d", `tool.startsWith("x") || tool.endsWith("y")`),
		allow("e", `tool.startsWith(identity.sub)`),
		allow("f", `!tool.startsWith("x")`),
	)
	want := [][]namePred{
		{{"tool", "startsWith", "admin_"}},
		{{"tool", "endsWith", "_dangerous"}, {"server", "contains", "prod"}},
		{{"prompt", "_==_", "p"}, {"resource", "startsWith", "mem:"}},
		nil, nil, nil,
	}
	for i, r := range p.rules {
		if !slices.Equal(r.preds, want[i]) {
			t.Errorf("rule %s: conjuncts %v, want %v", r.name, r.preds, want[i])
		}
	}
	if !p.rules[0].excluded("s", "get_x", "", "", true) || p.rules[0].excluded("s", "admin_x", "", "", true) {
		t.Error("rule a: excluded wrongly")
	}
	if p.rules[2].excluded("s", "", "p", "file:x", false) || !p.rules[2].excluded("s", "", "p", "file:x", true) {
		t.Error("rule c: an unknown resource must decide nothing, a known one must")
	}
}

// TestIndexFindsLiterals: the index is what makes the other servers'
// rules free; it must see the literal conjuncts.
func TestIndexFindsLiterals(t *testing.T) {
	p := mustCompile(t,
		allow("a", `server == "s1" && tool == "t1" && arguments.x == 1`),
		allow("b", `"ops" in identity.groups && ("s2" == server && tool == "t2")`),
		allow("c", `server == "s3" || tool == "t3"`),
		allow("d", `!(server == "s4")`),
	)
	want := []struct{ server, tool string }{{"s1", "t1"}, {"s2", "t2"}, {"", ""}, {"", ""}}
	for i, r := range p.rules {
		if r.server != want[i].server || r.tool != want[i].tool || r.hasServer != (want[i].server != "") {
			t.Errorf("rule %s indexed by %q/%q, want %q/%q", r.name, r.server, r.tool, want[i].server, want[i].tool)
		}
	}
	if c := p.candidates("s9"); len(c) != 2 {
		t.Errorf("candidates for a server no rule names: %v", c)
	}
}
