package config

import (
	"maps"
	"reflect"
	"slices"
)

// What a reload does to one server (ServerChange.Action).
const (
	ActionAdded     = "added"     // newly configured (or enabled): learned like at start-up
	ActionRemoved   = "removed"   // no longer configured (or disabled): drained and stopped
	ActionRestarted = "restarted" // how it is reached changed: drained, started again with the new launch
	ActionUpdated   = "updated"   // settings only: applied in place, the process kept
	ActionUnchanged = "unchanged" // nothing changed: untouched
)

// ServerChange is what a new configuration changes for one server.
type ServerChange struct {
	Name   string `json:"name"`
	Action string `json:"action"`
	// Fields names what changed, as the file spells it: "command",
	// "restart", "tools"; an environment variable or a header by its name
	// ("env.API_KEY", "headers.Authorization"), never its value.
	Fields []string `json:"fields,omitempty"`
}

// Diff is what a new configuration changes.
type Diff struct {
	// Servers has one entry per server configured before or after, sorted
	// by name; a server disabled in both is left out.
	Servers []ServerChange `json:"servers"`
	// Settings are the top-level settings that change and apply live.
	Settings []string `json:"settings,omitempty"`
	// NeedsRestart are the top-level settings that change but cannot
	// while mcpvisor runs (the listen address, the state directory):
	// they take effect at its next start.
	NeedsRestart []string `json:"needsRestart,omitempty"`
}

// serverFields are a server's compared fields (env and headers apart),
// named as the file names them. Those marked launch decide how it is
// reached and run: a change to any of them needs a new process (or
// connection). How
// it is stopped (stop.stdinWait, stop.termWait) and its resource limits
// are part of its process's launch. The rest are settings, applied in
// place.
var serverFields = []struct {
	name   string
	launch bool
	get    func(*Server) any
}{
	{"type", true, func(s *Server) any { return [2]string{s.Kind, s.Transport} }},
	{"command", true, func(s *Server) any { return s.Command }},
	{"args", true, func(s *Server) any { return s.Args }},
	{"cwd", true, func(s *Server) any { return s.Cwd }},
	{"url", true, func(s *Server) any { return s.URL }},
	// Who mcpvisor is to the server's authorization server.
	{"oauth", true, func(s *Server) any { return s.OAuth }},
	{"protocol", true, func(s *Server) any { return s.Protocol }},
	{"sharing", true, func(s *Server) any { return s.Sharing }},
	{"placement", true, func(s *Server) any { return s.Placement }},
	// What a process was declared at initialize is its own until it ends.
	{"clientCapabilities", true, func(s *Server) any {
		if s.ClientCapabilities == nil {
			return nil // all: another setting than [] (none)
		}
		return slices.Sorted(slices.Values(s.ClientCapabilities))
	}},
	{"stop.stdinWait", true, func(s *Server) any { return s.StdinWait }},
	{"stop.termWait", true, func(s *Server) any { return s.TermWait }},
	// A process's limits are given to its cgroup leaves at spawn: new
	// ones need a new process (see Limits).
	{"limits", true, func(s *Server) any { return kernelLimits(s.Limits) }},
	{"maxIdleMemory", false, func(s *Server) any { return maxIdleMemory(s.Limits) }},
	{"eager", false, func(s *Server) any { return s.Eager }},
	{"pin", false, func(s *Server) any { return s.Pin }},
	{"launch", false, func(s *Server) any { return s.AsWritten }},
	{"prefix", false, func(s *Server) any { return s.Prefix }},
	{"tools", false, func(s *Server) any { return s.Tools }},
	{"maxInstances", false, func(s *Server) any { return s.MaxInstances }},
	{"idleTimeout", false, func(s *Server) any { return s.IdleTimeout }},
	{"startGrace", false, func(s *Server) any { return s.StartGrace }},
	{"initTimeout", false, func(s *Server) any { return s.InitTimeout }},
	{"requestTimeout", false, func(s *Server) any { return s.RequestTimeout }},
	{"restart", false, func(s *Server) any { return s.Restart }},
}

// CompareServer says what changes from old to new, two configurations
// of the same server (both enabled): ActionRestarted when a launch field
// changed, ActionUpdated when only settings did, else ActionUnchanged.
// Fields lists every changed field, secrets by name only.
func CompareServer(old, new *Server) ServerChange {
	c := ServerChange{Name: new.Name, Action: ActionUnchanged}
	launch := false
	for _, f := range serverFields {
		if !reflect.DeepEqual(f.get(old), f.get(new)) {
			c.Fields = append(c.Fields, f.name)
			launch = launch || f.launch
		}
	}
	for _, m := range []struct {
		name     string
		old, new map[string]string
	}{{"env", old.Env, new.Env}, {"headers", old.Headers, new.Headers}} {
		for _, k := range changedKeys(m.old, m.new) {
			c.Fields = append(c.Fields, m.name+"."+k)
			launch = true
		}
	}
	switch {
	case launch:
		c.Action = ActionRestarted
	case len(c.Fields) > 0:
		c.Action = ActionUpdated
	}
	return c
}

// changedKeys lists, sorted, the keys added, removed or given another
// value between a and b.
func changedKeys(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// disabledField is ["disabled"] when c configures the server named n but
// disables it: that is why it is added or removed.
func disabledField(c *Config, n string) []string {
	if s := c.Server(n); s != nil && s.Disabled {
		return []string{"disabled"}
	}
	return nil
}

// Compare says what replacing old by new changes, server by server and
// for the top-level settings.
func Compare(old, new *Config) Diff {
	var d Diff
	enabled := func(c *Config) map[string]*Server {
		m := map[string]*Server{}
		for _, s := range c.Servers {
			if !s.Disabled {
				m[s.Name] = s
			}
		}
		return m
	}
	before, after := enabled(old), enabled(new)
	names := slices.Sorted(maps.Keys(before))
	for n := range after {
		if _, ok := before[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		o, nw := before[n], after[n]
		switch {
		case o == nil:
			d.Servers = append(d.Servers, ServerChange{Name: n, Action: ActionAdded, Fields: disabledField(old, n)})
		case nw == nil:
			d.Servers = append(d.Servers, ServerChange{Name: n, Action: ActionRemoved, Fields: disabledField(new, n)})
		default:
			d.Servers = append(d.Servers, CompareServer(o, nw))
		}
	}
	if old.Listen != new.Listen {
		d.NeedsRestart = append(d.NeedsRestart, "listen")
	}
	if old.StateDir != new.StateDir {
		d.NeedsRestart = append(d.NeedsRestart, "stateDir")
	}
	if old.MaxSessions != new.MaxSessions {
		d.Settings = append(d.Settings, "maxSessions")
	}
	if old.PageSize != new.PageSize {
		d.Settings = append(d.Settings, "pageSize")
	}
	if old.HoldTimeout != new.HoldTimeout {
		d.Settings = append(d.Settings, "holdTimeout")
	}
	return d
}
