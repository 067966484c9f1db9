package proc

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/proc/shim"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// flatNpx resolves `npx -y @modelcontextprotocol/server-everything` run in
// dir (.deps/npm) with the user's npm, as the fleet does, and returns the
// command line of the flattened server: node and the package's bin.
func flatNpx(t testing.TB, dir string) (string, []string) {
	t.Helper()
	f, err := launch.Parse("npx", []string{"-y", "@modelcontextprotocol/server-everything"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := (&launch.Resolver{}).Resolve(ctx, f, "npx", os.Environ(), dir)
	if err != nil {
		t.Fatalf("resolving npx -y @modelcontextprotocol/server-everything in %s: %v", dir, err)
	}
	return r.Argv(f)
}

// TestFlattenedNpx is TestNpxChain's matrix on the flattened server: in
// every containment mode its tree is node alone — under the mode's
// pid-namespace init where there is one —, with no npm exec or sh; it
// answers, and Stop leaves nothing, in time.
func TestFlattenedNpx(t *testing.T) {
	dir := testserver.Deps(t, "npm")
	command, args := flatNpx(t, dir)
	if filepath.Base(command) != "node" || len(args) != 1 || !strings.HasSuffix(args[0], "/server-everything/dist/index.js") {
		t.Fatalf("flattened to %s %q", command, args)
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			p, err := rt.Spawn(t.Context(), Spec{
				Name:      "everything",
				Command:   command,
				Args:      args,
				Dir:       dir,
				Env:       append(os.Environ(), testserver.MarkerEnv+"="+marker),
				StdinWait: time.Second,
				TermWait:  2 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			newClient(p).initialize(t)

			var cmdlines []string
			nodes := 0
			for _, pid := range testserver.LiveProcesses(marker) {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
				cmdlines = append(cmdlines, strings.Join(argv, " "))
				switch {
				case argv[0] == command && len(argv) == 2 && argv[1] == args[0]:
					nodes++
				case argv[0] == shim.Name: // the pid-namespace init
				default:
					t.Errorf("the flattened tree has a process other than node and its init: %q", argv)
				}
			}
			if nodes != 1 {
				t.Errorf("%d node processes, want 1:\n%s", nodes, strings.Join(cmdlines, "\n"))
			}

			start := time.Now()
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if left := testserver.LiveProcesses(marker); len(left) > 0 {
				testserver.KillProcesses(marker)
				t.Fatalf("after Stop, processes of the flattened tree remain: %v", left)
			}
			if took > 3*time.Second+slack {
				t.Errorf("Stop took %v", took)
			}
			t.Logf("%d processes (%s) stopped in %v: %v", len(cmdlines), strings.Join(firstWords(cmdlines), ", "), took.Round(time.Millisecond), p.Status())
		})
	}
}
