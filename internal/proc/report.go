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

// Report lists the containment layers of a Runtime.
type Report struct {
	OS     string  `json:"os"`
	Layers []Layer `json:"layers"`
}

func (r *Report) add(name string, active bool, detail string) {
	r.Layers = append(r.Layers, Layer{Name: name, Active: active, Detail: detail})
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
	return b.String()
}
