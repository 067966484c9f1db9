package fleet

import (
	"testing"
	"testing/synctest"
)

// A per-session server lists its shared instance (which learns its lists)
// first, then one instance per client session, each labelled by a
// fingerprint of its session id — distinct, and never the id itself.
func TestInstancesOfAPerSessionServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, `"p":{"command":"p","sharing":"per-session","idleTimeout":"0"}`)
		p := lf.f.Get("p")
		if got := p.Detail().Instances; len(got) != 1 || !got[0].Shared || got[0].Session != "" || got[0].State != "new" {
			t.Fatalf("before any session: %+v, want only the shared instance, new", got)
		}
		lf.running(t, "p") // the shared instance, as when the lists are learned
		ids := []string{"3f2a9c0e-session-one-credential", "b71d44aa-session-two-credential"}
		for _, id := range ids {
			l, err := p.Acquire(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if id == ids[0] {
				defer l.Release() // one call still in flight on the first
			} else {
				l.Release()
			}
		}
		got := p.Detail().Instances
		if len(got) != 3 {
			t.Fatalf("%d instances, want 3 (shared and two sessions): %+v", len(got), got)
		}
		if !got[0].Shared || got[0].Session != "" || got[0].State != "running" || got[0].Spawns != 1 || got[0].StartedAt.IsZero() {
			t.Errorf("shared instance: %+v", got[0])
		}
		labels := map[string]InstanceStatus{}
		for _, in := range got[1:] {
			if in.Shared || in.State != "running" || in.Spawns != 1 {
				t.Errorf("session instance: %+v", in)
			}
			labels[in.Session] = in
		}
		if len(labels) != 2 {
			t.Fatalf("labels not distinct: %+v", got[1:])
		}
		first, ok := labels[ids[0]]
		if !ok || first.InFlight != 1 || labels[ids[1]].InFlight != 0 {
			t.Errorf("instances %v are not sessions %s, %s, or in-flight counts wrong", labels, ids[0], ids[1])
		}
		if n := p.Status().Sessions; n != 2 {
			t.Errorf("Status counts %d sessions, want 2", n)
		}
	})
}

// A shared server has one instance, its only one.
func TestInstancesOfASharedServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := newLaunchFleet(t, threeServers)
		lf.running(t, "a")
		for _, id := range []string{"s1", "s2"} {
			l, err := lf.f.Get("a").Acquire(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			l.Release()
		}
		if got := lf.f.Get("a").Detail().Instances; len(got) != 1 || !got[0].Shared || got[0].State != "running" || got[0].Spawns != 1 {
			t.Fatalf("shared server: %+v, want its one running instance", got)
		}
	})
}
