package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Effect is what a matching rule does.
type Effect string

const (
	Allow Effect = "allow"
	Deny  Effect = "deny"
)

// Rule is one rule as configured.
type Rule struct {
	Name   string
	Effect Effect
	// When is the rule's condition, a CEL expression of type bool.
	When string
	// Path is where the condition is in the configuration (for example
	// "policy.rules[2].when"); errors name it.
	Path string
}

// Request is what a decision is about.
type Request struct {
	Identity *identity.Identity
	Server   string
	Method   string
	// Tool, Prompt and Resource name what is called, got or read; ""
	// when the request is not of that kind.
	Tool, Prompt, Resource string
	// Arguments are the tool call's or prompt's arguments from the
	// request body (params.arguments); nil when there are none. They are
	// decoded only when a rule that could apply reads them.
	Arguments json.RawMessage
}

// Decision is the outcome of Decide.
type Decision struct {
	Allowed bool
	// Rule is the deciding rule's name, or "default".
	Rule string
	// Reason explains the decision, for the audit (not for the client).
	Reason string
}

// MaxArgumentBytes is the largest arguments object a rule reads; larger
// arguments make every rule that reads them fail (closed).
const MaxArgumentBytes = 1 << 20

// MaxCost bounds the evaluation of a rule with a comprehension (all,
// exists, exists_one, map, filter), in CEL's cost units (about one per
// step, and per element a comprehension or a string function visits): a
// rule over large arguments that would cost more fails (closed) instead
// of holding the request. Rules without a comprehension cost at most
// linear time in the (bounded) arguments.
const MaxCost = 100_000

// Bounds of the per-policy caches (variables for tests).
var (
	maxSubjects = 4096
	maxVisible  = 1 << 16
)

type rule struct {
	name     string
	deny     bool
	prg      cel.Program // full evaluation
	part     cel.Program // partial evaluation; nil when no variable it reads can be unknown
	args     bool        // reads arguments
	resource bool        // reads resource
	names    bool        // reads tool, prompt or resource
	method   bool        // reads method
	// Literal conjuncts found at the top of the condition: when set, the
	// rule is false unless server (tool) equals it.
	server, tool       string
	hasServer, hasTool bool
	// Other literal conjuncts on a name: the rule is false unless each
	// holds (tool.startsWith("get_"), resource == "mem:x", …).
	preds []namePred
}

// namePred is a conjunct `v.op(lit)` or `v == lit` on one of the names.
type namePred struct {
	v, op, lit string
}

// excluded reports whether one of r's literal conjuncts is false for the
// names given: the rule is then false, whatever else it reads. An
// unknown resource (a template's) decides nothing. As with the index, a
// rule so excluded is not evaluated at all: one whose other conjuncts
// would have failed (a cost limit met) does not fail, closed.
func (r *rule) excluded(server, tool, prompt, resource string, resourceKnown bool) bool {
	for _, p := range r.preds {
		var s string
		switch p.v {
		case "server":
			s = server
		case "tool":
			s = tool
		case "prompt":
			s = prompt
		case "resource":
			if !resourceKnown {
				continue
			}
			s = resource
		}
		var ok bool
		switch p.op {
		case operators.Equals:
			ok = s == p.lit
		case overloads.StartsWith:
			ok = strings.HasPrefix(s, p.lit)
		case overloads.EndsWith:
			ok = strings.HasSuffix(s, p.lit)
		case overloads.Contains:
			ok = strings.Contains(s, p.lit)
		}
		if !ok {
			return true
		}
	}
	return false
}

// Policy is a compiled rule set. A nil *Policy, like an empty one, allows
// everything. It is safe for concurrent use.
type Policy struct {
	rules    []*rule
	hasAllow bool
	reads    *reads // what the rules read of the identity
	adapter  types.Adapter
	// byServer holds, per server some rule names literally, the indexes of
	// the rules that can apply to it (denies first, in order); anyServer
	// those for every other server.
	byServer  map[string][]int
	anyServer []int

	mu       sync.Mutex
	subjects map[*identity.Identity]*Subject

	vmu     sync.RWMutex
	visible map[visKey]bool
	bases   map[baseKey]base
}

var env *cel.Env

func init() {
	var err error
	env, err = cel.NewEnv(
		cel.Variable("identity", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("server", cel.StringType),
		cel.Variable("method", cel.StringType),
		cel.Variable("tool", cel.StringType),
		cel.Variable("prompt", cel.StringType),
		cel.Variable("resource", cel.StringType),
		cel.Variable("arguments", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		panic("policy: CEL environment: " + err.Error())
	}
}

// Compile compiles and type-checks rules. The error names every bad
// rule's Path with CEL's message.
func Compile(rules []Rule) (*Policy, error) {
	p := &Policy{adapter: env.CELTypeAdapter(), reads: newReads()}
	var errs []error
	for i, r := range rules {
		path := r.Path
		if path == "" {
			path = fmt.Sprintf("rules[%d].when", i)
		}
		cr, err := compileRule(r, p.reads)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		if cr.name == "" {
			cr.name = path
		}
		p.rules = append(p.rules, cr)
		if !cr.deny {
			p.hasAllow = true
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.index()
	p.subjects = make(map[*identity.Identity]*Subject)
	p.visible = make(map[visKey]bool)
	p.bases = make(map[baseKey]base)
	return p, nil
}

// compileRule compiles r, adding what it reads of the identity to ids.
func compileRule(r Rule, ids *reads) (*rule, error) {
	cr := &rule{name: r.Name}
	switch r.Effect {
	case Allow:
	case Deny:
		cr.deny = true
	default:
		return nil, fmt.Errorf("effect %q is neither %q nor %q", r.Effect, Allow, Deny)
	}
	if r.When == "" {
		return nil, errors.New("empty condition")
	}
	checked, iss := env.Compile(r.When)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if !checked.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("the condition's value is %s, not bool", checked.OutputType())
	}
	native := checked.NativeRep()
	if err := noShadowing(native.Expr()); err != nil {
		return nil, err
	}
	// Only a comprehension (all, exists, map, filter, …) can cost more
	// than linearly in the arguments' size; tracking the cost of other
	// rules would double a decision's cost for nothing.
	var opts []cel.ProgramOption
	comprehension := false
	ast.PostOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		comprehension = comprehension || e.Kind() == ast.ComprehensionKind
	}))
	if comprehension {
		opts = append(opts, cel.CostLimit(MaxCost))
	}
	// OptOptimize compiles constant regular expressions once, at load.
	prg, err := env.Program(checked, append(opts, cel.EvalOptions(cel.OptOptimize))...)
	if err != nil {
		return nil, err
	}
	cr.prg = prg
	ids.add(native.Expr())
	refs := native.ReferenceMap()
	// What the rule reads, by its references and, besides, every
	// identifier in it (the checker names .tool as tool; a macro's
	// variable may not take a variable's name: noShadowing).
	mark := func(name string) {
		switch name {
		case "arguments":
			cr.args = true
		case "resource":
			cr.resource, cr.names = true, true
		case "tool", "prompt":
			cr.names = true
		case "method":
			cr.method = true
		}
	}
	for _, ri := range refs {
		mark(ri.Name)
	}
	ast.PostOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() == ast.IdentKind {
			mark(e.AsIdent())
		}
	}))
	if cr.args || cr.names || cr.method {
		if cr.part, err = env.Program(checked, append(opts, cel.EvalOptions(cel.OptPartialEval))...); err != nil {
			return nil, err
		}
	}
	conjuncts(native.Expr(), func(e ast.Expr) {
		if v, op, lit, ok := nameCall(e, refs); ok {
			cr.preds = append(cr.preds, namePred{v, op, lit})
			return
		}
		name, lit, ok := literalEquality(e, refs)
		switch {
		case !ok:
		case name == "server" && !cr.hasServer:
			cr.server, cr.hasServer = lit, true
		case name == "tool" && !cr.hasTool:
			cr.tool, cr.hasTool = lit, true
		case name == "prompt" || name == "resource":
			cr.preds = append(cr.preds, namePred{name, operators.Equals, lit})
		}
	})
	return cr, nil
}

// ruleVariables are the variables a rule reads.
var ruleVariables = map[string]bool{"identity": true, "server": true, "method": true, "tool": true, "prompt": true, "resource": true, "arguments": true}

// noShadowing refuses a macro's variable named as one of the rule's
// (arguments.all(arguments, …)): what such a rule reads of the request
// is not what it seems to read, to its reader or to list filtering.
func noShadowing(e ast.Expr) error {
	var err error
	ast.PostOrderVisit(e, ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.ComprehensionKind || err != nil {
			return
		}
		c := e.AsComprehension()
		for _, v := range []string{c.IterVar(), c.IterVar2()} {
			if ruleVariables[v] {
				err = fmt.Errorf("the macro's variable %q hides the rule's variable of that name: name it otherwise", v)
			}
		}
	}))
	return err
}

// conjuncts calls f with each operand of the top-level && chain of e (e
// itself when it is not a conjunction). Since false && x is false in CEL
// whatever x is (an error or unknown included), a conjunct that is false
// makes the whole condition false.
func conjuncts(e ast.Expr, f func(ast.Expr)) {
	if e.Kind() == ast.CallKind {
		c := e.AsCall()
		if c.FunctionName() == operators.LogicalAnd && !c.IsMemberFunction() && len(c.Args()) == 2 {
			conjuncts(c.Args()[0], f)
			conjuncts(c.Args()[1], f)
			return
		}
	}
	f(e)
}

// literalEquality recognises `v == "lit"` and `"lit" == v` where v is one
// of the declared variables.
func literalEquality(e ast.Expr, refs map[int64]*ast.ReferenceInfo) (name, lit string, ok bool) {
	if e.Kind() != ast.CallKind {
		return "", "", false
	}
	c := e.AsCall()
	if c.FunctionName() != operators.Equals || c.IsMemberFunction() || len(c.Args()) != 2 {
		return "", "", false
	}
	a, b := c.Args()[0], c.Args()[1]
	if a.Kind() == ast.LiteralKind {
		a, b = b, a
	}
	if a.Kind() != ast.IdentKind || b.Kind() != ast.LiteralKind {
		return "", "", false
	}
	ri, found := refs[a.ID()]
	if !found || ri.Name != a.AsIdent() {
		return "", "", false
	}
	s, isStr := b.AsLiteral().(types.String)
	if !isStr {
		return "", "", false
	}
	return ri.Name, string(s), true
}

// nameCall recognises `v.startsWith("lit")`, `v.endsWith("lit")` and
// `v.contains("lit")` where v is server, tool, prompt or resource.
func nameCall(e ast.Expr, refs map[int64]*ast.ReferenceInfo) (v, op, lit string, ok bool) {
	if e.Kind() != ast.CallKind {
		return "", "", "", false
	}
	c := e.AsCall()
	op = c.FunctionName()
	if (op != overloads.StartsWith && op != overloads.EndsWith && op != overloads.Contains) ||
		!c.IsMemberFunction() || len(c.Args()) != 1 || c.Target().Kind() != ast.IdentKind || c.Args()[0].Kind() != ast.LiteralKind {
		return "", "", "", false
	}
	t := c.Target()
	ri, found := refs[t.ID()]
	if !found || ri.Name != t.AsIdent() {
		return "", "", "", false
	}
	s, isStr := c.Args()[0].AsLiteral().(types.String)
	switch {
	case !isStr:
		return "", "", "", false
	case ri.Name == "server", ri.Name == "tool", ri.Name == "prompt", ri.Name == "resource":
		return ri.Name, op, string(s), true
	}
	return "", "", "", false
}

// index builds the per-server candidate lists.
func (p *Policy) index() {
	servers := map[string]bool{}
	for _, r := range p.rules {
		if r.hasServer {
			servers[r.server] = true
		}
	}
	list := func(match func(*rule) bool) []int {
		var out []int
		for _, deny := range []bool{true, false} {
			for i, r := range p.rules {
				if r.deny == deny && match(r) {
					out = append(out, i)
				}
			}
		}
		return out
	}
	p.anyServer = list(func(r *rule) bool { return !r.hasServer })
	p.byServer = make(map[string][]int, len(servers))
	for s := range servers {
		p.byServer[s] = list(func(r *rule) bool { return !r.hasServer || r.server == s })
	}
}

func (p *Policy) candidates(server string) []int {
	if c, ok := p.byServer[server]; ok {
		return c
	}
	return p.anyServer
}

// Empty reports whether p has no rules (and so allows everything).
func (p *Policy) Empty() bool { return p == nil || len(p.rules) == 0 }

type outcome int

const (
	isFalse outcome = iota
	isTrue
	isUnknown
	isError
)

func result(out ref.Val, err error) (outcome, error) {
	switch {
	case out != nil && types.IsUnknown(out):
		return isUnknown, nil
	case err != nil:
		return isError, err
	case out == types.True:
		return isTrue, nil
	case out == types.False:
		return isFalse, nil
	}
	return isError, fmt.Errorf("condition's value is %v, not bool", out)
}

// Decide decides req by deny overrides (see the package documentation).
func (p *Policy) Decide(req *Request) Decision {
	if p.Empty() {
		return Decision{Allowed: true, Rule: "default", Reason: "no policy"}
	}
	if req == nil {
		req = &Request{}
	}
	return p.decide(req, true)
}

// decide evaluates the rules; indexed false evaluates every rule, for
// tests of the index's equivalence.
func (p *Policy) decide(req *Request, indexed bool) Decision {
	act := &activation{
		identity: p.Subject(req.Identity).val,
		server:   types.String(req.Server),
		method:   types.String(req.Method),
		tool:     types.String(req.Tool),
		prompt:   types.String(req.Prompt),
		resource: types.String(req.Resource),
	}
	cands := p.candidates(req.Server)
	if !indexed {
		cands = p.all()
	}
	var failed string
	for _, i := range cands {
		r := p.rules[i]
		if indexed && (r.hasTool && r.tool != req.Tool || r.excluded(req.Server, req.Tool, req.Prompt, req.Resource, true)) {
			continue
		}
		if r.args && act.arguments == nil {
			// Bad arguments are an error value: a rule reading them
			// fails, unless CEL's && or || decides without them.
			var err error
			if act.arguments, err = p.arguments(req.Arguments); err != nil {
				act.arguments = types.NewErr("%s", err.Error())
			}
		}
		o, err := result(eval(r.prg, act))
		switch {
		case r.deny && o == isTrue:
			return Decision{Rule: r.name, Reason: "denied by rule " + r.name}
		case r.deny && o == isError:
			return Decision{Rule: r.name, Reason: "rule " + r.name + " failed: " + err.Error()}
		case !r.deny && o == isTrue:
			return Decision{Allowed: true, Rule: r.name, Reason: "allowed by rule " + r.name}
		case !r.deny && o == isError && failed == "":
			failed = "; rule " + r.name + " failed: " + err.Error()
		}
	}
	if !p.hasAllow {
		return Decision{Allowed: true, Rule: "default", Reason: "no deny rule matched"}
	}
	return Decision{Rule: "default", Reason: "no allow rule matched" + failed}
}

// all is every rule, denies first.
func (p *Policy) all() []int {
	var out []int
	for _, deny := range []bool{true, false} {
		for i, r := range p.rules {
			if r.deny == deny {
				out = append(out, i)
			}
		}
	}
	return out
}

func eval(prg cel.Program, act any) (out ref.Val, err error) {
	defer func() {
		// cel-go does not panic on evaluation by design; should it, the
		// rule fails (closed) rather than the request's goroutine.
		if v := recover(); v != nil {
			out, err = nil, fmt.Errorf("evaluation panicked: %v", v)
		}
	}()
	out, _, err = prg.Eval(act)
	return out, err
}

// arguments decodes a request's arguments: {} when absent or null; an
// error when they are not a JSON object or are too large.
func (p *Policy) arguments(raw json.RawMessage) (ref.Val, error) {
	if len(raw) > MaxArgumentBytes {
		return nil, fmt.Errorf("arguments are larger than %d bytes", MaxArgumentBytes)
	}
	raw = trimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return emptyArgs, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("arguments are not a JSON object")
	}
	m, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	return types.NewStringInterfaceMap(p.adapter, m), nil
}

var emptyArgs = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{})

func trimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
