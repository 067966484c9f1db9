package policy

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// loop runs f b.N times and reports the thread's CPU time per run
// (cpu-ns/op), which a loaded machine does not inflate as it does ns/op.
func loop(b *testing.B, f func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	start := threadCPU()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	cpu := float64(threadCPU()-start) / float64(n)
	if start != 0 {
		b.ReportMetric(cpu, "cpu-ns/op")
	}
	return cpu
}

// rules20 is a typical policy: most rules name a server and tool, a few
// apply everywhere, some read arguments.
func rules20() []Rule {
	var rules []Rule
	for i := 0; i < 14; i++ {
		rules = append(rules, allow(fmt.Sprintf("svc%d", i),
			fmt.Sprintf(`server == "s%d" && tool == "t%d" && "ops" in identity.groups`, i, i)))
	}
	rules = append(rules,
		deny("no-drop", `tool == "drop_db"`),
		deny("no-force", `server == "github" && tool == "push" && has(arguments.force) && arguments.force == true`),
		deny("team", `server == "github" && has(arguments.repo) && !arguments.repo.startsWith(identity.claims.team + "/")`),
		deny("admin", `tool.startsWith("admin_") && !("admin" in identity.groups)`),
		allow("ops", `"ops" in identity.groups && identity.client == "cli-1"`),
		allow("read", `tool.startsWith("read_")`),
	)
	return rules
}

func BenchmarkDecide20Rules(b *testing.B) {
	p := mustCompile(b, rules20()...)
	req := &Request{Identity: alice(), Server: "github", Method: "tools/call", Tool: "create_issue",
		Arguments: json.RawMessage(`{"repo":"a/x","title":"hello","body":"some text here"}`)}
	if d := p.Decide(req); !d.Allowed {
		b.Fatalf("%+v", d)
	}
	loop(b, func() { p.Decide(req) })
}

func BenchmarkDecide20RulesNoArguments(b *testing.B) {
	p := mustCompile(b, rules20()...)
	req := &Request{Identity: alice(), Server: "fs", Method: "tools/call", Tool: "read_file"}
	loop(b, func() { p.Decide(req) })
}

func BenchmarkDecideNoPolicy(b *testing.B) {
	var p *Policy
	req := &Request{Identity: alice(), Server: "github", Method: "tools/call", Tool: "create_issue",
		Arguments: json.RawMessage(`{"repo":"a/x"}`)}
	loop(b, func() { p.Decide(req) })
}

// filterSetup is 100 servers × 20 tools and 50 rules.
func filterSetup(b *testing.B) (*Policy, [][2]string, []toolDef) {
	var rules []Rule
	for i := 0; i < 30; i++ {
		rules = append(rules, allow(fmt.Sprintf("a%d", i),
			fmt.Sprintf(`server == "server%d" && tool == "tool%d" && "dev" in identity.groups`, i*3, i%20)))
	}
	for i := 0; i < 10; i++ {
		rules = append(rules, deny(fmt.Sprintf("d%d", i),
			fmt.Sprintf(`server == "server%d" && has(arguments.path) && arguments.path.startsWith("/etc")`, i*7)))
	}
	rules = append(rules,
		deny("g1", `tool == "drop_db"`),
		deny("g2", `tool.startsWith("admin_") && !("admin" in identity.groups)`),
		deny("g3", `identity.kind == ""`),
		deny("g4", `has(arguments.force) && arguments.force == true`),
		deny("g5", `method == "tools/call" && tool.endsWith("_dangerous")`),
		allow("g6", `"ops" in identity.groups && identity.client == "cli-1"`),
		allow("g7", `tool.startsWith("read_")`),
		allow("g8", `identity.claims.team == "a" && server.startsWith("team-a-")`),
		allow("g9", `"sre" in identity.groups && has(arguments.ticket)`),
		allow("g10", `identity.sub == "root"`),
	)
	if len(rules) != 50 {
		b.Fatalf("%d rules", len(rules))
	}
	p := mustCompile(b, rules...)
	var names [][2]string
	var defs []toolDef
	for s := 0; s < 100; s++ {
		for t := 0; t < 20; t++ {
			server, tool := fmt.Sprintf("server%d", s), fmt.Sprintf("tool%d", t)
			names = append(names, [2]string{server, tool})
			defs = append(defs, toolDef{
				Name:        server + "__" + tool,
				Title:       "Tool " + tool + " of " + server,
				Description: "Does something useful with the repository: reads or writes files, opens issues, runs a query against the team's data and returns the result as text or JSON.",
				InputSchema: map[string]any{
					"type": "object",
					"properties": map[string]any{
						"path":  map[string]any{"type": "string", "description": "Path of the file"},
						"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 1000},
						"force": map[string]any{"type": "boolean"},
					},
					"required": []string{"path"},
				},
			})
		}
	}
	return p, names, defs
}

type toolDef struct {
	Name        string         `json:"name"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

// listCost is the CPU time to encode a 2000-tool tools/list answer.
func listCost(defs []toolDef) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n, start, cpu := 0, time.Now(), threadCPU()
	for time.Since(start) < 300*time.Millisecond {
		if _, err := json.Marshal(map[string]any{"tools": defs}); err != nil {
			panic(err)
		}
		n++
	}
	if cpu == 0 {
		return float64(time.Since(start)) / float64(n)
	}
	return float64(threadCPU()-cpu) / float64(n)
}

func filter(p *Policy, id *identity.Identity, names [][2]string) int {
	n := 0
	for _, st := range names {
		if p.Visible(id, st[0], KindTool, st[1]) {
			n++
		}
	}
	return n
}

// BenchmarkFilter filters a 2000-tool list, with no cached answer (cold)
// and with the identity's answers cached (warm), and reports its CPU
// time as a fraction of the CPU time to encode the list (ratio-of-list).
func BenchmarkFilter(b *testing.B) {
	p, names, defs := filterSetup(b)
	id := (&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: "dana", ClientID: "c",
		Groups: []string{"dev"}, Claims: map[string]any{"team": "b"}}).Finish()
	list := listCost(defs)
	b.Run("cold", func(b *testing.B) {
		cpu := loop(b, func() {
			p.vmu.Lock()
			clear(p.visible)
			clear(p.bases)
			p.vmu.Unlock()
			filter(p, id, names)
		})
		b.ReportMetric(cpu/list, "ratio-of-list")
	})
	b.Run("warm", func(b *testing.B) {
		if n := filter(p, id, names); n == 0 || n == len(names) {
			b.Fatalf("%d of %d visible: the rules filter nothing", n, len(names))
		}
		cpu := loop(b, func() { filter(p, id, names) })
		b.ReportMetric(cpu/list, "ratio-of-list")
	})
	b.Run("list", func(b *testing.B) {
		loop(b, func() { json.Marshal(map[string]any{"tools": defs}) })
	})
}

// BenchmarkVisible is one item's answer, cold and warm.
func BenchmarkVisible(b *testing.B) {
	p := mustCompile(b, rules20()...)
	id := alice()
	b.Run("cold", func(b *testing.B) {
		loop(b, func() {
			p.vmu.Lock()
			clear(p.visible)
			clear(p.bases)
			p.vmu.Unlock()
			p.Visible(id, "github", KindTool, "push")
		})
	})
	b.Run("warm", func(b *testing.B) {
		loop(b, func() { p.Visible(id, "github", KindTool, "push") })
	})
}

// BenchmarkDecide20RulesFreshIdentity is a decision for an identity the
// policy has not seen (the caller made a new *Identity for the request).
func BenchmarkDecide20RulesFreshIdentity(b *testing.B) {
	p := mustCompile(b, rules20()...)
	req := &Request{Server: "github", Method: "tools/call", Tool: "create_issue",
		Arguments: json.RawMessage(`{"repo":"a/x","title":"hello","body":"some text here"}`)}
	loop(b, func() {
		req.Identity = alice()
		p.Decide(req)
	})
}
