package event

import (
	"reflect"
	"strings"
	"time"
)

// Details is what an event says besides its kind: one struct type per
// kind (below), whose fields' JSON names are the keys of the event's
// details. A field tagged omitempty is left out when it is zero (an empty
// text or list, a nil pointer); a pointer stands for a value that may be
// zero and is still reported (an exit code 0).
type Details interface {
	Kind() Kind
}

// StartedDetails: a first start, handshake done.
type StartedDetails struct {
	PID     int   `json:"pid"`
	StartMs int64 `json:"startMs"` // the start, handshake included
}

// DormantDetails: stopped for idleness (or by the operator, or for the
// memory it held while idle).
type DormantDetails struct {
	PID          int       `json:"pid"`
	IdleSeconds  float64   `json:"idleSeconds"`
	LastActivity time.Time `json:"lastActivity"`
	By           string    `json:"by,omitempty"`     // "operator" when asked; none for idleness
	Reason       string    `json:"reason,omitempty"` // "maxIdleMemory" when put to sleep early
	MemoryBytes  uint64    `json:"memoryBytes,omitempty"`
	// MaxIdleMemoryBytes is the setting MemoryBytes went over.
	MaxIdleMemoryBytes uint64 `json:"maxIdleMemoryBytes,omitempty"`
	Error              string `json:"error,omitempty"` // the stop's
}

// RespawnedDetails: started again from dormant.
type RespawnedDetails struct {
	PID            int     `json:"pid"`
	DormantSeconds float64 `json:"dormantSeconds"`
	RespawnMs      float64 `json:"respawnMs"`
}

// ExitedDetails: the connection ended unasked (the process exited, or a
// remote server's connection broke).
type ExitedDetails struct {
	Error            string   `json:"error"`
	Stage            string   `json:"stage"`
	PID              int      `json:"pid,omitempty"`
	Code             *int     `json:"code,omitempty"`
	Signal           string   `json:"signal,omitempty"`
	ExitKind         string   `json:"kind,omitempty"` // "oom": its memory limit killed it
	OOMKills         int      `json:"oomKills,omitempty"`
	MemoryLimitBytes uint64   `json:"memoryLimitBytes,omitempty"` // with OOMKills, when configured
	PIDsLimitHits    int      `json:"pidsLimitHits,omitempty"`
	StopStep         string   `json:"stopStep,omitempty"`
	Stderr           []string `json:"stderr,omitempty"`
}

// RestartedDetails: started again by the restart policy.
type RestartedDetails struct {
	PID int `json:"pid"`
}

// FailedDetails: a start failed, or the restart policy gave up.
type FailedDetails struct {
	Error  string   `json:"error"`
	Stage  *string  `json:"stage,omitempty"` // a start's: where it failed (empty too); nil: the policy gave up
	Stderr []string `json:"stderr,omitempty"`
}

// StoppedDetails: a running instance stopped by mcpvisor (shutdown, its
// session ended, a stop that raced its start).
type StoppedDetails struct {
	PID    *int     `json:"pid,omitempty"` // nil: no process was running (0 is said: a stop that raced its start)
	Reason string   `json:"reason,omitempty"`
	StopMs *float64 `json:"stopMs,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// RestartingDetails: the restart policy begins another attempt.
type RestartingDetails struct {
	Attempt int    `json:"attempt"`
	DelayMs int64  `json:"delayMs"`
	Error   string `json:"error,omitempty"` // the cause
}

// Drain is how a server's instances were taken out of service.
type Drain struct {
	Instances int    `json:"instances"`       // stopped
	Cut       int    `json:"cut,omitempty"`   // stopped with calls still in flight
	Error     string `json:"error,omitempty"` // what went wrong stopping them
}

// OperatorStopDetails: the operator stopped the server; its drain ended.
type OperatorStopDetails struct{ Drain }

// OperatorRestartDetails: the operator restarted the server; the old
// instances' drain ended.
type OperatorRestartDetails struct{ Drain }

// ReloadDrainedDetails: a reload removed or relaunched the server; the
// old instances' drain ended.
type ReloadDrainedDetails struct {
	Drain
	Reason string `json:"reason"`
}

// DefinitionRef names one definition (its kind: tool, prompt, ...).
type DefinitionRef struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// ChangedDefinition is a definition that changed, with the fields that did.
type ChangedDefinition struct {
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	Fields []string `json:"fields"`
}

// DefinitionsChangedDetails: the server's definitions changed.
type DefinitionsChangedDetails struct {
	Added   []DefinitionRef     `json:"added"`
	Removed []DefinitionRef     `json:"removed"`
	Changed []ChangedDefinition `json:"changed"`
	Held    []string            `json:"held"`              // the tools a pinned server holds back
	Session string              `json:"session,omitempty"` // seen in this session's own list
}

// DefinitionsApprovedDetails: the operator approved held tools.
type DefinitionsApprovedDetails struct {
	Approved []string `json:"approved"`
}

// ToolsLostDetails: the server listed no tools where it had some.
type ToolsLostDetails struct {
	Previous int `json:"previous"`
}

// ToolsLostAcceptedDetails: the operator accepted the loss.
type ToolsLostAcceptedDetails struct {
	Previous int `json:"previous"`
}

// ToolsRestoredDetails: the server lists tools again.
type ToolsRestoredDetails struct {
	Tools int `json:"tools"`
}

// NeedsLoginDetails: a remote server cannot be authorized until the user
// logs in (mcpvisor login, the dashboard): its requests are refused at
// once meanwhile.
type NeedsLoginDetails struct {
	Reason string `json:"reason"`           // no credentials, refresh token expired or revoked, insufficient scope, …
	Issuer string `json:"issuer,omitempty"` // its authorization server, when known
	Scope  string `json:"scope,omitempty"`  // the scope a step-up asks for
}

// LoggedInDetails: a remote server's login succeeded. Never a token.
type LoggedInDetails struct {
	Issuer  string    `json:"issuer,omitempty"`
	Subject string    `json:"subject,omitempty"` // who, when the authorization server says
	Scopes  string    `json:"scopes,omitempty"`  // granted, space-separated
	Expires time.Time `json:"expires,omitzero"`  // the access token's expiry
}

// LoggedOutDetails: a remote server's tokens were forgotten.
type LoggedOutDetails struct {
	Issuer string `json:"issuer,omitempty"`
}

// ReloadedDetails: a configuration reload was applied.
type ReloadedDetails struct {
	Trigger      string         `json:"trigger"` // api, signal, watch
	Applied      bool           `json:"applied"`
	Servers      map[string]int `json:"servers"` // servers by what was done to them
	TookMs       float64        `json:"tookMs"`
	NeedsRestart []string       `json:"needsRestart,omitempty"`
}

// ReloadProblem is one error of a configuration file, at its JSON path.
type ReloadProblem struct {
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

// ReloadRejectedDetails: a reload was refused; nothing changed.
type ReloadRejectedDetails struct {
	Trigger  string          `json:"trigger"`
	Applied  bool            `json:"applied"`
	Error    string          `json:"error"`
	Problems []ReloadProblem `json:"problems,omitempty"`
}

func (StartedDetails) Kind() Kind             { return Started }
func (DormantDetails) Kind() Kind             { return Dormant }
func (RespawnedDetails) Kind() Kind           { return Respawned }
func (ExitedDetails) Kind() Kind              { return Exited }
func (RestartedDetails) Kind() Kind           { return Restarted }
func (FailedDetails) Kind() Kind              { return Failed }
func (StoppedDetails) Kind() Kind             { return Stopped }
func (RestartingDetails) Kind() Kind          { return Restarting }
func (OperatorStopDetails) Kind() Kind        { return OperatorStop }
func (OperatorRestartDetails) Kind() Kind     { return OperatorRestart }
func (ReloadDrainedDetails) Kind() Kind       { return ReloadDrained }
func (DefinitionsChangedDetails) Kind() Kind  { return DefinitionsChanged }
func (DefinitionsApprovedDetails) Kind() Kind { return DefinitionsApproved }
func (ToolsLostDetails) Kind() Kind           { return ToolsLost }
func (ToolsLostAcceptedDetails) Kind() Kind   { return ToolsLostAccepted }
func (ToolsRestoredDetails) Kind() Kind       { return ToolsRestored }
func (NeedsLoginDetails) Kind() Kind          { return NeedsLogin }
func (LoggedInDetails) Kind() Kind            { return LoggedIn }
func (LoggedOutDetails) Kind() Kind           { return LoggedOut }
func (ReloadedDetails) Kind() Kind            { return Reloaded }
func (ReloadRejectedDetails) Kind() Kind      { return ReloadRejected }

// Fields returns d as an event's details: each field by its JSON name,
// with its value (a pointer's target), fields of an embedded struct
// among them; a field tagged omitempty is left out when zero.
func Fields(d Details) map[string]any {
	m := map[string]any{}
	addFields(m, reflect.ValueOf(d))
	return m
}

func addFields(m map[string]any, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			addFields(m, fv)
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		if opts == "omitempty" && empty(fv) {
			continue
		}
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				m[name] = nil
				continue
			}
			fv = fv.Elem()
		}
		m[name] = fv.Interface()
	}
}

// empty tells whether omitempty leaves v out, as encoding/json does.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return v.Len() == 0
	}
	return v.IsZero()
}
