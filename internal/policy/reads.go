package policy

import (
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// reads is what a policy's rules can read of the identity: fields of it
// by name (sub, groups, …), claims by name, or all claims, or all of it.
// Two identities that agree on what the rules read get the same answers,
// so list answers are kept by it (Subject.cacheKey): a person's next
// token, with a new exp and jti, finds the answers of the last; people
// alike to the rules share them.
type reads struct {
	all, allClaims bool
	fields, claims map[string]bool
}

func newReads() *reads { return &reads{fields: map[string]bool{}, claims: map[string]bool{}} }

// add records what e reads of the identity. A use of the identity that
// is not a path of field names from it (identity passed whole, iterated,
// compared) reads all of it; of its claims, all claims.
func (r *reads) add(e ast.Expr) {
	if path, ok := identityPath(e); ok {
		switch {
		case len(path) == 0:
			r.all = true
		case path[0] == "claims" && len(path) == 1:
			r.allClaims = true
		case path[0] == "claims":
			r.claims[path[1]] = true
		default:
			r.fields[path[0]] = true
		}
		return
	}
	switch e.Kind() {
	case ast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			r.add(c.Target())
		}
		for _, a := range c.Args() {
			r.add(a)
		}
	case ast.SelectKind:
		r.add(e.AsSelect().Operand())
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			r.add(el)
		}
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			r.add(me.Key())
			r.add(me.Value())
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			r.add(f.AsStructField().Value())
		}
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		for _, x := range []ast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			r.add(x)
		}
	}
}

// identityPath is the names e selects from the identity variable, as in
// identity.claims.team or identity["groups"] (empty for the variable
// itself); false when e is not such a path.
func identityPath(e ast.Expr) ([]string, bool) {
	switch e.Kind() {
	case ast.IdentKind:
		// The checker names .identity as identity, and no macro's
		// variable may be named so (noShadowing).
		return []string{}, e.AsIdent() == "identity"
	case ast.SelectKind:
		s := e.AsSelect()
		if p, ok := identityPath(s.Operand()); ok {
			return append(p, s.FieldName()), true
		}
	case ast.CallKind:
		c := e.AsCall()
		if c.FunctionName() == operators.Index && !c.IsMemberFunction() && len(c.Args()) == 2 && c.Args()[1].Kind() == ast.LiteralKind {
			if name, ok := c.Args()[1].AsLiteral().(types.String); ok {
				if p, ok := identityPath(c.Args()[0]); ok {
					return append(p, string(name)), true
				}
			}
		}
	}
	return nil, false
}

// project is the part of f the rules read, to be encoded as a key.
func (r *reads) project(f *subjectFields) any {
	if r == nil || r.all {
		return f
	}
	out := map[string]any{}
	for name := range r.fields {
		switch name {
		case "sub":
			out[name] = f.Sub
		case "iss":
			out[name] = f.Iss
		case "client":
			out[name] = f.Client
		case "kind":
			out[name] = f.Kind
		case "groups":
			out[name] = f.Groups
		case "scopes":
			out[name] = f.Scopes
		default:
			out[name] = nil // no such field: the same for everyone
		}
	}
	switch {
	case r.allClaims:
		out["claims"] = f.Claims
	case len(r.claims) > 0:
		claims := map[string]any{}
		for name := range r.claims {
			if v, ok := f.Claims[name]; ok {
				claims[name] = v
			}
		}
		out["claims"] = claims
	}
	return out
}
