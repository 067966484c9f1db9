package proc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/proc/shim"
)

// mcpvisor's own variables, as the tests below set them.
const (
	testToken   = "MCPVISOR_TOKEN=proc-test-secret"
	testSetting = "MCPVISOR_PROC_TEST_SETTING=x"
	testPlain   = "PROC_TEST_ORDINARY=kept"
)

func setOwnVariables(t *testing.T) {
	for _, kv := range []string{testToken, testSetting, testPlain} {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// A server whose Spec.Env is nil inherits mcpvisor's environment without
// mcpvisor's own variables (MCPVISOR_*, its API token first of all), and
// so does the pid-namespace init it runs under; ordinary variables, the
// tree's TreeEnv and the init's protocol variable are there. A Spec.Env
// given explicitly is used as given.
func TestServersDoNotInheritMcpvisorVariables(t *testing.T) {
	setOwnVariables(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			pidns := rt.Report().Active(LayerPIDNamespace)
			t.Run("inherited", func(t *testing.T) {
				p := spawnCat(t, rt, nil)
				if pidns {
					checkEnv(t, "the init", execEnviron(t, p.Pid()), []string{testPlain, TreeEnv + "=" + p.Tree(), shim.Env + "=" + shim.Run})
				}
				env := serverEnviron(t, p, pidns)
				checkEnv(t, "the server", env, []string{testPlain, TreeEnv + "=" + p.Tree()})
				if i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, shim.Env+"=") }); i >= 0 {
					t.Errorf("the server carries the init's %s", env[i])
				}
			})
			t.Run("explicit", func(t *testing.T) {
				p := spawnCat(t, rt, append(os.Environ(), "PROC_TEST_EXPLICIT=1"))
				env := serverEnviron(t, p, pidns)
				if !slices.Contains(env, testToken) || !slices.Contains(env, "PROC_TEST_EXPLICIT=1") {
					t.Errorf("an explicit Spec.Env was not used as given: the server has %q", env)
				}
			})
		})
	}
}

// The probe of a pid-namespace init runs without mcpvisor's own variables
// too. The init is a script that records its environment, for the probe
// and for each server it starts, then runs the real shim.
func TestInitProbeDoesNotInheritMcpvisorVariables(t *testing.T) {
	setOwnVariables(t)
	built := withShim(t, Options{ShimPath: shimBinary}).ShimPath
	dir := t.TempDir()
	script := "#!/bin/sh\nenv > " + dir + "/\"$" + shim.Env + "\".env\nexec " + built + " \"$@\"\n"
	initPath := installFile(t, filepath.Join(t.TempDir(), "recording-shim"), []byte(script), "755")
	rt := openRuntime(t, Options{ShimPath: initPath, NoCgroup: true})
	if !rt.Report().Active(LayerPIDNamespace) {
		t.Skipf("no pid namespace here:\n%s", rt.Report())
	}
	p := spawnCat(t, rt, nil)
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for role, want := range map[string][]string{
		shim.Probe: {testPlain, shim.Env + "=" + shim.Probe},
		shim.Run:   {testPlain, shim.Env + "=" + shim.Run, TreeEnv + "=" + p.Tree()},
	} {
		b, err := os.ReadFile(filepath.Join(dir, role+".env"))
		if err != nil {
			t.Fatalf("the %s init left no record: %v", role, err)
		}
		checkEnv(t, "the "+role+" init", strings.Split(strings.TrimSpace(string(b)), "\n"), want)
	}
}

// spawnCat starts cat with env as its Spec.Env; it is stopped at the end
// of the test.
func spawnCat(t *testing.T, rt *Runtime, env []string) *Process {
	t.Helper()
	p, err := rt.Spawn(t.Context(), Spec{Name: "env", Command: "cat", Env: env, StdinWait: testStdinWait, TermWait: testTermWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return p
}

// serverEnviron is the environment cat started with: the leader's, or in
// a pid namespace that of the init's child. It waits for cat to be running:
// a process that has just exec'd shows an empty environment for a moment.
func serverEnviron(t *testing.T, p *Process, pidns bool) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := []int{p.Pid()}
		if pidns {
			pids = childrenOf(p.Pid())
		}
		for _, pid := range pids {
			cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if !bytes.HasPrefix(cmd, []byte("cat\x00")) {
				continue
			}
			return execEnviron(t, pid)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cat running in the tree of %d", p.Pid())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// execEnviron is the environment pid was exec'd with, once it shows.
func execEnviron(t *testing.T, pid int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if env := readPidEnviron(t, pid); len(env) > 1 || time.Now().After(deadline) {
			return env
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readPidEnviron is /proc/PID/environ, one variable an entry.
func readPidEnviron(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatalf("environment of %d: %v", pid, err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// checkEnv fails t unless env holds every variable of want and no
// MCPVISOR_ variable but those in want.
func checkEnv(t *testing.T, who string, env, want []string) {
	t.Helper()
	for _, kv := range want {
		if !slices.Contains(env, kv) {
			t.Errorf("%s lacks %s", who, kv)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "MCPVISOR_") && !slices.Contains(want, kv) {
			t.Errorf("%s carries mcpvisor's own %s", who, kv)
		}
	}
}
