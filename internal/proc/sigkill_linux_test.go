package proc

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// TestSupervisorSIGKILL kills a supervising process (running fixture trees,
// a real npx chain and the same npm server flattened) with SIGKILL and checks
// what each containment layer leaves behind, saying which layer did the
// work. With a pid namespace nothing may survive one second; with
// pdeathsig alone the direct children die and the escaped grandchildren are
// removed by the start-up sweep of the next Runtime on the same state
// directory.
func TestSupervisorSIGKILL(t *testing.T) {
	bin := testserver.Build(t)
	npm := testserver.Deps(t, "npm")
	command, args := flatNpx(t, npm)
	flat, err := json.Marshal(append([]string{command}, args...))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			marker := testserver.NewMarker(t)
			state := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(),
				harnessEnv+"="+m.name, harnessStateEnv+"="+state, harnessBinEnv+"="+bin, harnessNPMEnv+"="+npm, harnessFlatEnv+"="+string(flat),
				harnessShimEnv+"="+withShim(t, Options{ShimPath: shimBinary}).ShimPath,
				testserver.MarkerEnv+"="+marker)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "ready ") {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("harness: %q %v", line, err)
			}
			layers := strings.TrimPrefix(strings.Fields(line)[2], "layers=")
			var cgroups []string
			if list := strings.TrimPrefix(strings.Fields(line)[3], "cgroups="); list != "" {
				cgroups = strings.Split(list, ",")
			}
			if strings.Contains(layers, LayerCgroup) && len(cgroups) < 2 {
				t.Fatalf("the harness's cgroups: %q (its v2 and v1 instance directories expected)", cgroups)
			}
			pidns := strings.Contains(layers, LayerPIDNamespace)
			// Tree 1: fixture + setsid grandchild + stdout grandchild;
			// tree 2: fixture; tree 3: npm exec + sh + node; tree 4: node
			// (flattened); plus one shim per tree in a pid namespace.
			want := 8
			if pidns {
				want = 12
			}
			before := waitCount(t, marker, want)
			direct := map[int]bool{}
			for _, pid := range before {
				if st, ok := readStat(pid); ok && st.ppid == cmd.Process.Pid {
					direct[pid] = true
				}
			}

			killed := time.Now()
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			deadline := killed.Add(time.Second)
			var left []int
			for {
				left = testserver.LiveProcesses(marker)
				directLeft := 0
				for _, pid := range left {
					if direct[pid] {
						directLeft++
					}
				}
				if len(left) == 0 || (!pidns && directLeft == 0 && time.Since(killed) > 300*time.Millisecond) || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			gone := time.Since(killed)
			if pidns {
				if len(left) > 0 {
					testserver.KillProcesses(marker)
					t.Fatalf("layers %s: %d processes survived the SIGKILL of their supervisor: %v", layers, len(left), left)
				}
				t.Logf("layers %s: the pid namespace removed all %d processes %v after the supervisor's SIGKILL", layers, len(before), gone.Round(time.Millisecond))
				sweptCgroups(t, state, cgroups)
				return
			}
			for _, pid := range left {
				if direct[pid] {
					testserver.KillProcesses(marker)
					t.Fatalf("layers %s: direct child %d survived the supervisor's SIGKILL (pdeathsig)", layers, pid)
				}
			}
			t.Logf("layers %s: pdeathsig removed the %d direct children; %d escaped grandchildren survive until the next start", layers, len(direct), len(left))

			// The next start on the same state directory sweeps them.
			rt := openRuntime(t, Options{StateDir: state, NoPIDNamespace: true, NoCgroup: true})
			if !rt.Report().Active(LayerStaleSweep) {
				t.Fatalf("stale sweep inactive: %s", rt.Report())
			}
			if left := testserver.LiveProcesses(marker); len(left) > 0 {
				testserver.KillProcesses(marker)
				t.Fatalf("layers %s: the start-up sweep left %v", layers, left)
			}
			t.Logf("layers %s: the start-up sweep removed the survivors", layers)
			sweptCgroups(t, state, cgroups)
		})
	}
}

// sweptCgroups checks that the per-instance cgroup directories of a killed
// instance, v2 and v1, are gone once a runtime opened on its state
// directory has swept them.
func sweptCgroups(t *testing.T, state string, dirs []string) {
	t.Helper()
	openRuntime(t, Options{StateDir: state, NoPIDNamespace: true, NoCgroup: true})
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the killed instance's cgroup %s was not swept: %v", d, err)
		}
	}
	if len(dirs) > 0 {
		t.Logf("the start-up sweep removed %d cgroup directories", len(dirs))
	}
}
