//go:build !linux

package proc

// instanceCgroups: no cgroups here.
func (rt *Runtime) instanceCgroups() []string { return nil }
