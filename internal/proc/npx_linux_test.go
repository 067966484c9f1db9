package proc

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// TestNpxChain stops a real `npx -y @modelcontextprotocol/server-everything`
// tree: npm exec → sh -c → node. Signalling npm alone orphans node; the
// whole tree must go.
func TestNpxChain(t *testing.T) {
	dir := testserver.Deps(t, "npm")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			p, err := rt.Spawn(t.Context(), Spec{
				Name:      "everything",
				Command:   "npx",
				Args:      []string{"-y", "@modelcontextprotocol/server-everything"},
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
			for _, pid := range testserver.LiveProcesses(marker) {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				cmdlines = append(cmdlines, strings.ReplaceAll(strings.TrimSpace(string(b)), "\x00", " "))
			}
			all := strings.Join(cmdlines, "\n")
			for _, want := range []string{"npm exec", "sh -c", "node"} {
				if !strings.Contains(all, want) {
					t.Errorf("tree has no %q process:\n%s", want, all)
				}
			}

			start := time.Now()
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if left := testserver.LiveProcesses(marker); len(left) > 0 {
				testserver.KillProcesses(marker)
				t.Fatalf("after Stop, npx tree processes remain: %v", left)
			}
			if took > 3*time.Second+slack {
				t.Errorf("Stop took %v", took)
			}
			t.Logf("%d processes (%s) stopped in %v: %v", len(cmdlines), strings.Join(firstWords(cmdlines), ", "), took.Round(time.Millisecond), p.Status())
		})
	}
}

func firstWords(lines []string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 {
			f = f[:2]
		}
		out = append(out, strings.Join(f, " "))
	}
	return out
}
