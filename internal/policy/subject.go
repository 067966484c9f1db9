package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Subject is the part of the rules' input that depends only on the
// identity, built once per identity and cached in the Policy.
type Subject struct {
	val    ref.Val
	fields subjectFields
	reads  *reads // what the policy's rules read of it; nil: all

	keyOnce sync.Once
	key     string
}

// cacheKey names what the policy's rules read of the identity ("" when
// it cannot be encoded: then nothing is cached by it). It is computed on
// first use: only list filtering needs it.
func (s *Subject) cacheKey() string {
	s.keyOnce.Do(func() {
		// json.Marshal sorts map keys: the same fields give the same key.
		if b, err := json.Marshal(s.reads.project(&s.fields)); err == nil {
			sum := sha256.Sum256(b)
			s.key = hex.EncodeToString(sum[:])
		}
	})
	return s.key
}

var anonymous = newSubject(nil)

// Subject returns id's precomputed rule input, cached by the identity
// (which never changes after it is made) in a bounded cache.
func (p *Policy) Subject(id *identity.Identity) *Subject {
	if id == nil {
		return anonymous
	}
	if p == nil {
		return newSubject(id)
	}
	p.mu.Lock()
	s, ok := p.subjects[id]
	p.mu.Unlock()
	if ok {
		return s
	}
	s = newSubject(id)
	s.reads = p.reads
	p.mu.Lock()
	putBounded(p.subjects, id, s, maxSubjects)
	p.mu.Unlock()
	return s
}

// Key names everything a rule of p can read of id: two identities with
// the same Key get the same answers. "" when it cannot be told (nothing
// should then be kept by it), and for a nil p.
func (p *Policy) Key(id *identity.Identity) string {
	if p == nil {
		return ""
	}
	return p.Subject(id).cacheKey()
}

// subjectFields is the identity as rules see it.
type subjectFields struct {
	Sub    string         `json:"sub"`
	Iss    string         `json:"iss"`
	Client string         `json:"client"`
	Groups []string       `json:"groups"`
	Scopes []string       `json:"scopes"`
	Kind   string         `json:"kind"`
	Claims map[string]any `json:"claims"`
}

func newSubject(id *identity.Identity) *Subject {
	f := subjectFields{Groups: []string{}, Scopes: []string{}, Claims: map[string]any{}}
	if id != nil {
		f.Sub, f.Iss, f.Client, f.Kind = id.Subject, id.Issuer, id.ClientID, string(id.Kind)
		if id.Groups != nil {
			f.Groups = id.Groups
		}
		if id.Scopes != nil {
			f.Scopes = id.Scopes
		}
		if id.Claims != nil {
			f.Claims = id.Claims
		}
	}
	a := types.DefaultTypeAdapter
	m := map[ref.Val]ref.Val{
		types.String("sub"):    types.String(f.Sub),
		types.String("iss"):    types.String(f.Iss),
		types.String("client"): types.String(f.Client),
		types.String("kind"):   types.String(f.Kind),
		types.String("groups"): types.NewStringList(a, f.Groups),
		types.String("scopes"): types.NewStringList(a, f.Scopes),
		types.String("claims"): types.NewStringInterfaceMap(a, f.Claims),
	}
	return &Subject{val: types.NewRefValMap(a, m), fields: f}
}

// activation resolves the rules' variables without a map per request.
type activation struct {
	identity, server, method, tool, prompt, resource, arguments ref.Val
}

func (a *activation) ResolveName(name string) (any, bool) {
	var v ref.Val
	switch name {
	case "identity":
		v = a.identity
	case "server":
		v = a.server
	case "method":
		v = a.method
	case "tool":
		v = a.tool
	case "prompt":
		v = a.prompt
	case "resource":
		v = a.resource
	case "arguments":
		v = a.arguments
	}
	return v, v != nil
}

func (a *activation) Parent() interpreter.Activation { return nil }

// partial is an activation some of whose variables are unknown.
type partial struct {
	activation
	unknown []*interpreter.AttributePattern
}

func (a *partial) UnknownAttributePatterns() []*interpreter.AttributePattern { return a.unknown }

// AsPartialActivation is how cel-go finds the unknowns of an activation.
func (a *partial) AsPartialActivation() (interpreter.PartialActivation, bool) { return a, true }
