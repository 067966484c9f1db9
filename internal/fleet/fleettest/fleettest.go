// Package fleettest holds what tests of the fleet's users need and no
// command does: an initialize result made from JSON, for a test that puts
// one where a server's would be (the gateway may not import the backend,
// tests included).
package fleettest

import (
	"encoding/json"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// ParseInit decodes an initialize result, as a server sent it or as it was
// cached.
func ParseInit(raw json.RawMessage) (*fleet.InitResult, error) { return backend.ParseInit(raw) }
