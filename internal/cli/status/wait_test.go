package status

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

func TestWaitDone(t *testing.T) {
	// Not ready, as the fleet says (fleet.Status.Ready has its own tests).
	st := func(name, state string, learned bool, lastErr string) fleet.Status {
		return fleet.Status{Name: name, State: state, Learned: learned, LastError: lastErr}
	}
	ready := func(name, state string) fleet.Status {
		return fleet.Status{Name: name, State: state, Learned: true, Ready: true}
	}
	cases := []struct {
		name    string
		servers []fleet.Status
		names   []string
		done    bool
		err     string // "" for none
	}{
		{"all ready", []fleet.Status{ready("a", "running"), ready("b", "dormant"), ready("c", "new")}, nil, true, ""},
		{"one starting", []fleet.Status{ready("a", "running"), st("b", "starting", false, "")}, nil, false, "waiting for b (starting, tools not known yet)"},
		{"only the named", []fleet.Status{ready("a", "running"), st("b", "starting", false, "")}, []string{"a"}, true, ""},
		{"running, tools not learned yet (eager)", []fleet.Status{st("a", "running", false, "")}, nil, false, "waiting for a (running, tools not known yet)"},
		{"running, its tools lost", []fleet.Status{{Name: "a", State: "running", Learned: true, Warning: "it lists no tools where it had 3"}}, nil, false, "waiting for a (running, it lists no tools where it had 3)"},
		{"never started, nothing known (--no-learn)", []fleet.Status{st("a", "new", false, "")}, nil, false, "waiting for a (new, tools not known yet)"},
		{"a failed start", []fleet.Status{st("a", "new", true, "boom")}, nil, false, "waiting for a (new, last error: boom)"},
		{"failed", []fleet.Status{st("a", "failed", false, "boom"), ready("b", "running")}, nil, false, "waiting for a (failed, tools not known yet, last error: boom)"},
		{"unknown", []fleet.Status{ready("a", "running")}, []string{"z"}, true, `no server named "z"; configured: a`},
		{"restarting", []fleet.Status{st("a", "restarting", true, "")}, nil, false, "waiting for a (restarting)"},
	}
	for _, c := range cases {
		done, err := waitDone(c.servers, c.names)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if done != c.done || (c.err == "") != (err == nil) || !strings.Contains(got, c.err) {
			t.Errorf("%s: done %v, err %q; want %v, %q", c.name, done, got, c.done, c.err)
		}
	}
}
