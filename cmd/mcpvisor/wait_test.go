package main

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

func TestWaitDone(t *testing.T) {
	st := func(name, state string, learned bool, lastErr string) fleet.Status {
		return fleet.Status{Name: name, State: state, Learned: learned, LastError: lastErr}
	}
	cases := []struct {
		name    string
		servers []fleet.Status
		names   []string
		done    bool
		err     string // "" for none
	}{
		{"all ready", []fleet.Status{st("a", "running", true, ""), st("b", "dormant", true, ""), st("c", "new", true, "")}, nil, true, ""},
		{"one starting", []fleet.Status{st("a", "running", true, ""), st("b", "starting", false, "")}, nil, false, "waiting for b (starting, tools not known yet)"},
		{"only the named", []fleet.Status{st("a", "running", true, ""), st("b", "starting", false, "")}, []string{"a"}, true, ""},
		{"running, tools unknown", []fleet.Status{st("a", "running", false, "")}, nil, false, "waiting for a (running, tools not known yet)"},
		{"a failed start", []fleet.Status{st("a", "new", true, "boom")}, nil, false, "waiting for a (new, last error: boom)"},
		{"failed for good", []fleet.Status{st("a", "failed", false, "boom"), st("b", "running", true, "")}, nil, true, "server a has failed: boom"},
		{"unknown", []fleet.Status{st("a", "running", true, "")}, []string{"z"}, true, `no server named "z"; configured: a`},
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
