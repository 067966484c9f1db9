package telemetry

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Local counts the client requests mcpvisor answers itself, without
// forwarding them to a server — the handshake, ping, the aggregated
// endpoint's lists, server/discover, a call of an unknown or denied tool,
// logging/setLevel on the aggregated endpoint, a retry of a held call, a
// method it does not serve — and the client messages its fronts refuse
// before an endpoint sees them (a body that is not JSON-RPC, an unknown
// session, a header that does not match the body, ...), by method
// (MethodLabel: any method outside Methods, and a method that could not be
// read, is Other) and outcome: a bounded set of series, however clients
// name their methods. A request forwarded to a server is its server's to
// count (Server.Record), not Local's. Local also counts, by Refusal, the
// HTTP requests the fronts refuse that carry no JSON-RPC message to count
// by method. The zero Local is ready to use; it is safe for concurrent use
// and Record and RecordRefusal allocate nothing.
type Local struct {
	n       [numMethods + 1][NumOutcomes]atomic.Uint64
	refused [NumRefusals]atomic.Uint64
}

// Record counts one request of method that ended with o.
func (l *Local) Record(method string, o Outcome) {
	i, ok := methodIndex[method]
	if !ok {
		i = numMethods
	}
	l.n[i][min(o, NumOutcomes-1)].Add(1)
}

// Count is how many requests of method (as MethodLabel folds it) ended
// with o.
func (l *Local) Count(method string, o Outcome) uint64 {
	i, ok := methodIndex[method]
	if !ok {
		i = numMethods
	}
	return l.n[i][min(o, NumOutcomes-1)].Load()
}

// Each calls fn for every method label (in the order of its name) and
// outcome, zero counts included.
func (l *Local) Each(fn func(method string, o Outcome, n uint64)) {
	for _, i := range methodOrder {
		for o := range NumOutcomes {
			fn(methodName(i), o, l.n[i][o].Load())
		}
	}
}

// Refusal is why an MCP endpoint refused an HTTP request that carries no
// JSON-RPC message — a GET, a DELETE, another HTTP method — or that the
// access guard stopped before anything of it was read. A refused POST is
// a refused client message, counted by method and outcome (Record).
type Refusal uint8

const (
	// RefusedUnauthorized: 401, the bearer token missing or wrong.
	RefusedUnauthorized Refusal = iota
	// RefusedForbidden: 403, a Host or Origin not allowed.
	RefusedForbidden
	// RefusedMethod: 405, an HTTP method the endpoint does not serve (a
	// GET or DELETE of MCP 2026-07-28 among them).
	RefusedMethod
	// RefusedNotAcceptable: 406, a GET whose Accept does not allow
	// text/event-stream.
	RefusedNotAcceptable
	// RefusedVersion: 400, a GET or DELETE whose MCP-Protocol-Version is
	// not one mcpvisor serves.
	RefusedVersion
	// RefusedNoSession: 400, a GET or DELETE without Mcp-Session-Id.
	RefusedNoSession
	// RefusedLastEventID: 400, a GET whose Last-Event-ID is malformed.
	RefusedLastEventID
	// RefusedUnknownSession: 404, a GET or DELETE of a session that does
	// not exist (never did, expired, or deleted).
	RefusedUnknownSession
	// RefusedUnknownServer: 404, a request to /servers/{name}/mcp of a
	// server not configured (or removed).
	RefusedUnknownServer

	// NumRefusals is the number of refusal reasons.
	NumRefusals
)

var refusalNames = [NumRefusals]string{"unauthorized", "forbidden", "method_not_allowed", "not_acceptable",
	"unsupported_version", "session_required", "bad_last_event_id", "session_not_found", "unknown_server"}

// String is the reason's label value.
func (r Refusal) String() string {
	if r < NumRefusals {
		return refusalNames[r]
	}
	return "refusal(" + strconv.Itoa(int(r)) + ")"
}

// RecordRefusal counts one HTTP request refused for r.
func (l *Local) RecordRefusal(r Refusal) { l.refused[min(r, NumRefusals-1)].Add(1) }

// Refusals is how many HTTP requests were refused for r.
func (l *Local) Refusals(r Refusal) uint64 { return l.refused[min(r, NumRefusals-1)].Load() }

// EachRefusal calls fn for every refusal reason, in the order of its
// label, zero counts included.
func (l *Local) EachRefusal(fn func(reason string, n uint64)) {
	for _, r := range refusalOrder {
		fn(refusalNames[r], l.refused[r].Load())
	}
}

// refusalOrder is the reasons in the order of their labels.
var refusalOrder = func() []Refusal {
	order := make([]Refusal, NumRefusals)
	for i := range order {
		order[i] = Refusal(i)
	}
	slices.SortFunc(order, func(a, b Refusal) int { return strings.Compare(refusalNames[a], refusalNames[b]) })
	return order
}()
