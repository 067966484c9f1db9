package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// The policy (the config's rules) decides every request that uses one
// server's item — a tool called, a prompt got, a resource read or
// subscribed to, a completion of a prompt's or a resource's argument —
// in begin, before the server is leased: a denied request starts
// nothing and reaches no server. What it sees is what the server would:
// the item's name as the server knows it (an aggregated name resolved
// to exactly one server's first) and the arguments from the request's
// body, never from headers. Lists are filtered by the same rules
// (Visible): an item no call of which could be allowed is not listed.

// SetPolicy makes p the policy in force; nil allows everything. A reload
// swaps it whole: a request is decided by one policy.
func (g *Gateway) SetPolicy(p *policy.Policy) {
	g.policy.Store(p)
	g.rulesGen.Add(1)
}

// notPermitted is what a denied request's client is told: no more (the
// audit has the rule and the reason).
const notPermitted = "not permitted"

// decided reports whether the policy decides method, forwarded to a
// server: every method but those of the protocol itself — its lists
// (filtered instead), its session and logging level, a task's requests
// (each task is its identity's own: tasks.go) and listen streams (their
// subscriptions are decided one by one). A method mcpvisor does not know
// — an extension's, a later revision's — is decided by what it names.
func decided(method string) bool {
	switch method {
	case "initialize", "ping", "logging/setLevel", "server/discover", "subscriptions/listen",
		"tools/list", "prompts/list", "resources/list", "resources/templates/list", "skills/list",
		"tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list":
		return false
	}
	return !strings.HasPrefix(method, "notifications/")
}

// requestIdentity is who sent the request of ctx from w: the identity of
// that very request (an HTTP request's verified token, which a legacy
// session's later requests may carry renewed, with other claims), else
// w's.
func requestIdentity(ctx context.Context, w sender) *identity.Identity {
	if id := identity.FromContext(ctx); id != nil {
		return id
	}
	return w.identity()
}

// policyRequest is what the policy is asked about who's request of
// method to srv; target is the tool or prompt it names as the server
// knows it.
func policyRequest(who *identity.Identity, srv *fleet.Server, method, target string, params json.RawMessage) *policy.Request {
	req := &policy.Request{Identity: who, Server: srv.Name(), Method: method}
	switch method {
	case "tools/call":
		req.Tool, req.Arguments = target, rpc.Member(params, "arguments")
	case "prompts/get":
		req.Prompt, req.Arguments = target, rpc.Member(params, "arguments")
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		req.Resource, _ = rpc.StringMember(params, "uri")
	case "completion/complete":
		ref := rpc.Member(params, "ref")
		if t, _ := rpc.StringMember(ref, "type"); t == "ref/prompt" {
			req.Prompt, _ = rpc.StringMember(ref, "name")
		} else {
			req.Resource, _ = rpc.StringMember(ref, "uri")
		}
	default:
		// What a method mcpvisor does not know names: a resource by its
		// uri (skills/get, resources/directory/read, x/describe), else a
		// tool or a prompt by its name — by the method's family, else by
		// the server's lists, else as both, so that a rule about either
		// applies.
		if uri, _ := rpc.StringMember(params, "uri"); uri != "" {
			req.Resource = uri
			break
		}
		name, _ := rpc.StringMember(params, "name")
		if name == "" {
			break
		}
		switch {
		case strings.HasPrefix(method, "tools/"):
			req.Tool = name
		case strings.HasPrefix(method, "prompts/"):
			req.Prompt = name
		case listed(srv, kindTools, name) && !listed(srv, kindPrompts, name):
			req.Tool = name
		case listed(srv, kindPrompts, name) && !listed(srv, kindTools, name):
			req.Prompt = name
		default:
			req.Tool, req.Prompt = name, name
		}
		req.Arguments = rpc.Member(params, "arguments")
	}
	return req
}

// listed reports whether srv's cached list of kind k has an item named
// name.
func listed(srv *fleet.Server, k catalog.ListKind, name string) bool {
	items, _ := srv.Catalog().CachedList(k)
	for _, it := range items {
		if n, _ := rpc.StringMember(it, "name"); n == name {
			return true
		}
	}
	return false
}

// prepare reads what the policy, the rate limits and the audit ask of
// f's request, a use of a server's item: raw is the tool or prompt it
// names as the server knows it, as JSON (escapes and all: it is read
// decoded, as the server will). A request that names none, or names it
// with no string, is refused: nothing the rules could be asked about is
// permitted.
func (g *Gateway) prepare(f *flight, raw, params json.RawMessage) *rpc.Message {
	var target string
	if f.method == "tools/call" || f.method == "prompts/get" {
		var ok bool
		if target, ok = rpc.String(raw); !ok && g.filtering() {
			f.refused = true
			what := map[bool]string{true: "tool", false: "prompt"}[f.method == "tools/call"]
			g.auditRefusal(f, "", "denied", rpc.InvalidParams, "the request names no "+what)
			return errorResponse(f.clientID, rpc.InvalidParams, "Invalid params: the request names no "+what)
		}
	}
	if g.filtering() && duplicateKeys(params) {
		// Which of two "name"s, or of two argument values, a server
		// reads is its parser's choice; the policy must read what the
		// server will, so it reads neither.
		f.refused = true
		g.auditRefusal(f, "", "denied", rpc.InvalidParams, "the params repeat a key")
		return errorResponse(f.clientID, rpc.InvalidParams, "Invalid params: a key appears twice in one object")
	}
	f.preq = policyRequest(f.who, f.srv, f.method, target, params)
	f.auditTarget = cmp.Or(f.preq.Tool, f.preq.Prompt, f.preq.Resource)
	if g.audit.Load() != nil || f.recv != nil {
		// The audit (here, or the receiver's) writes them later: its
		// own copy, whatever becomes of the request's buffer.
		f.auditArgs = bytes.Clone(f.preq.Arguments)
	}
	return nil
}

// permit decides f's prepared request by the policy in force. It returns
// the client's answer to a denied one (and records the denial), else nil.
func (g *Gateway) permit(f *flight) *rpc.Message {
	p := g.policy.Load()
	if p.Empty() {
		return nil
	}
	d := p.Decide(f.preq)
	if d.Allowed {
		return nil
	}
	f.refused = true
	g.denied(f, f.preq, d)
	return errorResponse(f.clientID, rpc.NotPermitted, notPermitted)
}

// visible reports whether who may see srv's item of kind named name (as
// the server knows it) in a list, under policy p.
func visible(p *policy.Policy, who *identity.Identity, srv *fleet.Server, kind, name string) bool {
	return p.Empty() || who.Decided() || p.Visible(who, srv.Name(), kind, name)
}

// filtering reports whether lists are filtered now: by a policy, or by
// the scopes servers need.
func (g *Gateway) filtering() bool {
	return !g.policy.Load().Empty() || g.serverScopes.Load() != nil
}

// denied records a denial: in the audit, with the rule and the reason
// (the client is told neither), and in the log at debug.
func (g *Gateway) denied(f *flight, req *policy.Request, d policy.Decision) {
	g.denials.Add(1)
	g.log.Debug("policy: denied", "identity", req.Identity.Name(), "server", req.Server, "method", req.Method, "rule", d.Rule, "reason", d.Reason)
	reason := d.Reason
	if d.Rule != "" && d.Rule != "default" {
		reason = "rule " + d.Rule + ": " + reason
	}
	g.auditRefusal(f, f.auditTarget, "denied", rpc.NotPermitted, reason)
}

// policyKind is the policy's kind of the items of list kind k.
func policyKind(k catalog.ListKind) string {
	switch k {
	case kindTools:
		return policy.KindTool
	case kindPrompts:
		return policy.KindPrompt
	case kindResources:
		return policy.KindResource
	case kindTemplates:
		return policy.KindTemplate
	}
	return ""
}

// visRules are what a table's kept answers were made under: the policy
// and server scopes of a generation (Gateway.rulesGen).
type visRules struct {
	policy *policy.Policy
	scopes *func(string) []string
	gen    uint64
}

// visKey names an answer of visibleOf, under a table's visRules: what
// the rules can read of the identity and, when server scopes apply, the
// token's kind and scopes.
type visKey struct {
	identity, held string
}

type visList struct {
	items []json.RawMessage
	keys  []string
}

// cost is what l counts against maxVisCost: an empty answer too.
func (l visList) cost() int { return 1 + len(l.items) }

// maxVisCost bounds a table's kept answers, in items plus answers (a
// few megabytes of slice headers at most: the items themselves are the
// table's); past it, kept answers are dropped at random.
var maxVisCost = 1 << 17

// visibleOf is t's items (and their keys) w may see: those of which some
// request could be allowed. t is one of the aggregate's tables, so w is
// a sender on /mcp, where server scopes count. Answers are kept with t,
// by identity (as the policy tells them apart), so that an identity's
// lists after its first cost a lookup.
func (g *Gateway) visibleOf(who *identity.Identity, w sender, t *routeTable, k catalog.ListKind) ([]json.RawMessage, []string) {
	if who.Decided() {
		return t.items, t.keys
	}
	// The generation first: rules loaded after it are of it or later.
	under := visRules{gen: g.rulesGen.Load()}
	under.policy, under.scopes = g.policy.Load(), g.serverScopes.Load() // one of each for the whole list
	p := under.policy
	key := visKey{identity: p.Key(who)}
	if under.scopes != nil && who != nil {
		// missingScopes reads these, whatever the rules read; a scope
		// may hold any character, so they are encoded, not joined, and
		// hashed: a key costs its size whatever the token holds.
		held, _ := json.Marshal([]any{who.Kind, who.Scopes})
		sum := sha256.Sum256(held)
		key.held = string(sum[:])
	}
	if key.identity != "" {
		t.visMu.Lock()
		l, ok := t.vis[key]
		ok = ok && t.visFor == under
		t.visMu.Unlock()
		if ok {
			return l.items, l.keys
		}
	}
	items, keys := visibleNow(under, who, w, t, k)
	if key.identity != "" {
		t.keepVisible(under, key, visList{items, keys})
	}
	return items, keys
}

// keepVisible keeps l as t's answer for key under rules, within
// maxVisCost.
func (t *routeTable) keepVisible(under visRules, key visKey, l visList) {
	if l.cost() > maxVisCost {
		return
	}
	t.visMu.Lock()
	defer t.visMu.Unlock()
	if t.vis != nil && under.gen < t.visFor.gen {
		return // a list begun before a reload, ended after a list of its rules
	}
	if t.vis == nil || t.visFor != under {
		t.vis, t.visFor, t.visCost = map[visKey]visList{}, under, 0
	}
	if _, ok := t.vis[key]; ok {
		return
	}
	for k, old := range t.vis {
		if t.visCost+l.cost() <= maxVisCost {
			break
		}
		delete(t.vis, k)
		t.visCost -= old.cost()
	}
	t.vis[key] = l
	t.visCost += l.cost()
}

// visibleNow is visibleOf's answer, worked out under the rules given.
func visibleNow(under visRules, who *identity.Identity, w sender, t *routeTable, k catalog.ListKind) ([]json.RawMessage, []string) {
	kind := policyKind(k)
	items := make([]json.RawMessage, 0, len(t.items))
	keys := make([]string, 0, len(t.keys))
	lacks := map[*fleet.Server]bool{}
	v := under.policy.Viewer(who) // the list's answers are kept whole, by visibleOf
	for i, key := range t.keys {
		r, ok := t.byName[key]
		if !ok || !v.Visible(r.srv.Name(), kind, r.name) {
			continue
		}
		missing, seen := lacks[r.srv]
		if !seen {
			missing = missingScopesUnder(under.scopes, who, w, r.srv) != nil
			lacks[r.srv] = missing
		}
		if missing {
			continue // listed once the token holds the server's scopes
		}
		items = append(items, t.items[i])
		keys = append(keys, key)
	}
	return items, keys
}

// itemName is the name the policy knows a listed item of kind k by: a
// tool's or prompt's name, a resource's URI, a template's URI template.
func itemName(k catalog.ListKind, item json.RawMessage) string {
	member := "name"
	switch k {
	case kindResources:
		member = "uri"
	case kindTemplates:
		member = "uriTemplate"
	}
	s, _ := rpc.StringMember(item, member)
	return s
}

// filterList keeps of a server's list result (of kind k) the items keep
// wants; a result it cannot read is emptied (never passed on whole).
func filterList(result json.RawMessage, k catalog.ListKind, keep func(json.RawMessage) bool) json.RawMessage {
	var body map[string]json.RawMessage
	var items []json.RawMessage
	if json.Unmarshal(result, &body) != nil || json.Unmarshal(body[k.Member], &items) != nil {
		return mustJSON(map[string]any{k.Member: []json.RawMessage{}})
	}
	kept := items[:0]
	for _, it := range items {
		if keep(it) {
			kept = append(kept, it)
		}
	}
	body[k.Member] = mustJSON(nonNil(kept))
	return mustJSON(body)
}

// filterForPolicy filters a server's list answer to what who may see.
func (g *Gateway) filterForPolicy(who *identity.Identity, srv *fleet.Server, k catalog.ListKind, resp *rpc.Message) *rpc.Message {
	if !g.filtering() || resp.Result == nil || who.Decided() {
		return resp
	}
	kind := policyKind(k)
	p := g.policy.Load() // one policy for the whole list
	resp.Result = filterList(resp.Result, k, func(it json.RawMessage) bool {
		return visible(p, who, srv, kind, itemName(k, it))
	})
	return resp
}

// SetServerScopes sets what a call of a server through /mcp needs of a
// token's scopes, besides the endpoint's own that the guard checked (nil:
// nothing): a server's own endpoint needs them of every request, and
// /mcp of each call of that server, and lists a server's items only to
// an identity that holds them.
func (g *Gateway) SetServerScopes(fn func(server string) []string) {
	if fn == nil {
		g.serverScopes.Store(nil)
	} else {
		g.serverScopes.Store(&fn)
	}
	g.rulesGen.Add(1)
}

// missingScopes is what w lacks of the scopes a call of srv through /mcp
// needs — all of them, when it lacks any, for one challenge — or nil. A
// server's own endpoint was checked by the guard, and a local identity
// holds no token to step up.
func (g *Gateway) missingScopes(id *identity.Identity, w sender, srv *fleet.Server) []string {
	return missingScopesUnder(g.serverScopes.Load(), id, w, srv)
}

// missingScopesUnder is missingScopes under the server scopes fn.
func missingScopesUnder(fn *func(string) []string, id *identity.Identity, w sender, srv *fleet.Server) []string {
	if fn == nil || w.endpoint() != nil {
		return nil
	}
	if id == nil || id.Kind != identity.Token {
		return nil
	}
	need := (*fn)(srv.Name())
	if len(need) == 0 || id.HasScopes(need) {
		return nil
	}
	return need
}

// scoped answers a call of f's server that f's token lacks the scopes
// for, else nil.
func (g *Gateway) scoped(f *flight) *rpc.Message {
	need := g.missingScopes(f.who, f.from, f.srv)
	if need == nil {
		return nil
	}
	f.refused = true
	g.scopeRefusals.Add(1)
	scope := strings.Join(need, " ")
	g.auditRefusal(f, f.auditTarget, "denied", rpc.InsufficientScope, "the token lacks scopes server "+f.name+" needs: "+scope)
	return &rpc.Message{ID: f.clientID, Error: &rpc.Error{Code: rpc.InsufficientScope,
		Message: "insufficient scope: a call of server " + f.name + " needs scopes " + scope,
		Data:    mustJSON(map[string]string{"scope": scope})}}
}

// scopeOf is the scope list of an insufficient-scope answer, or nil.
func scopeOf(resp *rpc.Message) []string {
	if resp == nil || resp.Error == nil || resp.Error.Code != rpc.InsufficientScope {
		return nil
	}
	s, _ := rpc.StringMember(resp.Error.Data, "scope")
	return strings.Fields(s)
}

// duplicateKeys reports whether some object in raw — JSON the front
// has already read as valid — has a key twice, escapes decoded ("a" and
// "\u0061" are one key). It scans the bytes once, allocating nothing for
// objects of a few keys: it runs on every call under a policy.
func duplicateKeys(raw json.RawMessage) bool {
	var keyBuf [16][]byte
	keys := keyBuf[:0] // the keys of the objects open, outermost first
	var frameBuf [8]int
	starts := frameBuf[:0] // per open object or array: where its keys begin, -1 for an array
	expectKey := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '{':
			starts = append(starts, len(keys))
			expectKey = true
		case '[':
			starts = append(starts, -1)
			expectKey = false
		case '}', ']':
			if len(starts) == 0 {
				return true
			}
			if from := starts[len(starts)-1]; from >= 0 {
				keys = keys[:from]
			}
			starts = starts[:len(starts)-1]
			expectKey = false
		case ',':
			expectKey = len(starts) > 0 && starts[len(starts)-1] >= 0
		case '"':
			j, escaped := i+1, false
			for ; j < len(raw) && raw[j] != '"'; j++ {
				if raw[j] == '\\' {
					escaped = true
					j++
				}
			}
			if j >= len(raw) {
				return true
			}
			if expectKey {
				key := raw[i+1 : j]
				if escaped {
					s, ok := rpc.String(raw[i : j+1])
					if !ok {
						return true
					}
					key = []byte(s)
				}
				for _, k := range keys[starts[len(starts)-1]:] {
					if bytes.Equal(k, key) {
						return true
					}
				}
				keys = append(keys, key)
				expectKey = false
			}
			i = j
		}
	}
	return len(starts) != 0
}
