package proc

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// The harness is this test binary re-executed as a small supervising
// process: it opens a Runtime, spawns fixture trees, says "ready" and waits
// to be SIGKILLed.
const (
	harnessEnv      = "PROC_TEST_HARNESS"       // containment mode name
	harnessStateEnv = "PROC_TEST_HARNESS_STATE" // state directory
	harnessBinEnv   = "PROC_TEST_HARNESS_BIN"   // fixture binary
	harnessNPMEnv   = "PROC_TEST_HARNESS_NPM"   // .deps/npm: also run an npx tree
)

// modes are the containment configurations the real-process tests run
// under: everything this machine allows, and the plain fallbacks.
var modes = []struct {
	name string
	opts Options
}{
	{"auto", Options{}},
	{"userns", Options{UserNamespace: true, NoCgroup: true}},
	{"cgroup", Options{NoPIDNamespace: true}},
	{"plain", Options{NoPIDNamespace: true, NoCgroup: true}},
}

func harnessOptions(mode string) Options {
	for _, m := range modes {
		if m.name == mode {
			return m.opts
		}
	}
	return Options{}
}

func runHarness() int {
	opts := harnessOptions(os.Getenv(harnessEnv))
	opts.StateDir = os.Getenv(harnessStateEnv)
	rt, err := Open(opts)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	bin := os.Getenv(harnessBinEnv)
	trees := [][]string{
		{"FIXTURE_SETSID_CHILD=1", "FIXTURE_STDOUT_CHILD=1"},
		{"FIXTURE_IGNORE_TERM=1", "FIXTURE_IGNORE_EOF=1"},
	}
	var pids []string
	for _, env := range trees {
		p, err := rt.Spawn(context.Background(), Spec{
			Name:    "harnessed",
			Command: bin,
			Env:     append(os.Environ(), env...),
		})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		pids = append(pids, fmt.Sprint(p.Pid()))
	}
	if dir := os.Getenv(harnessNPMEnv); dir != "" {
		p, err := rt.Spawn(context.Background(), Spec{
			Name:    "everything",
			Command: "npx",
			Args:    []string{"-y", "@modelcontextprotocol/server-everything"},
			Dir:     dir,
		})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		pids = append(pids, fmt.Sprint(p.Pid()))
	}
	var active []string
	for _, l := range rt.Report().Layers {
		if l.Active {
			active = append(active, l.Name)
		}
	}
	fmt.Printf("ready %s layers=%s\n", strings.Join(pids, ","), strings.Join(active, ","))
	select {} // until SIGKILL
}
