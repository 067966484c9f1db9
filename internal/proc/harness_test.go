package proc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The harness is this test binary re-executed as a small supervising
// process: it opens a Runtime, spawns fixture trees, says "ready" and waits
// to be SIGKILLed.
const (
	harnessEnv      = "PROC_TEST_HARNESS"       // containment mode name
	harnessStateEnv = "PROC_TEST_HARNESS_STATE" // state directory
	harnessBinEnv   = "PROC_TEST_HARNESS_BIN"   // fixture binary
	harnessNPMEnv   = "PROC_TEST_HARNESS_NPM"   // .deps/npm: also run an npx tree
	harnessShimEnv  = "PROC_TEST_HARNESS_SHIM"  // the mcpvisor-shim binary
	harnessFlatEnv  = "PROC_TEST_HARNESS_FLAT"  // JSON command line: also run the flattened npx server, in .deps/npm
)

// shimBinary, as a mode's ShimPath, stands for the mcpvisor-shim binary,
// built once per test process: "auto" runs servers under it, as an
// installed mcpvisor does, and "userns" under this test binary
// re-executed, as mcpvisor does without the shim.
const shimBinary = "(mcpvisor-shim)"

// withShim puts the built shim's path in place of shimBinary.
func withShim(tb testing.TB, opts Options) Options {
	if opts.ShimPath == shimBinary {
		opts.ShimPath = testserver.BuildPackage(tb, "github.com/mcpvisor/mcpvisor/cmd/mcpvisor-shim", "mcpvisor-shim-test")
	}
	return opts
}

// modes are the containment configurations the real-process tests run
// under: everything this machine allows, and the plain fallbacks.
var modes = []struct {
	name string
	opts Options
}{
	{"auto", Options{ShimPath: shimBinary}},
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
	if opts.ShimPath == shimBinary {
		opts.ShimPath = os.Getenv(harnessShimEnv)
	}
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
	for i, env := range trees {
		spec := Spec{
			Name:    "harnessed",
			Command: bin,
			Env:     append(os.Environ(), env...),
		}
		if i == 0 {
			// Limits: leaves in the v1 hierarchies too.
			spec.Limits = &Limits{MemoryBytes: 256 << 20, PIDs: 256, CPU: 1}
		}
		p, err := rt.Spawn(context.Background(), spec)
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
	if flat := os.Getenv(harnessFlatEnv); flat != "" {
		var argv []string
		if err := json.Unmarshal([]byte(flat), &argv); err != nil || len(argv) == 0 {
			fmt.Println("error", harnessFlatEnv, err)
			return 1
		}
		p, err := rt.Spawn(context.Background(), Spec{
			Name:    "everything-flat",
			Command: argv[0],
			Args:    argv[1:],
			Dir:     os.Getenv(harnessNPMEnv),
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
	// The per-instance cgroup directories, which the next start's sweep
	// removes.
	cgroups := rt.instanceCgroups()
	fmt.Printf("ready %s layers=%s cgroups=%s\n", strings.Join(pids, ","), strings.Join(active, ","), strings.Join(cgroups, ","))
	select {} // until SIGKILL
}
