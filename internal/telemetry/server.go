// Package telemetry owns mcpvisor's per-server call metrics — calls by
// outcome, the call duration histogram by method, tool and error type,
// bytes relayed, spawn and wake durations — and its optional OpenTelemetry
// tracing. The fleet makes one Server per configured server and drops it
// with the server; the gateway records every client request that reaches
// a server into it; the admin API reads it for /metrics and /api/servers.
//
// Names follow the OpenTelemetry semantic conventions for MCP where they
// define one (mcp.server.operation.duration, mcp.method.name,
// gen_ai.tool.name, error.type), mapped to Prometheus names the way the
// OpenTelemetry Prometheus exporter maps them (dots become underscores,
// the unit a suffix). Cardinality is bounded: a tool is a label value only
// while the server lists it, any other name is folded into Other, and an
// unknown method likewise.
package telemetry

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Outcome is how a client request to a server ended: every request that
// reaches the gateway's forward path ends in exactly one.
type Outcome uint8

const (
	// OK: the server answered with a result (a tools/call result with
	// isError true is ToolError).
	OK Outcome = iota
	// ToolError: a tools/call result with isError true.
	ToolError
	// ProtocolError: a JSON-RPC error response (from the server, or
	// mcpvisor's own for a method the server's revision lacks or an
	// answer too large to relay).
	ProtocolError
	// Timeout: mcpvisor's request timeout fired.
	Timeout
	// Cancelled: the client cancelled the request, went away, or its
	// session ended (mcpvisor's shutdown included).
	Cancelled
	// Unavailable: the server could not be started or leased (stopped,
	// removed, failing, at its instance limit), or went away while it
	// served the request.
	Unavailable
	// NumOutcomes is the number of outcomes.
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{"ok", "tool_error", "protocol_error", "timeout", "cancelled", "unavailable"}

// String is the outcome's label value: ok, tool_error, protocol_error,
// timeout, cancelled, unavailable.
func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Other is the label value every tool the server does not list, and
// every method not in Methods, is folded into.
const Other = "_OTHER"

// Methods are the methods a call is labelled with by name; any other is
// labelled Other.
var Methods = []string{
	"completion/complete", "initialize", "logging/setLevel", "ping",
	"prompts/get", "prompts/list", "resources/list", "resources/read",
	"resources/subscribe", "resources/templates/list", "resources/unsubscribe",
	"server/discover", "subscriptions/listen", "tools/call", "tools/list",
}

// MethodLabel is method as a label value or span name: method itself if
// it is one of Methods, else Other.
func MethodLabel(method string) string {
	if i, ok := methodIndex[method]; ok {
		return Methods[i]
	}
	return Other
}

// methodName is the label of method slot i: Methods[i], or Other.
func methodName(i int) string {
	if i < len(Methods) {
		return Methods[i]
	}
	return Other
}

// methodOrder is the method slots in the order of their labels.
var methodOrder = func() []int {
	order := make([]int, len(Methods)+1)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(methodName(a), methodName(b)) })
	return order
}()

var methodIndex = func() map[string]int {
	m := make(map[string]int, len(Methods))
	for i, name := range Methods {
		m[name] = i
	}
	return m
}()

// errorType is the error.type of a call: none for OK, the outcome for the
// others, and for a protocol error its JSON-RPC code when it is one of
// JSON-RPC's own, else Other.
type errorType uint8

const (
	etNone errorType = iota
	etToolError
	etTimeout
	etCancelled
	etUnavailable
	etParse          // -32700
	etInvalidRequest // -32600
	etMethodNotFound // -32601
	etInvalidParams  // -32602
	etInternal       // -32603
	etOther
	numErrorTypes
)

var errorTypeNames = [numErrorTypes]string{"", "tool_error", "timeout", "cancelled", "unavailable", "-32700", "-32600", "-32601", "-32602", "-32603", Other}

// ErrorType is the error.type attribute of a call that ended with o (and,
// for a ProtocolError, JSON-RPC error code code): "" for OK.
func ErrorType(o Outcome, code int) string { return errorTypeNames[errorTypeOf(o, code)] }

func errorTypeOf(o Outcome, code int) errorType {
	switch o {
	case OK:
		return etNone
	case ToolError:
		return etToolError
	case Timeout:
		return etTimeout
	case Cancelled:
		return etCancelled
	case Unavailable:
		return etUnavailable
	}
	switch code {
	case -32700:
		return etParse
	case -32600:
		return etInvalidRequest
	case -32601:
		return etMethodNotFound
	case -32602:
		return etInvalidParams
	case -32603:
		return etInternal
	}
	return etOther
}

// Call is one client request to a server, as it ended.
type Call struct {
	Method string
	// Tool is, for tools/call, the tool's name as the server knows it
	// (bytes: a relay has it as bytes of the request, and a string of
	// them would be allocated); Tools is the server's cached tool list
	// (nil when not known): the tool is a label value only if the list
	// has it.
	Tool  []byte
	Tools []json.RawMessage
	// Outcome is how it ended; Code, for a ProtocolError, the JSON-RPC
	// error code.
	Outcome Outcome
	Code    int
	// Duration is from the request's arrival at the gateway's forward
	// path (before any start of the server) to its response.
	Duration time.Duration
	// Sent is the bytes of params sent to the server, Received those of
	// the result or error it sent back.
	Sent, Received int
}

// Server is one configured server's metrics. All its methods are safe for
// concurrent use; Record allocates nothing once a series exists. A server
// that never served costs a few words: every series is made on its first
// observation, and the call metrics on the first call (most servers of a
// fleet start once, to be learned, and serve no client before they sleep).
type Server struct {
	spawn startHistogram
	wake  startHistogram
	c     atomic.Pointer[callMetrics] // nil before the first call
}

// callMetrics are a server's call metrics.
type callMetrics struct {
	calls    [NumOutcomes]atomic.Uint64
	sent     atomic.Uint64
	received atomic.Uint64

	methods atomic.Pointer[methodSlots]
	tools   atomic.Pointer[toolIndex]
	otherT  atomic.Pointer[opSlot] // tools/call of a tool the server does not list
	toolsMu sync.Mutex
}

func newCallMetrics() *callMetrics { return &callMetrics{} }

// callMetrics are the server's call metrics, made if need be.
func (s *Server) callMetrics() *callMetrics { return lazy(&s.c, newCallMetrics) }

// methodSlots are the slots of the methods, by index in Methods, then
// Other; tools/call's is unused (its calls are counted by tool).
type methodSlots [numMethods + 1]atomic.Pointer[opSlot]

// numMethods is len(Methods) (checked at init).
const numMethods = 15

func init() {
	if len(Methods) != numMethods {
		panic("telemetry: numMethods is not len(Methods)")
	}
}

// opSlot holds the duration histograms of one method or tool, by error
// type, each made on its first observation; a tool's slot has its name.
type opSlot struct {
	h    [numErrorTypes]atomic.Pointer[Histogram]
	name string
}

func (s *opSlot) observe(et errorType, d time.Duration) {
	lazy(&s.h[et], newOperationHistogram).Observe(d)
}

func newOperationHistogram() *Histogram { return newHistogram(operationLayout) }
func newStartHistogram() *Histogram     { return newHistogram(startLayout) }
func newSlot() *opSlot                  { return &opSlot{} }
func newMethodSlots() *methodSlots      { return &methodSlots{} }

// lazy is what p points to, made by mk and stored first if p is nil.
func lazy[T any](p *atomic.Pointer[T], mk func() *T) *T {
	if v := p.Load(); v != nil {
		return v
	}
	p.CompareAndSwap(nil, mk())
	return p.Load()
}

// toolIndex is the slot of each tool of one tool list, known by its first
// item and length (the fleet's cached list is the same slice until it is
// learned again).
type toolIndex struct {
	first  *json.RawMessage
	n      int
	byName map[string]*opSlot
	names  []string // sorted
}

// NewServer returns a server's metrics, all zero.
func NewServer() *Server { return &Server{} }

// Record counts one call.
func (s *Server) Record(c Call) { s.callMetrics().record(c) }

func (s *callMetrics) record(c Call) {
	s.calls[min(c.Outcome, NumOutcomes-1)].Add(1)
	if c.Sent > 0 {
		s.sent.Add(uint64(c.Sent))
	}
	if c.Received > 0 {
		s.received.Add(uint64(c.Received))
	}
	et := errorTypeOf(c.Outcome, c.Code)
	if c.Method == "tools/call" {
		s.toolSlot(c.Tool, c.Tools).observe(et, c.Duration)
		return
	}
	i, ok := methodIndex[c.Method]
	if !ok {
		i = len(Methods)
	}
	lazy(&lazy(&s.methods, newMethodSlots)[i], newSlot).observe(et, c.Duration)
}

// toolSlot is the slot of the tool named tool when tools lists it, else
// the Other slot.
func (s *callMetrics) toolSlot(tool []byte, tools []json.RawMessage) *opSlot {
	if len(tools) == 0 || len(tool) == 0 {
		return lazy(&s.otherT, newSlot)
	}
	idx := s.tools.Load()
	if idx == nil || idx.first != &tools[0] || idx.n != len(tools) {
		idx = s.reindex(tools)
	}
	if slot := idx.byName[string(tool)]; slot != nil { // looked up without a copy
		return slot
	}
	return lazy(&s.otherT, newSlot)
}

// ToolLabel is tool as a label value or in a span name: the server's name
// for it if tools (its cached list) has it, else Other — as Record labels
// it. It allocates nothing once the list is indexed.
func (s *Server) ToolLabel(tool []byte, tools []json.RawMessage) string {
	if slot := s.callMetrics().toolSlot(tool, tools); slot.name != "" {
		return slot.name
	}
	return Other
}

// reindex makes the index of tools, keeping the slots (and so the counts)
// of the tools the previous index had. A tool named Other is folded into
// Other.
func (s *callMetrics) reindex(tools []json.RawMessage) *toolIndex {
	s.toolsMu.Lock()
	defer s.toolsMu.Unlock()
	old := s.tools.Load()
	if old != nil && old.first == &tools[0] && old.n == len(tools) {
		return old // another caller made it meanwhile
	}
	idx := &toolIndex{first: &tools[0], n: len(tools), byName: make(map[string]*opSlot, len(tools))}
	for _, t := range tools {
		name, _ := rpc.StringMember(t, "name")
		if name == "" || name == Other || idx.byName[name] != nil {
			continue
		}
		var slot *opSlot
		if old != nil {
			slot = old.byName[name]
		}
		if slot == nil {
			slot = &opSlot{name: name}
		}
		idx.byName[name] = slot
		idx.names = append(idx.names, name)
	}
	slices.Sort(idx.names)
	s.tools.Store(idx)
	return idx
}

// ObserveSpawn counts a start of one of the server's processes that took d
// (from the start's beginning to the server's answer to initialize).
func (s *Server) ObserveSpawn(d time.Duration) { s.spawn.observe(d) }

// ObserveWake counts a start of a dormant server (dormant → ready) that
// took d.
func (s *Server) ObserveWake(d time.Duration) { s.wake.observe(d) }

// Spawns is the spawn duration histogram.
func (s *Server) Spawns() HistogramSnapshot { return s.spawn.snapshot() }

// Wakes is the wake duration histogram.
func (s *Server) Wakes() HistogramSnapshot { return s.wake.snapshot() }

// startHistogram is a start duration histogram (startLayout) that keeps
// its first observation in a word of its own, and makes the buckets only
// for a second: most servers of a fleet start once (learned, then
// dormant) or never, and a histogram costs 160 bytes.
type startHistogram struct {
	first atomic.Int64 // the first observation in nanoseconds, plus 1; 0 before it
	rest  atomic.Pointer[Histogram]
}

// betweenReads, when set (by tests), runs between the two reads of a
// startHistogram's snapshot.
var betweenReads func()

func (h *startHistogram) observe(d time.Duration) {
	d = max(d, 0)
	if h.first.Load() == 0 && h.first.CompareAndSwap(0, int64(d)+1) {
		return
	}
	lazy(&h.rest, newStartHistogram).Observe(d)
}

// snapshot reads the histogram. It reads the rest before the first: an
// observation among the rest was made after the first was stored, so a
// snapshot never counts a later observation without the first.
func (h *startHistogram) snapshot() HistogramSnapshot {
	counts := make([]uint64, len(startLayout.durs)+1)
	var sum int64
	if r := h.rest.Load(); r != nil {
		for i := range r.counts {
			counts[i] = r.counts[i].Load()
		}
		sum = r.sum.Load()
	}
	if betweenReads != nil {
		betweenReads()
	}
	if f := h.first.Load(); f != 0 {
		counts[startLayout.bucket(time.Duration(f-1))]++
		sum += f - 1
	}
	return snapshotOfCounts(startLayout, counts, sum)
}

// Calls counts the server's calls by outcome.
func (s *Server) Calls() [NumOutcomes]uint64 {
	var out [NumOutcomes]uint64
	c := s.c.Load()
	if c == nil {
		return out
	}
	for i := range out {
		out[i] = c.calls[i].Load()
	}
	return out
}

// CallCounts counts a server's calls by outcome, as /api/servers shows
// them.
type CallCounts struct {
	OK            uint64 `json:"ok"`
	ToolError     uint64 `json:"toolError"`
	ProtocolError uint64 `json:"protocolError"`
	Timeout       uint64 `json:"timeout"`
	Cancelled     uint64 `json:"cancelled"`
	Unavailable   uint64 `json:"unavailable"`
}

// CallCounts is Calls as a CallCounts.
func (s *Server) CallCounts() CallCounts {
	c := s.Calls()
	return CallCounts{OK: c[OK], ToolError: c[ToolError], ProtocolError: c[ProtocolError], Timeout: c[Timeout], Cancelled: c[Cancelled], Unavailable: c[Unavailable]}
}

// Bytes is what was relayed: params sent to the server, results and
// errors received from it.
func (s *Server) Bytes() (sent, received uint64) {
	if c := s.c.Load(); c != nil {
		return c.sent.Load(), c.received.Load()
	}
	return 0, 0
}

// Op is one series of the call duration histogram.
type Op struct {
	Method    string
	Tool      string // tools/call only: a listed tool, or Other
	ErrorType string // "" for calls that succeeded
	Hist      HistogramSnapshot
}

// Ops lists the series of the call duration histogram that have counted a
// call, by method, tool and error type. A tool the server no longer lists
// is left out (its calls are counted from then on under Other).
func (s *Server) Ops() []Op {
	var out []Op
	c := s.c.Load()
	if c == nil {
		return out
	}
	add := func(method, tool string, slot *opSlot) {
		if slot == nil {
			return
		}
		for et := range slot.h {
			if h := slot.h[et].Load(); h != nil {
				out = append(out, Op{Method: method, Tool: tool, ErrorType: errorTypeNames[et], Hist: h.Snapshot()})
			}
		}
	}
	slots := c.methods.Load()
	for _, i := range methodOrder {
		name := methodName(i)
		switch {
		case name == "tools/call":
			if t := c.tools.Load(); t != nil {
				for _, tool := range t.names {
					add(name, tool, t.byName[tool])
				}
			}
			add(name, Other, c.otherT.Load())
		case slots != nil:
			add(name, "", slots[i].Load())
		}
	}
	return out
}
