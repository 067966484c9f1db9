package proc

// instanceCgroups lists the runtime's per-instance cgroup directories, v2
// and v1 (what the harness checks are gone after a test).
func (rt *Runtime) instanceCgroups() []string {
	out := rt.v1Instances()
	if rt.plat.cgroup != "" {
		out = append(out, rt.plat.cgroup)
	}
	return out
}
