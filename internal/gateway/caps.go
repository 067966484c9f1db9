package gateway

import (
	"context"
	"encoding/json"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// caps are the aggregated endpoint's capabilities: mcpvisor's own
// (aggregateCaps), with what its servers offer that /mcp carries through
// — the tasks extension (tasks.go) and the skills extension (skills.go)
// —, from the servers' initialize results. A server whose result is not
// known (it never ran, and nothing is cached) is learned first, by
// building the tools table, which starts such servers (bounded, as
// tools/list does): a client that reads the capabilities before it lists
// anything learns what its servers offer. modern: for server/discover (a
// 2026-07-28 client), else for a legacy initialize.
func (a *aggregate) caps(ctx context.Context, modern bool) json.RawMessage {
	var inits []*fleet.InitResult
	// A per-session server's instance for a 2026-07-28 request ends with
	// it: such requests are not offered its tasks (serverEra).
	var taskInits []*fleet.InitResult
	a.eachInit(ctx, func(srv *fleet.Server, in *fleet.InitResult) {
		inits = append(inits, in)
		if !modern || !srv.Config().PerSession() {
			taskInits = append(taskInits, in)
		}
	})
	var caps map[string]json.RawMessage
	if err := json.Unmarshal(aggregateCaps, &caps); err != nil {
		panic(err)
	}
	ext := map[string]json.RawMessage{}
	tasksCaps(taskInits, modern, caps, ext)
	if c := skillsCap(inits); c != nil {
		ext[skillsExtension] = c
	}
	if len(ext) > 0 {
		caps["extensions"] = mustJSON(ext)
	}
	return mustJSON(caps)
}

// eachInit calls f with each server of the fleet, in its order, whose
// initialize result is known, and that result. A server whose result is
// not known (it never ran, and nothing is cached) is learned first, by
// building the tools table once for all of them.
func (a *aggregate) eachInit(ctx context.Context, f func(*fleet.Server, *fleet.InitResult)) {
	learned := false
	for _, srv := range a.g.fleet.Servers() {
		in := srv.Catalog().KnownInit()
		if in == nil && !learned {
			a.table(ctx, kindTools) // once, for all the unknown
			learned = true
			in = srv.Catalog().KnownInit()
		}
		if in != nil {
			f(srv, in)
		}
	}
}

// serverCaps is the capabilities object of in, decoded one level (nil if
// it has none).
func serverCaps(in *fleet.InitResult) map[string]json.RawMessage {
	var caps map[string]json.RawMessage
	_ = json.Unmarshal(in.Capabilities, &caps)
	return caps
}

// serverExtension is the settings in's capabilities give the extension
// id, or nil when it declares none.
func serverExtension(in *fleet.InitResult, id string) json.RawMessage {
	var ext map[string]json.RawMessage
	_ = json.Unmarshal(serverCaps(in)["extensions"], &ext)
	return ext[id]
}
