package policy

import (
	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Kinds of listed items, for Visible.
const (
	KindTool     = "tool"
	KindPrompt   = "prompt"
	KindResource = "resource"
	KindTemplate = "template"
)

type visKey struct {
	subject, server, kind, name string
}

var (
	unknownRequest = []*interpreter.AttributePattern{cel.AttributePattern("arguments"), cel.AttributePattern("resource"),
		cel.AttributePattern("tool"), cel.AttributePattern("prompt"), cel.AttributePattern("method")}
	unknownArgs        = []*interpreter.AttributePattern{cel.AttributePattern("arguments")}
	unknownArgsAndURIs = []*interpreter.AttributePattern{cel.AttributePattern("arguments"), cel.AttributePattern("resource")}
)

// Visible reports whether an item of server (kind tool, prompt, resource
// or template, named name: the tool's or prompt's name, the resource's
// URI, the template's URI template) is listed to id: whether some call of
// it could be allowed. The rules are evaluated with the arguments unknown
// (and for a template, the resource URI too), as if the item were called
// (tools/call, prompts/get, resources/read); it is hidden when a deny rule
// matches (or fails) whatever the unknowns are, or when there are allow
// rules and every one is false (or fails). An unknown kind is never
// visible. Answers are cached in p per identity, bounded.
func (p *Policy) Visible(id *identity.Identity, server, kind, name string) bool {
	if p.Empty() {
		return listedKind(kind)
	}
	sub := p.Subject(id)
	skey := sub.cacheKey()
	k := visKey{skey, server, kind, name}
	if skey != "" {
		p.vmu.RLock()
		v, ok := p.visible[k]
		p.vmu.RUnlock()
		if ok {
			return v
		}
	}
	v := p.visibleNow(sub, server, kind, name)
	if skey != "" {
		p.vmu.Lock()
		putBounded(p.visible, k, v, maxVisible)
		p.vmu.Unlock()
	}
	return v
}

// listedKind reports whether kind is one Visible knows.
func listedKind(kind string) bool {
	return kind == KindTool || kind == KindPrompt || kind == KindResource || kind == KindTemplate
}

// putBounded sets m[k] to v, dropping some other entry first when m
// already holds max.
func putBounded[K comparable, V any](m map[K]V, k K, v V, max int) {
	if _, ok := m[k]; !ok && len(m) >= max {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

// cachedBase is the base kept for k, else work's, kept (bounded; not
// for an identity that has no key).
func (p *Policy) cachedBase(k baseKey, work func() base) base {
	if k.subject != "" {
		p.vmu.RLock()
		b, ok := p.bases[k]
		p.vmu.RUnlock()
		if ok {
			return b
		}
	}
	b := work()
	if k.subject != "" {
		p.vmu.Lock()
		putBounded(p.bases, k, b, maxVisible)
		p.vmu.Unlock()
	}
	return b
}

// baseKey and base are what the rules that read no name (tool, prompt,
// resource) say of every item of a kind on a server, for an identity.
type baseKey struct {
	subject, server, kind string
}

type base struct {
	hidden    bool // a deny matches or fails whatever the item
	someAllow bool // an allow is true or unknown for every item
}

// A Viewer answers Visible for one identity over a whole list: the
// identity is looked up once, what the rules that read no name say of a
// server's items once per run of that server's items, and no answer is
// kept item by item (the caller keeps the list's: gateway). It is not
// safe for concurrent use; the Policy it came from is.
type Viewer struct {
	p    *Policy
	sub  *Subject
	memo baseMemo
}

type baseMemo struct {
	ok           bool
	server, kind string
	b            base
}

// Viewer returns a Viewer of p for id.
func (p *Policy) Viewer(id *identity.Identity) *Viewer {
	if p.Empty() {
		return &Viewer{}
	}
	return &Viewer{p: p, sub: p.Subject(id)}
}

// Visible is Policy.Visible for the Viewer's identity.
func (v *Viewer) Visible(server, kind, name string) bool {
	if v.p == nil {
		return listedKind(kind)
	}
	return v.p.visibleWith(v.sub, server, kind, name, &v.memo)
}

func (p *Policy) visibleNow(sub *Subject, server, kind, name string) bool {
	return p.visibleWith(sub, server, kind, name, nil)
}

// visibleWith is visibleNow with the base of the last server and kind
// it was asked of kept in memo (nil: none).
func (p *Policy) visibleWith(sub *Subject, server, kind, name string, memo *baseMemo) bool {
	act := &partial{activation: activation{identity: sub.val, server: types.String(server)}, unknown: unknownArgs}
	var tool, prompt, resource string
	unknownURI := false
	switch kind {
	case KindTool:
		tool, act.method = name, types.String("tools/call")
	case KindPrompt:
		prompt, act.method = name, types.String("prompts/get")
	case KindResource:
		resource, act.method = name, types.String("resources/read")
	case KindTemplate:
		act.method, act.unknown, unknownURI = types.String("resources/read"), unknownArgsAndURIs, true
	default:
		return false
	}
	act.tool, act.prompt, act.resource = types.String(tool), types.String(prompt), types.String(resource)
	var b base
	if memo != nil && memo.ok && memo.server == server && memo.kind == kind {
		b = memo.b
	} else {
		b = p.base(sub, server, kind, act)
		if memo != nil {
			*memo = baseMemo{true, server, kind, b}
		}
	}
	if b.hidden {
		return false
	}
	someAllow := b.someAllow || !p.hasAllow
	for _, i := range p.candidates(server) {
		r := p.rules[i]
		if !r.names || (r.hasTool && r.tool != tool) || r.excluded(server, tool, prompt, resource, !unknownURI) {
			continue
		}
		if someAllow && !r.deny {
			break // denies come first: every deny was seen
		}
		switch o := p.partialEval(r, act, unknownURI); {
		case r.deny && (o == isTrue || o == isError):
			return false
		case !r.deny && (o == isTrue || o == isUnknown):
			someAllow = true
		}
	}
	return someAllow
}

func (p *Policy) partialEval(r *rule, act *partial, unknownURI bool) outcome {
	var o outcome
	if r.args || (unknownURI && r.resource) {
		o, _ = result(eval(r.part, act))
	} else {
		o, _ = result(eval(r.prg, &act.activation))
	}
	return o
}

// base evaluates (or finds cached) the rules that read no name.
func (p *Policy) base(sub *Subject, server, kind string, act *partial) base {
	return p.cachedBase(baseKey{sub.cacheKey(), server, kind}, func() base {
		var b base
		for _, i := range p.candidates(server) {
			r := p.rules[i]
			if r.names || r.hasTool || r.excluded(server, "", "", "", false) { // a name-free rule's conjuncts are on server alone
				continue
			}
			if b.someAllow && !r.deny {
				break
			}
			switch o := p.partialEval(r, act, false); {
			case r.deny && (o == isTrue || o == isError):
				b.hidden = true
			case !r.deny && (o == isTrue || o == isUnknown):
				b.someAllow = true
			}
			if b.hidden {
				break
			}
		}
		return b
	})
}

// MayUse reports whether some request of server by id could be allowed:
// the rules evaluated with everything of the request but its server
// unknown. A server's own endpoint refuses whoever may use nothing of
// it, before it starts an instance for them. Answers are cached in p per
// identity, bounded.
func (p *Policy) MayUse(id *identity.Identity, server string) bool {
	if p.Empty() {
		return true
	}
	sub := p.Subject(id)
	b := p.cachedBase(baseKey{sub.cacheKey(), server, "*"}, func() base {
		act := &partial{activation: activation{identity: sub.val, server: types.String(server)}, unknown: unknownRequest}
		b := base{someAllow: !p.hasAllow}
		for _, i := range p.candidates(server) {
			r := p.rules[i]
			var o outcome
			if r.part != nil {
				o, _ = result(eval(r.part, act))
			} else {
				o, _ = result(eval(r.prg, &act.activation))
			}
			switch {
			case r.deny && (o == isTrue || o == isError):
				return base{hidden: true}
			case !r.deny && (o == isTrue || o == isUnknown):
				b.someAllow = true
			}
		}
		return b
	})
	return !b.hidden && b.someAllow
}
