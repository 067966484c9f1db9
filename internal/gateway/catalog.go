package gateway

import (
	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// The lists the gateway serves; each server's catalog keeps them.
var (
	kindTools     = catalog.Tools
	kindPrompts   = catalog.Prompts
	kindResources = catalog.Resources
	kindTemplates = catalog.Templates
)

// ListsChanged is the fleet's report that a server's cached lists changed
// (fleet.Options.OnListsChanged): the aggregated tables are rebuilt on
// next use, and every session that sees the server is told, once per
// notification.
func (g *Gateway) ListsChanged(s *fleet.Server, kinds []catalog.ListKind) {
	g.agg.invalidate()
	g.tell(s, kinds)
}

// Reloaded is the fleet's report that a reload changed its servers or
// their settings: the aggregated tables, and what routes skills and the
// views results named, are rebuilt on next use (the sessions whose lists changed are told by
// ListsChanged, server by server), and the client and interest books drop
// the servers it removed.
func (g *Gateway) Reloaded() {
	g.agg.invalidate()
	g.skills.reset()
	g.agg.forgetViews()
	g.clients.Sweep()
	g.interests.Sweep()
}

// tell sends every session that sees s, and every listener that opted
// in, the list_changed notifications of kinds, once per notification.
func (g *Gateway) tell(s *fleet.Server, kinds []catalog.ListKind) {
	sent := map[string]bool{}
	for _, k := range kinds {
		n := k.ListChanged()
		if sent[n] {
			continue
		}
		sent[n] = true
		for _, sess := range g.reg.sessionsFor(s) {
			_ = sess.Out().Send(&rpc.Message{Method: n})
		}
		g.tellListeners(s, n)
	}
}
