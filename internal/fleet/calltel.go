package fleet

import (
	"slices"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// ServerTelemetry is one server's call metrics under its name, for export.
type ServerTelemetry struct {
	Name string
	Tel  *telemetry.Server
}

// CallTelemetry lists, by name, the call metrics to export: each
// configured server's, and each removed server's while it still drains —
// its calls in flight end after the reload and are counted there, not
// lost with it — unless a server configured again under its name
// continues them.
func (f *Fleet) CallTelemetry() []ServerTelemetry {
	servers := f.Servers()
	out := make([]ServerTelemetry, 0, len(servers))
	current := make(map[string]bool, len(servers))
	for _, s := range servers {
		out = append(out, ServerTelemetry{Name: s.Name(), Tel: s.Telemetry()})
		current[s.Name()] = true
	}
	f.telMu.Lock()
	for name, t := range f.removedTel {
		if !current[name] {
			out = append(out, ServerTelemetry{Name: name, Tel: t})
		}
	}
	f.telMu.Unlock()
	slices.SortFunc(out, func(a, b ServerTelemetry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// removedTelemetry keeps the call metrics of s, which a reload removes,
// exported until drainedTelemetry.
func (f *Fleet) removedTelemetry(s *Server) {
	f.telMu.Lock()
	defer f.telMu.Unlock()
	if f.removedTel == nil {
		f.removedTel = map[string]*telemetry.Server{}
	}
	f.removedTel[s.Name()] = s.Telemetry()
}

// drainedTelemetry stops exporting the call metrics of removed server s
// (its drain is over), unless a later removal under its name keeps others.
func (f *Fleet) drainedTelemetry(s *Server) {
	f.telMu.Lock()
	defer f.telMu.Unlock()
	if f.removedTel[s.Name()] == s.tel.Load() {
		delete(f.removedTel, s.Name())
	}
}

// continueTelemetry gives s, a server a reload adds, the call metrics of
// a removed server of its name that still drains: one series goes on.
func (f *Fleet) continueTelemetry(s *Server) {
	f.telMu.Lock()
	defer f.telMu.Unlock()
	if t := f.removedTel[s.Name()]; t != nil {
		s.tel.Store(t)
	}
}
