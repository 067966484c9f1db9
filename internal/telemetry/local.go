package telemetry

import "sync/atomic"

// Local counts the client requests mcpvisor answers itself, without
// forwarding them to a server — the handshake, ping, the aggregated
// endpoint's lists, server/discover, a call of an unknown or denied tool,
// logging/setLevel on the aggregated endpoint, a retry of a held call, a
// method it does not serve — by method (MethodLabel: any method outside
// Methods is Other) and outcome: a bounded set of series, however clients
// name their methods. A request forwarded to a server is its server's to
// count (Server.Record), not Local's. The zero Local is ready to use; it
// is safe for concurrent use and Record allocates nothing.
type Local struct {
	n [numMethods + 1][NumOutcomes]atomic.Uint64
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
