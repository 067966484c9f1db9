package proc

import (
	"fmt"
	"strings"
)

// Containment layer names, as printed by `mcpvisor doctor`.
const (
	LayerProcessGroup = "process-group"
	LayerPidfd        = "pidfd"
	LayerPdeathsig    = "pdeathsig"
	LayerSubreaper    = "subreaper"
	LayerPIDNamespace = "pid-namespace"
	LayerCgroup       = "cgroup-v2"
	LayerStaleSweep   = "stale-sweep"
)

// Layer is one containment mechanism and whether this runtime uses it.
type Layer struct {
	Name   string `json:"name"`
	Active bool   `json:"active"`
	Detail string `json:"detail"` // what it does, or why it is off
}

// Report lists the containment layers of a Runtime, and the kinds of
// resource limit it can enforce.
type Report struct {
	OS     string  `json:"os"`
	Layers []Layer `json:"layers"`
	// Limits has one entry per kind of limit (LimitMemory, LimitPIDs,
	// LimitCPU): Active when the runtime enforces it, with the
	// controller and directory it uses, else why it cannot.
	Limits []Layer `json:"limits"`
	// Accounting says where the usage of each tree (TreeUsage) comes
	// from.
	Accounting string `json:"accounting,omitempty"`
}

func (r *Report) add(name string, active bool, detail string) {
	r.Layers = append(r.Layers, Layer{Name: name, Active: active, Detail: detail})
}

func (r *Report) addLimit(name string, active bool, detail string) {
	r.Limits = append(r.Limits, Layer{Name: name, Active: active, Detail: detail})
}

// Active reports whether the named layer is in use.
func (r Report) Active(name string) bool {
	for _, l := range r.Layers {
		if l.Name == name {
			return l.Active
		}
	}
	return false
}

// SurvivesSIGKILL names the layer that removes the whole tree when mcpvisor
// itself is SIGKILLed, or "" when none does (the start-up sweep then
// removes what is left on the next start).
func (r Report) SurvivesSIGKILL() string {
	if r.Active(LayerPIDNamespace) {
		return LayerPIDNamespace
	}
	return ""
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "containment on %s:\n", r.OS)
	for _, l := range r.Layers {
		mark := "off"
		if l.Active {
			mark = "on "
		}
		fmt.Fprintf(&b, "  [%s] %-14s %s\n", mark, l.Name, l.Detail)
	}
	if len(r.Limits) > 0 {
		fmt.Fprintf(&b, "resource limits:\n")
		for _, l := range r.Limits {
			mark := "not enforced"
			if l.Active {
				mark = "enforced"
			}
			fmt.Fprintf(&b, "  %-7s %-12s %s\n", l.Name, mark, l.Detail)
		}
	}
	if r.Accounting != "" {
		fmt.Fprintf(&b, "usage: %s\n", r.Accounting)
	}
	return b.String()
}
