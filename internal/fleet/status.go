package fleet

import (
	"time"

	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Status is a snapshot of one server for ps and the admin API.
type Status struct {
	Name         string    `json:"name"`
	State        string    `json:"state"` // new, starting, running, degraded, restarting, dormant, failed, stopped
	PID          int       `json:"pid,omitempty"`
	StartedAt    time.Time `json:"startedAt,omitzero"`
	LastActivity time.Time `json:"lastActivity,omitzero"`
	DormantSince time.Time `json:"dormantSince,omitzero"`
	InFlight     int       `json:"inFlight"`
	Restarts     int       `json:"restarts"`
	Spawns       int       `json:"spawns"`
	LastError    string    `json:"lastError,omitempty"`
	Sessions     int       `json:"sessions,omitempty"` // per-session instances
	// Refusing is the error every request gets while the operator has
	// stopped the server (state "stopped" until it is started again).
	Refusing string `json:"refusing,omitempty"`
	// Learned: the server's tool list is known (learned at a start, or
	// from the state store), so it can be served on demand.
	Learned bool `json:"learned"`
	// MemoryBytes is the resident memory of the server's running process
	// trees, per-session ones included (Linux; filled in by the status
	// API, not by Status).
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
}

func (in *instance) status() Status {
	sup := in.sup.State()
	in.mu.Lock()
	defer in.mu.Unlock()
	st := Status{
		InFlight: in.inflight,
		Restarts: sup.Restarts,
		Spawns:   in.spawns,
	}
	switch in.phase {
	case phaseNew:
		st.State = "new"
		if in.starting != nil {
			st.State = "starting"
		}
	case phaseSleeping, phaseDormant:
		st.State = "dormant"
		st.DormantSince = in.dormantAt
	case phaseStopped, phaseClosed:
		st.State = "stopped"
		if in.starting != nil {
			st.State = "starting"
		}
	default:
		switch sup.State {
		case lifecycle.StateReady:
			st.State = "running"
		case lifecycle.StateDegraded:
			st.State = "degraded"
		case lifecycle.StateStarting:
			st.State = "starting"
		case lifecycle.StateRestarting:
			st.State = "restarting"
		case lifecycle.StateFailed:
			st.State = "failed"
		default:
			st.State = "stopped"
		}
	}
	if in.starting != nil && st.State == "dormant" {
		st.State = "starting"
	}
	if in.conn != nil && (st.State == "running" || st.State == "degraded") {
		st.PID = pidOf(in.conn)
		st.StartedAt = in.startedAt
	}
	if !in.lastActivity.IsZero() {
		st.LastActivity = in.lastActivity
	}
	err := in.lastErr
	if err == nil {
		err = sup.LastError
	}
	if err != nil {
		st.LastError = err.Error()
	}
	return st
}
