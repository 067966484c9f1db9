package fleet

import (
	"cmp"
	"slices"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Status is a snapshot of one server for ps and the admin API.
type Status struct {
	Name         string    `json:"name"`
	State        string    `json:"state"` // new, starting, running, degraded, restarting, dormant, failed, stopped, needs-login
	PID          int       `json:"pid,omitempty"`
	StartedAt    time.Time `json:"startedAt,omitzero"`
	LastActivity time.Time `json:"lastActivity,omitzero"`
	DormantSince time.Time `json:"dormantSince,omitzero"`
	InFlight     int       `json:"inFlight"`
	Restarts     int       `json:"restarts"`
	Spawns       int       `json:"spawns"`
	LastError    string    `json:"lastError,omitempty"`
	Sessions     int       `json:"sessions,omitempty"` // per-session instances
	// Identities are a per-identity server's instances, one per identity
	// that used it and has not been idle since for its idle timeout, by
	// name.
	Identities []IdentityStatus `json:"identities,omitempty"`
	// Failures counts the starts in a row that failed before the server
	// answered anything (lifecycle.StateInfo.Failures); from 2 the server
	// is in a crash loop, and NextAttempt says when it is tried again
	// (requests get an error saying so until then).
	Failures    int       `json:"failures,omitempty"`
	NextAttempt time.Time `json:"nextAttempt,omitzero"`
	// Refusing is the error every request gets while the operator has
	// stopped the server (state "stopped" until it is started again).
	Refusing string `json:"refusing,omitempty"`
	// Learned: the server's tool list is known (learned at a start, or
	// from the state store), so it can be served on demand.
	Learned bool `json:"learned"`
	// Ready: the server serves what it lists — its handshake was done
	// (it runs, or sleeps after running) or it starts on demand from a
	// known list, its tools are known, and no warning stands.
	Ready bool `json:"ready"`
	// Warning says what is wrong with a server that otherwise looks
	// healthy: it came back listing no tools where it had some. Cleared
	// when its tools come back.
	Warning string `json:"warning,omitempty"`
	// PendingDefinitions counts the tools a pinned server holds back
	// until approved (mcpvisor tools diff / approve).
	PendingDefinitions int `json:"pendingDefinitions,omitempty"`
	// MemoryBytes is the resident memory of the server's running process
	// trees (Server.Roots), per-session ones included (Linux; filled in
	// by the status API, not by Status).
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	// Draining counts the instances taken out of service (a restart, a
	// reload, a stop) that still finish the calls they hold.
	Draining int `json:"draining,omitempty"`
	// Era is the protocol version the server speaks (catalog.Catalog.Era),
	// "" if unknown.
	Era string `json:"era,omitempty"`
	// Requests counts the requests ever begun on the shared instance
	// (what /metrics counts as mcpvisor_server_requests_total), for a
	// rate.
	Requests int64 `json:"requests"`
	// Clients are the clients whose requests reached the server, by
	// name (clientbook.Book.Of); filled in by the status API, not by
	// Status.
	Clients []clientbook.Use `json:"clients,omitempty"`
	// MemoryPeakBytes, CPUSeconds and PIDs are the rest of what those
	// trees use (proc.Usage: from each tree's cgroup leaf where it has
	// the counter, else from /proc; filled in by the status API); omitted
	// when not known.
	MemoryPeakBytes uint64  `json:"memoryPeakBytes,omitempty"`
	CPUSeconds      float64 `json:"cpuSeconds,omitempty"`
	PIDs            int     `json:"pids,omitempty"`
	// Calls counts the client requests that reached the server, by how
	// they ended, since it was configured (telemetry.Server).
	Calls telemetry.CallCounts `json:"calls"`
	// Limits are the server's resource limits, and those not enforced
	// here; nil when it has none.
	Limits *LimitsStatus `json:"limits,omitempty"`
	// OOMKills counts the server's process trees that its memory limit
	// killed (they ended with exit kind "oom"), and PIDsLimitHits the
	// forks its pids limit refused in the trees that ended, since it was
	// configured; each counted once its tree is gone.
	OOMKills      int `json:"oomKills,omitempty"`
	PIDsLimitHits int `json:"pidsLimitHits,omitempty"`
	// OAuth is the state of a remote server's OAuth grant: logged in (as
	// whom, until when), needing a login and why; never a token. Nil for
	// a server that has no login (stdio, or a configured Authorization
	// header).
	OAuth *oauthclient.Info `json:"oauth,omitempty"`
	// Launcher says, for a server whose command is a package launcher (npx,
	// npm exec, …), whether it starts flattened — the launcher's program
	// run directly — or as written, and why.
	Launcher *launch.Status `json:"launcher,omitempty"`
}

// needsLogin reports whether a remote server in state (as statusLocked
// derives it) is in state "needs-login": its grant says so — every
// request is refused at once (Server.loginRefusal), even while a
// connection is still open — unless a start is under way.
func needsLogin(state string, info oauthclient.Info) bool {
	if info.State != oauthclient.StateNeedsLogin {
		return false
	}
	return state != "starting" && state != "restarting"
}

// ready reports whether st is ready (Status.Ready): running, degraded or
// dormant — its handshake was done —, or new with no failed start (it
// starts on demand); in both cases with its tools known and no warning.
// A failed server is not ready: the fleet tries it again on the next
// request.
func ready(st Status) bool {
	if !st.Learned || st.Warning != "" {
		return false
	}
	switch st.State {
	case "running", "degraded", "dormant":
		return true
	case "new":
		return st.LastError == ""
	}
	return false
}

func (in *instance) status() (st Status) {
	in.view(func(is *instState) { st = in.statusLocked(is) })
	return st
}

// statusLocked derives the instance's status from its state and its run's
// (the one place that does); mu is held.
func (in *instance) statusLocked(is *instState) Status {
	sup := in.runStateLocked()
	st := Status{
		InFlight:    int(is.inflight),
		Requests:    is.requests,
		Restarts:    sup.Restarts,
		Failures:    sup.Failures,
		NextAttempt: sup.NextAttempt,
		Spawns:      int(is.spawns),
	}
	switch is.phase {
	case phaseNew:
		st.State = "new"
		if is.starting != nil {
			st.State = "starting"
		} else if is.startErr != nil {
			st.State = "failed" // its last start failed; the next request tries again
		}
	case phaseSleeping, phaseDormant:
		st.State = "dormant"
		if is.dormantAt != 0 {
			st.DormantSince = time.Unix(0, is.dormantAt)
		}
	case phaseStopped, phaseClosed:
		st.State = "stopped"
		if is.starting != nil {
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
	if is.starting != nil && st.State == "dormant" {
		st.State = "starting"
	}
	if l := in.liveLocked(); l != nil && (st.State == "running" || st.State == "degraded") {
		st.PID = pidOf(l)
		st.StartedAt = is.startedAt
	}
	if !is.lastActivity.IsZero() {
		st.LastActivity = is.lastActivity
	}
	err := is.lastErr
	if err == nil {
		err = sup.LastError
	}
	if err != nil {
		st.LastError = err.Error()
	}
	return st
}

// InstanceStatus is a snapshot of one instance of a server: the shared one
// (a shared server's only one; a per-session server's, used to learn its
// lists) or the one a per-session server runs for a client session.
type InstanceStatus struct {
	// Shared is set for the shared instance.
	Shared bool `json:"shared"`
	// Session is the per-session instance's client session, by the key
	// events and logs name it with (the gateway's own, "s12": never the
	// client's Mcp-Session-Id). "" for the shared instance.
	Session string `json:"session,omitempty"`
	// Identity and IdentityName are, for a per-identity server's
	// instance of one identity, its identity key and name (Session is
	// then "identity/" and the key).
	Identity     string `json:"identity,omitempty"`
	IdentityName string `json:"identityName,omitempty"`
	// State is as in Status, the operator's stop aside; "draining" for an
	// instance taken out of service that still finishes its calls.
	State        string    `json:"state"`
	PID          int       `json:"pid,omitempty"`
	StartedAt    time.Time `json:"startedAt,omitzero"`
	LastActivity time.Time `json:"lastActivity,omitzero"`
	InFlight     int       `json:"inFlight"`
	Restarts     int       `json:"restarts"`
	Spawns       int       `json:"spawns"`
	LastError    string    `json:"lastError,omitempty"` // secrets redacted
}

// Detail is what the operator reads of a server beyond its Status.
type Detail struct {
	// Instances lists the server's instances: the shared one first, then
	// those it runs for client sessions, by session, then those draining
	// (a restart, a reload or a stop took them out of service; they finish
	// their calls), by session. A per-session instance whose session ended
	// and that is still stopping is no longer listed.
	Instances []InstanceStatus
	// History lists the server's last ends (of every instance), oldest
	// first.
	History []Exit
}

// Detail describes the server's instances and its last ends.
func (s *Server) Detail() Detail {
	return Detail{Instances: s.instanceStatuses(), History: s.history()}
}

// instanceStatuses lists the server's instances, as Detail.Instances
// says.
func (s *Server) instanceStatuses() []InstanceStatus {
	ins := s.instances() // s.mu is released before any in.mu is taken
	serving := len(ins)
	ins = append(ins, s.f.drainingOf(s)...)
	cfg := s.Config()
	out := make([]InstanceStatus, 0, len(ins))
	for i, in := range ins {
		st := in.status()
		if i >= serving {
			st.State = "draining"
		}
		is := InstanceStatus{
			Shared:       in.key == "",
			State:        st.State,
			PID:          st.PID,
			StartedAt:    st.StartedAt,
			LastActivity: st.LastActivity,
			InFlight:     st.InFlight,
			Restarts:     st.Restarts,
			Spawns:       st.Spawns,
			LastError:    cfg.RedactText(st.LastError),
		}
		if !is.Shared {
			is.Session = in.key
		}
		if k, ok := identityOfKey(in.key); ok {
			is.Identity, is.IdentityName = k, s.identityName(in.key)
		}
		out = append(out, is)
	}
	bySession := func(a, b InstanceStatus) int { return cmp.Compare(a.Session, b.Session) }
	slices.SortStableFunc(out[1:serving], bySession)
	slices.SortStableFunc(out[serving:], bySession)
	return out
}
