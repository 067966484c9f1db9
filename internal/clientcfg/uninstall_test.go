package clientcfg

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUninstallSplicesIntoAChangedFile: a client that rewrote its file
// since install-client (Claude Code keeps its state in ~/.claude.json)
// keeps what it wrote: uninstall puts back only the server entries
// install-client changed. Per server they go back in place, byte for
// byte; an entry install-client wrote that changed since is a conflict,
// put back only with force.
func TestUninstallSplicesIntoAChangedFile(t *testing.T) {
	for _, g := range goldenFiles {
		t.Run(g.client, func(t *testing.T) {
			c := Lookup(g.client)
			orig, err := os.ReadFile(filepath.Join("testdata", g.file))
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.Read(orig, g.format)
			if err != nil {
				t.Fatal(err)
			}
			// what the client writes since: a key outside the servers
			state := func(data []byte) []byte {
				if g.format == FormatCodex {
					return bytes.Replace(data, []byte(`model = "gpt-5"`), []byte(`model = "gpt-6"`), 1)
				}
				i := bytes.IndexByte(data, '{')
				return slices.Concat(data[:i+1], []byte(`"clientState": 1,`), data[i+1:])
			}
			for _, per := range []bool{false, true} {
				plan, err := c.PlanInstall(orig, g.format, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json", PerServer: per, Known: f.Servers})
				if err != nil || len(plan.Taken) == 0 {
					t.Fatalf("install: %v, taken %v", err, plan.Taken)
				}
				cur := state(plan.Data)
				out, conflicts, err := c.PlanUninstall(orig, plan.Data, cur, g.format, false)
				if err != nil || len(conflicts) > 0 {
					t.Fatalf("per-server=%v: %v, conflicts %v", per, err, conflicts)
				}
				want := state(orig)
				if per && !bytes.Equal(out, want) {
					t.Errorf("per-server: not the original with the client's change:\n%s", Diff(want, out, "want", "got"))
				}
				back, err := c.Read(out, g.format)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(out, []byte(`"clientState": 1,`)) && !bytes.Contains(out, []byte("gpt-6")) {
					t.Errorf("the client's change is gone:\n%s", out)
				}
				if len(back.Servers) != len(f.Servers) {
					t.Errorf("per-server=%v: %d servers back, want %d:\n%s", per, len(back.Servers), len(f.Servers), out)
				}
				for _, s := range f.Servers {
					var b *Server
					if i := slices.IndexFunc(back.Servers, func(b *Server) bool { return b.At == s.At }); i >= 0 {
						b = back.Servers[i]
					}
					if b == nil || !SameLaunch(b, s) || b.IsConnect() {
						t.Errorf("per-server=%v: %s not put back:\n%s", per, s.At, out)
					}
				}
				// The user edits an entry install-client wrote: the
				// first in the file.
				taken := []string{EntryName}
				if per {
					taken = plan.Taken
				}
				edited := bytes.Replace(cur, []byte(`"connect"`), []byte(`"connect", "--verbose"`), 1)
				if g.format == FormatCodex {
					edited = bytes.Replace(cur, []byte(`"connect",`), []byte(`"connect", "--verbose",`), 1)
				}
				out, conflicts, err = c.PlanUninstall(orig, plan.Data, edited, g.format, false)
				if err != nil || out != nil || len(conflicts) != 1 || !slices.ContainsFunc(taken, func(n string) bool { return strings.HasSuffix(conflicts[0], "."+n) }) {
					t.Errorf("per-server=%v: an edited entry: out %v, conflicts %v (want %s), %v", per, out != nil, conflicts, taken, err)
				}
				out, _, err = c.PlanUninstall(orig, plan.Data, edited, g.format, true)
				if err != nil || bytes.Contains(out, []byte("--verbose")) || bytes.Contains(out, []byte("/bin/mcpvisor")) {
					t.Errorf("per-server=%v: forced: %v\n%s", per, err, out)
				}
			}
		})
	}
}
