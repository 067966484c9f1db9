package admin

import (
	"bufio"
	"fmt"
	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/event"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
	"net/http"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// states are the server states, each reported (0 or 1) for every server so
// that a state change never makes a series vanish.
var states = []string{"new", "starting", "running", "degraded", "restarting", "dormant", "failed", "stopped", "needs-login"}

// eventTypes are the events counted for every server, from zero: every
// kind declared about a server (event.Kinds). The others (reloads, about
// mcpvisor as a whole) are counted from zero too, with server "".
var eventTypes, globalEventTypes = func() (server, global []string) {
	for _, k := range event.Kinds() {
		if k.OfServer() {
			server = append(server, string(k))
		} else {
			global = append(global, string(k))
		}
	}
	return server, global
}()

var processStart = time.Now()

// serverGauges are the per-server series read from a server's status.
var serverGauges = []struct {
	name, typ, help string
	value           func(fleet.Status) float64
}{
	{"mcpvisor_server_in_flight", "gauge", "Requests in flight to each server's shared instance.",
		func(s fleet.Status) float64 { return float64(s.InFlight) }},
	{"mcpvisor_server_spawns_total", "counter", "Processes started for each server's shared instance (first start, respawns, restarts).",
		func(s fleet.Status) float64 { return float64(s.Spawns) }},
	{"mcpvisor_server_restart_streak", "gauge", "Starts in a row that failed before each server answered anything (2 or more: a crash loop); reset when it answers, or stays up for its healthy period.",
		func(s fleet.Status) float64 { return float64(s.Failures) }},
	{"mcpvisor_server_sessions", "gauge", "Per-session instances running for each server.",
		func(s fleet.Status) float64 { return float64(s.Sessions) }},
	{"mcpvisor_server_memory_bytes", "gauge", "Resident memory of each server's running process trees, per-session ones and pid-namespace inits included, summed over their live processes from /proc: the figure ps, inspect and the dashboard show (Linux; 0 when none runs).",
		func(s fleet.Status) float64 { return float64(s.MemoryBytes) }},
	{"mcpvisor_server_memory_peak_bytes", "gauge", "Peak resident memory of each server's running process trees: the sum of each live process's peak resident memory (VmHWM), at least mcpvisor_server_memory_bytes (Linux; 0 when none runs).",
		func(s fleet.Status) float64 { return float64(s.MemoryPeakBytes) }},
	{"mcpvisor_server_cpu_seconds_total", "counter", "CPU time of each server's running process trees: the cgroup leaf's cpu.stat usage_usec (v2) or cpuacct.usage (v1) where the leaf has it, else user and system time of the live processes and the children they reaped, from /proc (Linux; starts again from 0 with each new process).",
		func(s fleet.Status) float64 { return s.CPUSeconds }},
	{"mcpvisor_server_pids", "gauge", "Tasks (processes and threads) of each server's running process trees: the cgroup leaf's pids.current where the leaf has it, else threads counted in /proc (Linux; 0 when none runs).",
		func(s fleet.Status) float64 { return float64(s.PIDs) }},
	{"mcpvisor_server_memory_limit_bytes", "gauge", "Memory limit of every process tree of each server (config limits.memory, swap included where the kernel accounts it); 0 when none. A limit this machine cannot enforce is still shown: see mcpvisor_server_limits_not_enforced.",
		func(s fleet.Status) float64 {
			return limitValue(s, func(l *fleet.LimitsStatus) float64 { return float64(l.MemoryBytes) })
		}},
	{"mcpvisor_server_memory_limit_charged_bytes", "gauge", "What the memory limit of each server counts now, over its running trees: their cgroup leaves' memory.current (v2) or memory.usage_in_bytes (v1) — their own pages, the page cache they brought in, kernel memory — which is not the resident memory of mcpvisor_server_memory_bytes; 0 without a memory limit, or a leaf that counts memory.",
		func(s fleet.Status) float64 {
			return limitValue(s, func(l *fleet.LimitsStatus) float64 {
				if l.MemoryBytes == 0 {
					return 0
				}
				return float64(l.ChargedBytes)
			})
		}},
	{"mcpvisor_server_pids_limit", "gauge", "Tasks (processes and threads) limit of every process tree of each server (config limits.pids); 0 when none.",
		func(s fleet.Status) float64 {
			return limitValue(s, func(l *fleet.LimitsStatus) float64 { return float64(l.PIDs) })
		}},
	{"mcpvisor_server_cpu_limit_cores", "gauge", "CPU limit of every process tree of each server, in cores (config limits.cpu); 0 when none.",
		func(s fleet.Status) float64 {
			return limitValue(s, func(l *fleet.LimitsStatus) float64 { return l.CPU })
		}},
	{"mcpvisor_server_limits_not_enforced", "gauge", "Kinds of resource limit each server has configured that this machine cannot enforce (no cgroup controller for them: mcpvisor doctor says why); its processes run without them.",
		func(s fleet.Status) float64 {
			return limitValue(s, func(l *fleet.LimitsStatus) float64 { return float64(len(l.NotEnforced)) })
		}},
	{"mcpvisor_server_oom_kills_total", "counter", "Process trees of each server that its memory limit killed: ended with exit kind oom, read from the cgroup's OOM-kill counter (counted once each tree is gone).",
		func(s fleet.Status) float64 { return float64(s.OOMKills) }},
	{"mcpvisor_server_pids_limit_hits_total", "counter", "Forks (and thread creations) each server's pids limit refused, in its process trees that ended (the cgroup's pids.events max).",
		func(s fleet.Status) float64 { return float64(s.PIDsLimitHits) }},
	{"mcpvisor_server_start_time_seconds", "gauge", "Unix time the running process of each server started; 0 when none runs.",
		func(s fleet.Status) float64 { return unixSeconds(s.StartedAt) }},
	{"mcpvisor_server_dormant_since_seconds", "gauge", "Unix time each server went dormant; 0 when it is not dormant.",
		func(s fleet.Status) float64 {
			if s.State != "dormant" {
				return 0
			}
			return unixSeconds(s.DormantSince)
		}},
}

// metrics serves GET /metrics in the Prometheus text format (0.0.4).
func (h *Handler) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	// The exposition is written as it is made, not gathered first: a
	// thousand servers' series are megabytes.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	b := bufio.NewWriterSize(w, 32<<10)
	defer b.Flush()
	m := &expo{w: b}
	// mcpvisor's own memory is read first, as the scrape found it: what
	// the scrape allocates for a thousand servers' series (megabytes) is
	// not counted in it, nor a collection it sets off.
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	rss, rssOK := residentBytes()
	goroutines := runtime.NumGoroutine()

	snap := Snapshot(h.f, h.opts.Clients)
	m.family("mcpvisor_servers", "gauge", "Configured servers (disabled ones aside) by state.")
	for _, st := range states {
		m.sample("mcpvisor_servers", labels("state", st), float64(snap.Totals.ByState[st]))
	}
	m.family("mcpvisor_server_state", "gauge", "1 for the state each server is in, 0 for the others.")
	for _, s := range snap.Servers {
		for _, st := range states {
			m.sample("mcpvisor_server_state", labels("server", s.Name, "state", st), bool01(s.State == st))
		}
	}
	for _, g := range serverGauges {
		m.family(g.name, g.typ, g.help)
		for _, st := range snap.Servers {
			m.sample(g.name, labels("server", st.Name), g.value(st))
		}
	}
	m.family("mcpvisor_server_requests_total", "counter", "Requests begun on each server's shared instance.")
	for _, st := range snap.Servers {
		m.sample("mcpvisor_server_requests_total", labels("server", st.Name), float64(st.Requests))
	}
	callMetrics(m, h.f.CallTelemetry())
	m.family("mcpvisor_server_client_requests_total", "counter", clientRequestsHelp)
	for _, st := range snap.Servers {
		for _, c := range st.Clients {
			m.sample("mcpvisor_server_client_requests_total", labels("server", st.Name, "client", c.Name), float64(c.Requests))
		}
	}
	if h.opts.Local != nil {
		m.family("mcpvisor_gateway_requests_total", "counter", "Client requests mcpvisor answered itself, without forwarding them to a server — initialize, ping, the lists of /mcp, server/discover, a call of an unknown or denied tool, logging/setLevel on /mcp, a retry of a held call, a method it does not serve — and client messages the HTTP and stdio fronts refused before any endpoint saw them (a body or line that is not JSON-RPC or is too large, an unknown session, a refused batch, an unsupported protocol version, MCP headers that do not match the body, malformed _meta, the session limit, ...), by method (MCP's; any other, or one that could not be read, is _OTHER) and outcome (as mcpvisor_server_calls_total's: a refusal is protocol_error, or unavailable for a limit or a shutdown). Requests forwarded to a server are counted in mcpvisor_server_calls_total instead.")
		h.opts.Local.Each(func(method string, o telemetry.Outcome, n uint64) {
			m.sample("mcpvisor_gateway_requests_total", labels("method", method, "outcome", o.String()), float64(n))
		})
		m.family("mcpvisor_http_refusals_total", "counter", "HTTP requests to an MCP endpoint refused without a JSON-RPC message to count by method — refused by the access guard (unauthorized, forbidden), or a GET, DELETE or other HTTP method refused (method_not_allowed, not_acceptable, unsupported_version, session_required, bad_last_event_id, session_not_found) — by reason. A refused POST counts in mcpvisor_gateway_requests_total instead.")
		h.opts.Local.EachRefusal(func(reason string, n uint64) {
			m.sample("mcpvisor_http_refusals_total", labels("reason", reason), float64(n))
		})
	}

	if st := h.opts.Sessions; st != nil {
		m.family("mcpvisor_sessions", "gauge", "Client sessions open — legacy HTTP sessions of /mcp and every /servers/{name}/mcp, mcpvisor connect sessions — and 2026-07-28 subscriptions/listen streams, which count under maxSessions together.")
		m.sample("mcpvisor_sessions", "", float64(st.Open()))
		m.family("mcpvisor_sessions_limit", "gauge", "maxSessions: the bound on mcpvisor_sessions.")
		m.sample("mcpvisor_sessions_limit", "", float64(st.Max()))
		m.family("mcpvisor_session_evictions_total", "counter", "Client sessions mcpvisor closed without their client asking, by reason: limit (evicted at maxSessions to make room for a new session or listen: the least recently active with no request in flight), unused (an HTTP session that sent no request or response within a minute of initialize), idle (an HTTP session idle for its session timeout, 30 minutes by default).")
		st.EachEviction(func(reason string, n uint64) {
			m.sample("mcpvisor_session_evictions_total", labels("reason", reason), float64(n))
		})
	}

	if h.opts.Team != nil {
		teamMetrics(m, h.opts.Team())
	}

	counts := h.log.counted()
	m.family("mcpvisor_events_total", "counter", "Lifecycle events by server and type, since mcpvisor started.")
	// Every server has every type, from zero; counts may add servers
	// that are gone and types not listed.
	for _, s := range snap.Servers {
		for _, typ := range eventTypes {
			counts[eventKey{s.Name, typ}] += 0
		}
	}
	for _, typ := range globalEventTypes {
		counts[eventKey{"", typ}] += 0
	}
	keys := make([]eventKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b eventKey) int {
		if c := strings.Compare(a.server, b.server); c != 0 {
			return c
		}
		return strings.Compare(a.typ, b.typ)
	})
	for _, k := range keys {
		m.sample("mcpvisor_events_total", labels("server", k.server, "type", k.typ), float64(counts[k]))
	}

	if h.opts.Collisions != nil {
		m.family("mcpvisor_name_collisions", "gauge", "Names of /mcp that more than one server exports.")
		m.sample("mcpvisor_name_collisions", "", float64(len(h.opts.Collisions())))
	}

	if h.opts.HeldCalls != nil {
		m.family("mcpvisor_held_calls", "gauge", "Calls held open for a modern client's retry with its inputResponses (multi round-trip requests), per server.")
		held := h.opts.HeldCalls()
		for _, st := range Snapshot(h.f, h.opts.Clients).Servers {
			m.sample("mcpvisor_held_calls", labels("server", st.Name), float64(held[st.Name]))
		}
	}

	m.family("mcpvisor_event_streams", "gauge", "Clients following /api/events live.")
	m.sample("mcpvisor_event_streams", "", float64(h.streams.Load()))
	m.family("mcpvisor_goroutines", "gauge", "Goroutines of mcpvisor.")
	m.sample("mcpvisor_goroutines", "", float64(goroutines))
	m.family("mcpvisor_go_memory_bytes", "gauge", "Memory the Go runtime of mcpvisor has mapped.")
	m.sample("mcpvisor_go_memory_bytes", "", float64(sample[0].Value.Uint64()))
	m.family("mcpvisor_go_heap_objects_bytes", "gauge", "Bytes of live and not yet collected heap objects of mcpvisor.")
	m.sample("mcpvisor_go_heap_objects_bytes", "", float64(sample[1].Value.Uint64()))
	m.family("mcpvisor_go_heap_live_bytes", "gauge", "Bytes of the heap objects of mcpvisor the last garbage collection found live.")
	m.sample("mcpvisor_go_heap_live_bytes", "", float64(sample[2].Value.Uint64()))
	if rssOK {
		m.family("process_resident_memory_bytes", "gauge", "Resident memory of the mcpvisor process.")
		m.sample("process_resident_memory_bytes", "", float64(rss))
	}
	m.family("process_start_time_seconds", "gauge", "Unix time mcpvisor started.")
	m.sample("process_start_time_seconds", "", unixSeconds(processStart))
}

// clientRequestsHelp is the help of mcpvisor_server_client_requests_total.
var clientRequestsHelp = fmt.Sprintf("Client requests that reached each server (as mcpvisor_server_calls_total counts them), by the client's name: "+
	"the clientInfo.name it gave at initialize or in a request's _meta, normalized (lower case; letters, digits, '.', '_', '-'; at most %d bytes), "+
	"else the hint of the bridge it came through, else %s. A server counts at most %d names; the requests of any further name count under %s. "+
	"Only servers some client used have series.", clientbook.MaxNameLen, clientbook.Unknown, clientbook.MaxNames, clientbook.Other)

// callMetrics writes the servers' call metrics (package telemetry).
// callMetrics exports the call metrics of servers: each configured
// server's, and a removed server's while it still drains (its last calls
// count there, or in the series of a server added again under its name,
// which continues it).
func callMetrics(m *expo, servers []fleet.ServerTelemetry) {
	m.family("mcpvisor_server_calls_total", "counter", "Client requests that reached each server, by how they ended: ok; tool_error (a tools/call result with isError true); protocol_error (a JSON-RPC error response); timeout (mcpvisor's request timeout fired); cancelled (the client cancelled or went away, or its session ended); unavailable (the server could not be started, was stopped or removed, or went away while it served the request).")
	for _, srv := range servers {
		calls := srv.Tel.Calls()
		for o := range telemetry.NumOutcomes {
			m.sample("mcpvisor_server_calls_total", labels("server", srv.Name, "outcome", o.String()), float64(calls[o]))
		}
	}
	m.family("mcpvisor_server_relayed_bytes_total", "counter", "Bytes of JSON relayed for the client requests to each server: params sent to it (direction to_server), results and errors it sent back (to_client).")
	for _, srv := range servers {
		sent, received := srv.Tel.Bytes()
		m.sample("mcpvisor_server_relayed_bytes_total", labels("server", srv.Name, "direction", "to_server"), float64(sent))
		m.sample("mcpvisor_server_relayed_bytes_total", labels("server", srv.Name, "direction", "to_client"), float64(received))
	}
	const op = "mcp_server_operation_duration_seconds"
	m.family(op, "histogram", "Duration of the client requests to each server, from their arrival to their response (a start or wake of the server included; OpenTelemetry's mcp.server.operation.duration), by mcp_method_name, gen_ai_tool_name (tools/call: a tool the server lists, else _OTHER) and error_type (a failure: tool_error, timeout, cancelled, unavailable, or a protocol error's JSON-RPC code, -32700 to -32603, else _OTHER).")
	for _, srv := range servers {
		for _, o := range srv.Tel.Ops() {
			kv := []string{"server", srv.Name, "mcp_method_name", o.Method}
			if o.Tool != "" {
				kv = append(kv, "gen_ai_tool_name", o.Tool)
			}
			if o.ErrorType != "" {
				kv = append(kv, "error_type", o.ErrorType)
			}
			m.histogram(op, kv, o.Hist)
		}
	}
	m.family("mcpvisor_server_spawn_duration_seconds", "histogram", "Time each server's processes took to start and answer initialize: starts on demand (first start, wake, the operator's start) and restarts after a crash (from the end of the restart's delay).")
	for _, srv := range servers {
		m.histogram("mcpvisor_server_spawn_duration_seconds", []string{"server", srv.Name}, srv.Tel.Spawns())
	}
	m.family("mcpvisor_server_wake_duration_seconds", "histogram", "Time each server took to wake: from a request to a dormant server to the server ready.")
	for _, srv := range servers {
		m.histogram("mcpvisor_server_wake_duration_seconds", []string{"server", srv.Name}, srv.Tel.Wakes())
	}
}

// histogram writes the series of one histogram with the labels kv.
func (m *expo) histogram(name string, kv []string, h telemetry.HistogramSnapshot) {
	le := append(slices.Clip(kv), "le", "")
	for i, c := range h.Cumulative {
		if i < len(h.Bounds) {
			le[len(le)-1] = strconv.FormatFloat(h.Bounds[i], 'g', -1, 64)
		} else {
			le[len(le)-1] = "+Inf"
		}
		m.sample(name+"_bucket", labels(le...), float64(c))
	}
	l := labels(kv...)
	m.sample(name+"_sum", l, h.Sum)
	m.sample(name+"_count", l, float64(h.Count))
}

// expo writes the text exposition format.
type expo struct{ w *bufio.Writer }

func (m *expo) family(name, typ, help string) {
	fmt.Fprintf(m.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (m *expo) sample(name, labels string, v float64) {
	m.w.WriteString(name)
	m.w.WriteString(labels)
	m.w.WriteByte(' ')
	m.w.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	m.w.WriteByte('\n')
}

// labels renders name/value pairs as {a="x",b="y"}, values escaped.
func labels(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// limitValue is what v reads of s's limits, 0 when it has none.
func limitValue(s fleet.Status, v func(*fleet.LimitsStatus) float64) float64 {
	if s.Limits == nil {
		return 0
	}
	return v(s.Limits)
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli()) / 1000
}

// TeamStats are the counts of team identity's parts: the audit (when
// one is configured), the rate limits (when set) and the policy's
// denials.
type TeamStats struct {
	Audit          *audit.Stats // nil: no audit
	AuditAccepting bool
	Limits         *ratelimit.Stats // nil: no rate limits
	Denied         uint64
	// ScopeRefused: calls through /mcp refused for a server scope the
	// token lacked; AuditRefused: calls refused while a failClosed audit
	// could not keep up; ReceiverRefused: calls another replica
	// forwarded here refused because that replica, whose rate limits
	// govern them, could not be asked.
	ScopeRefused, AuditRefused, ReceiverRefused uint64
}

// teamMetrics writes st's families.
func teamMetrics(m *expo, st TeamStats) {
	m.family("mcpvisor_policy_denied_total", "counter", "Requests the policy denied (each also an audit line, when an audit is configured).")
	m.sample("mcpvisor_policy_denied_total", "", float64(st.Denied))
	m.family("mcpvisor_receiver_unasked_total", "counter", "Calls another replica forwarded here, refused because that replica, whose audit and rate limits govern them, could not be asked (its link ended, the call's time ran out or its client went away).")
	m.sample("mcpvisor_receiver_unasked_total", "", float64(st.ReceiverRefused))
	m.family("mcpvisor_scope_refused_total", "counter", "Calls through /mcp refused (403 insufficient_scope) because the token lacked a scope their server requires (auth.serverScopes).")
	m.sample("mcpvisor_scope_refused_total", "", float64(st.ScopeRefused))
	if a := st.Audit; a != nil {
		m.family("mcpvisor_audit_records_total", "counter", "Audit records by what became of them: written to the audit file, dropped (its queue was full: the audit could not keep up), failed (the file could not be written).")
		m.sample("mcpvisor_audit_records_total", labels("result", "written"), float64(a.Written))
		m.sample("mcpvisor_audit_records_total", labels("result", "dropped"), float64(a.Dropped))
		m.sample("mcpvisor_audit_records_total", labels("result", "failed"), float64(a.Failed))
		m.family("mcpvisor_audit_queue_length", "gauge", "Audit records waiting to be written.")
		m.sample("mcpvisor_audit_queue_length", "", float64(a.Queued))
		m.family("mcpvisor_audit_accepting", "gauge", "1 while the audit takes records; 0 while, with failClosed, calls are refused because it cannot keep up.")
		m.sample("mcpvisor_audit_accepting", "", bool01(st.AuditAccepting))
		m.family("mcpvisor_audit_refused_total", "counter", "Calls refused (with failClosed) while the audit could not keep up; they have no audit line.")
		m.sample("mcpvisor_audit_refused_total", "", float64(st.AuditRefused))
	}
	if l := st.Limits; l != nil {
		m.family("mcpvisor_ratelimit_limited_total", "counter", "Calls refused by a rate limit (HTTP 429, or JSON-RPC -32013), by the limit: identity or tool (per identity and tool).")
		m.sample("mcpvisor_ratelimit_limited_total", labels("scope", "identity"), float64(l.LimitedIdentity))
		m.sample("mcpvisor_ratelimit_limited_total", labels("scope", "tool"), float64(l.LimitedTool))
		m.family("mcpvisor_ratelimit_buckets", "gauge", "Token buckets kept, by kind.")
		m.sample("mcpvisor_ratelimit_buckets", labels("kind", "identity"), float64(l.Identities))
		m.sample("mcpvisor_ratelimit_buckets", labels("kind", "tool"), float64(l.Tools))
		m.family("mcpvisor_ratelimit_evicted_total", "counter", "Token buckets dropped before they were full, to keep the number kept bounded.")
		m.sample("mcpvisor_ratelimit_evicted_total", "", float64(l.Evicted))
	}
}
