// Package event declares the kinds of lifecycle event mcpvisor emits
// (fleet.Event's type): the fleet emits most, the catalog those about a
// server's lists and definitions, the command those about reloads. It is
// its own package because all three name them and the fleet imports the
// catalog. docs/events.md documents each kind; a test keeps the two
// alike.
package event

// Kind is an event's type, as /api/events sends it.
type Kind string

// The kinds, in the order /metrics and docs/events.md list them.
const (
	Started             Kind = "started"
	Dormant             Kind = "dormant"
	Respawned           Kind = "respawned"
	Exited              Kind = "exited"
	Restarted           Kind = "restarted"
	Failed              Kind = "failed"
	Stopped             Kind = "stopped"
	Restarting          Kind = "restarting"
	OperatorStop        Kind = "operator-stop"
	OperatorRestart     Kind = "operator-restart"
	ReloadDrained       Kind = "reload-drained"
	DefinitionsChanged  Kind = "definitions_changed"
	DefinitionsApproved Kind = "definitions_approved"
	ToolsLost           Kind = "tools_lost"
	ToolsLostAccepted   Kind = "tools_lost_accepted"
	ToolsRestored       Kind = "tools_restored"
	NeedsLogin          Kind = "needs-login"
	LoggedIn            Kind = "logged-in"
	LoggedOut           Kind = "logged-out"
	Reloaded            Kind = "reloaded"
	ReloadRejected      Kind = "reload-rejected"
)

// kinds lists every kind, in order.
var kinds = [...]Kind{
	Started, Dormant, Respawned, Exited, Restarted, Failed, Stopped,
	Restarting, OperatorStop, OperatorRestart, ReloadDrained,
	DefinitionsChanged, DefinitionsApproved, ToolsLost, ToolsLostAccepted, ToolsRestored,
	NeedsLogin, LoggedIn, LoggedOut, Reloaded, ReloadRejected,
}

// Kinds returns every kind, in order.
func Kinds() []Kind { return kinds[:] }

// OfServer tells whether events of kind k are about one server (their
// Server is set); the others (reloads) are about mcpvisor as a whole.
func (k Kind) OfServer() bool { return k != Reloaded && k != ReloadRejected }
