package gateway

import (
	"encoding/json"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// tasksExtension is the tasks extension's identifier (SEP-2663), which
// 2026-07-28 servers and clients negotiate.
const tasksExtension = "io.modelcontextprotocol/tasks"

// tasksCaps adds to caps (and ext, the extensions) what the aggregated
// endpoint offers of tasks, from the servers' initialize results.
func tasksCaps(inits []*fleet.InitResult, modern bool, caps, ext map[string]json.RawMessage) {}
