// Package revision says which members the schema of each MCP era gives a
// message, and turns a message of one era into what a peer of the other
// reads.
//
// mcpvisor speaks two eras on each side. The legacy one (2025-11-25 and
// the revisions before it) opens a session with initialize; the modern one
// (2026-07-28) has no session: every request carries the client's protocol
// version and capabilities in params._meta, and every result says its
// resultType. A client of one era may reach a server of the other — a
// 2025-11-25 client a server mcpvisor speaks 2026-07-28 with, a 2026-07-28
// client a legacy server — and each must get what a server of its own era
// would have sent it: nothing the other era's schema has and its own has
// not, and everything its own requires.
//
// Members is that difference, read off the two schemas
// (schema/2025-11-25/schema.json and schema/2026-07-28/schema.json in the
// modelcontextprotocol repository, compared definition by definition);
// the translations below apply it, and the tests read it — a fixture
// server puts every member of the table in what it sends, and the tests
// check that none reaches a client of the other era. Members of open
// objects that one era merely names and the other leaves open
// (capabilities' extensions and tasks, a tool's execution) are not in it:
// those objects are open in both schemas, and a server sends them the same
// to clients of either era.
//
// Errors have the same members in both eras (code, message, data): they
// pass as they are. The codes the modern era adds (-32020 to -32022) are
// about the request a client sent, and a legacy client reads any code.
package revision

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Era is a protocol era.
type Era uint8

const (
	Legacy Era = iota // 2025-11-25 and before: sessions opened by initialize
	Modern            // 2026-07-28: every request on its own, with _meta
)

// ModernVersion is the modern revision.
const ModernVersion = "2026-07-28"

// The reserved _meta keys of the modern era.
const (
	MetaProtocolVersion = "io.modelcontextprotocol/protocolVersion"
	MetaClientCaps      = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo      = "io.modelcontextprotocol/clientInfo"
	MetaLogLevel        = "io.modelcontextprotocol/logLevel"
	MetaServerInfo      = "io.modelcontextprotocol/serverInfo"
	MetaSubscriptionID  = "io.modelcontextprotocol/subscriptionId"
)

// Place is where in a message a member sits.
type Place uint8

const (
	InResult           Place = iota // a top-level member of a server's result
	InResultMeta                    // a key of a server's result's _meta
	InNotificationMeta              // a key of a notification's params._meta
	InRequest                       // a top-level member of a client's request's params
	InRequestMeta                   // a key of a client's request's params._meta
	InClientResult                  // a top-level member of a client's answer to a server's request
)

// Member is a member one era's schema gives a message and the other's
// does not.
type Member struct {
	Name  string
	Place Place
	Era   Era // the era that has it
	// Methods are the methods whose messages have it; nil: every method.
	Methods []string
	// Required: the era that has it requires it (its peers add it when
	// a message of the other era comes without it).
	Required bool
	// Def is the schema definition it comes from.
	Def string
}

// Methods whose results the modern era caches (server/utilities/caching:
// CacheableResult).
var CacheableMethods = []string{"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}

// Methods a modern server may answer with an InputRequiredResult, and
// whose retry carries the client's input (the multi round-trip requests).
var InputMethods = []string{"tools/call", "prompts/get", "resources/read"}

// Members is every member one era's schema gives a message and the
// other's does not.
var Members = []Member{
	{Name: "resultType", Place: InResult, Era: Modern, Required: true, Def: "Result"},
	{Name: "ttlMs", Place: InResult, Era: Modern, Methods: CacheableMethods, Required: true, Def: "CacheableResult"},
	{Name: "cacheScope", Place: InResult, Era: Modern, Methods: CacheableMethods, Required: true, Def: "CacheableResult"},
	{Name: "inputRequests", Place: InResult, Era: Modern, Methods: InputMethods, Def: "InputRequiredResult"},
	{Name: "requestState", Place: InResult, Era: Modern, Methods: InputMethods, Def: "InputRequiredResult"},
	{Name: MetaServerInfo, Place: InResultMeta, Era: Modern, Def: "ResultMetaObject"},
	{Name: MetaSubscriptionID, Place: InNotificationMeta, Era: Modern, Def: "NotificationMetaObject"},
	{Name: "inputResponses", Place: InRequest, Era: Modern, Methods: InputMethods, Def: "InputResponseRequestParams"},
	{Name: "requestState", Place: InRequest, Era: Modern, Methods: InputMethods, Def: "InputResponseRequestParams"},
	{Name: "task", Place: InRequest, Era: Legacy, Methods: []string{"tools/call"}, Def: "TaskAugmentedRequestParams"},
	{Name: MetaProtocolVersion, Place: InRequestMeta, Era: Modern, Required: true, Def: "RequestMetaObject"},
	{Name: MetaClientCaps, Place: InRequestMeta, Era: Modern, Required: true, Def: "RequestMetaObject"},
	{Name: MetaClientInfo, Place: InRequestMeta, Era: Modern, Def: "RequestMetaObject"},
	{Name: MetaLogLevel, Place: InRequestMeta, Era: Modern, Def: "RequestMetaObject"},
	{Name: "_meta", Place: InClientResult, Era: Legacy, Methods: []string{"roots/list", "elicitation/create"}, Def: "ListRootsResult, ElicitResult"},
}

// MethodEra is a method one era has and the other has not.
type MethodEra struct {
	Method string
	Era    Era
}

// Methods is every method one era has and the other has not. The legacy
// era's tasks (tasks/get, tasks/result, tasks/list, tasks/cancel,
// notifications/tasks/status) are not in it: the modern era moved them to
// an extension, negotiated per server, which routes its own.
var Methods = []MethodEra{
	{"initialize", Legacy},
	{"ping", Legacy},
	{"logging/setLevel", Legacy},
	{"resources/subscribe", Legacy},
	{"resources/unsubscribe", Legacy},
	{"notifications/initialized", Legacy},
	{"notifications/roots/list_changed", Legacy},
	{"notifications/elicitation/complete", Legacy},
	{"server/discover", Modern},
	{"subscriptions/listen", Modern},
	{"notifications/subscriptions/acknowledged", Modern},
}

// Has reports whether era has method.
func Has(era Era, method string) bool {
	for _, m := range Methods {
		if m.Method == method {
			return m.Era == era
		}
	}
	return true
}

// ExtensionCacheableMethods are methods of extensions whose results carry
// ttlMs and cacheScope from 2026-07-28 on: the skills extension's
// (SEP-2640: ListSkillsResult, GetSkillResult and
// ReadResourceDirectoryResult extend CacheableResult). A legacy server of
// the extension (its earlier drafts had no caching members) gets them
// added for a modern client, as a core method's result does
// (ToModernResult); but they stay in a legacy client's results
// (ToLegacyResult): the extension's results have them in either era, and
// its SDKs' schemas require them in every result.
var ExtensionCacheableMethods = []string{"skills/list", "skills/get", "resources/directory/read"}

// Cacheable reports whether method's complete results carry ttlMs and
// cacheScope in the modern era.
func Cacheable(method string) bool {
	return slices.Contains(CacheableMethods, method) || slices.Contains(ExtensionCacheableMethods, method)
}

// For reports whether m is a member of method's messages.
func (m *Member) For(method string) bool {
	return m.Methods == nil || slices.Contains(m.Methods, method)
}

// Names lists the names of the members of era at place that method's
// messages have (every method's, for method "").
func Names(era Era, place Place, method string) []string {
	var out []string
	for i := range Members {
		m := &Members[i]
		if m.Era == era && m.Place == place && (method == "" || m.For(method)) {
			out = append(out, m.Name)
		}
	}
	return out
}

// What ToLegacyResult and Notification drop, made once from Members:
// the top-level members of a modern result of each method the table
// names (resultDrops), and of any other method (resultDropsElse); the
// reserved keys of a result's and a notification's _meta.
var (
	resultDrops     = map[string][]string{}
	resultDropsElse = Names(Modern, InResult, "\x00") // the members of every method's results alone
	resultMetaDrops = Names(Modern, InResultMeta, "")
	noteMetaDrops   = Names(Modern, InNotificationMeta, "")
)

// What ToModernClientResult and LegacyRequestMembers name, per method.
var (
	clientResultDrops = map[string][]string{}
	requestDrops      = map[string][]string{}
)

func init() {
	for _, m := range Members {
		for _, method := range m.Methods {
			switch {
			case m.Place == InResult && m.Era == Modern:
				resultDrops[method] = Names(Modern, InResult, method)
			case m.Place == InClientResult && m.Era == Legacy:
				clientResultDrops[method] = Names(Legacy, InClientResult, method)
			case m.Place == InRequest && m.Era == Legacy:
				requestDrops[method] = Names(Legacy, InRequest, method)
			}
		}
	}
}

// ToLegacyResult is result, a modern server's result of method, as a
// legacy client reads it: without the members only the modern era has
// (resultType, the caching members, a reserved _meta key; _meta itself
// when nothing else was in it). The rest is kept byte for byte; result
// itself comes back when there is nothing to drop. An input_required
// result is not a result a legacy client can read at all: the caller
// fulfils it first (it is returned as it is).
func ToLegacyResult(method string, result json.RawMessage) json.RawMessage {
	if t, ok := rpc.StringMember(result, "resultType"); ok && t != "complete" {
		return result
	}
	return rpc.DropMembers(result, resultNames(method), resultMetaDrops)
}

// resultNames are the top-level members ToLegacyResult drops from
// method's results.
func resultNames(method string) []string {
	if names, ok := resultDrops[method]; ok {
		return names
	}
	return resultDropsElse
}

// ToModernResult makes result, a legacy server's result of method (or one
// of mcpvisor's own), what a modern client reads: resultType "complete"
// when it has none, and for a cacheable method ttlMs ttl and cacheScope
// scope (a JSON string) when it has none. The members are spliced in at
// the front of the object; nothing else is re-encoded. A result that
// names inputRequests or requestState without a resultType is a server's
// interim result: it gets resultType "input_required". A result that is
// not an object, or has a resultType other than complete, is returned as
// it is.
func ToModernResult(method string, result json.RawMessage, ttl int, scope string) json.RawMessage {
	r := result
	if len(r) < 2 || r[0] != '{' {
		return r
	}
	var buf [96]byte // the members added: at most resultType, ttlMs and a cacheScope
	add := buf[:0]
	// One scan: resultType, inputRequests, requestState, ttlMs, cacheScope.
	var v [5]json.RawMessage
	rpc.MembersInto(v[:], r, "resultType", "inputRequests", "requestState", "ttlMs", "cacheScope")
	if v[0] == nil {
		if v[1] != nil || v[2] != nil {
			return rpc.PrependMembers(r, []byte(`"resultType":"input_required"`))
		}
		add = append(add, `"resultType":"complete",`...)
	} else if t, _ := rpc.String(v[0]); t != "complete" {
		return r // input_required, or a type of a later revision: not ours to touch
	}
	if Cacheable(method) {
		if v[3] == nil {
			add = append(add, `"ttlMs":`...)
			add = strconv.AppendInt(add, int64(ttl), 10)
			add = append(add, ',')
		}
		if v[4] == nil {
			add = append(add, `"cacheScope":`...)
			add = append(add, scope...)
			add = append(add, ',')
		}
	}
	if len(add) == 0 {
		return r
	}
	return rpc.PrependMembers(r, add[:len(add)-1]) // without the last comma
}

// Notification is params, those of a server's notification, as mcpvisor
// passes them on to a client of either era: without the reserved _meta
// keys that name the server's side of the exchange (a subscription id
// names mcpvisor's own subscriptions/listen on the server, not anything
// of the client's; a listen of the client's gets its own). params itself
// comes back when there is nothing to drop.
func Notification(params json.RawMessage) json.RawMessage {
	if len(params) == 0 {
		return params
	}
	return rpc.DropMembers(params, nil, noteMetaDrops)
}

// ToModernClientResult is a legacy client's answer (result) to a server's
// request of method, as a modern server reads it among a retry's
// inputResponses: without the members only the legacy era gives it.
func ToModernClientResult(method string, result json.RawMessage) json.RawMessage {
	names := clientResultDrops[method]
	if len(names) == 0 {
		return result
	}
	return rpc.DropMembers(result, names, nil)
}

// LegacyRequestMembers are the top-level members of params of method
// that only the legacy era gives a client's request (made once from
// Members; nil for most methods).
func LegacyRequestMembers(method string) []string { return requestDrops[method] }
