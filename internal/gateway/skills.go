package gateway

import (
	"context"
	"encoding/json"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// skillsExtension is the skills extension's identifier (SEP-2640).
const skillsExtension = "io.modelcontextprotocol/skills"

// skillsCap is the skills extension's settings on the aggregated
// endpoint, merged from the servers' (inits), or nil when none offers it.
func skillsCap(inits []*fleet.InitResult) json.RawMessage { return nil }

// skillsList answers skills/list on the aggregated endpoint.
func (a *aggregate) skillsList(ctx context.Context, w sender, m *rpc.Message, related Sink) *rpc.Message {
	return a.unknown(ctx, w, m, related)
}

// skillServer is the server that serves the skill file or directory uri,
// or nil.
func (a *aggregate) skillServer(ctx context.Context, uri string) *fleet.Server { return nil }
