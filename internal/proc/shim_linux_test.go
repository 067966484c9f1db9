package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// The pid namespace's init is the given shim binary when it passes its
// probe, and the running binary re-executed when the shim is missing,
// fails, or speaks another protocol version; servers start and stop
// cleanly either way.
func TestShimChoice(t *testing.T) {
	built := withShim(t, Options{ShimPath: shimBinary}).ShimPath
	dir := t.TempDir()
	broken := installFile(t, filepath.Join(dir, "broken-shim"), []byte("#!/bin/sh\nexit 3\n"), "755")
	// A wrapper script that runs the shim: scripts are exec'd by path.
	wrapper := installFile(t, filepath.Join(dir, "wrapper-shim"), []byte("#!/bin/sh\nexec "+built+" \"$@\"\n"), "755")
	// A binary that exits 0 without answering the probe: another version
	// of the shim, or no shim at all.
	trueBin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	other := installFile(t, filepath.Join(dir, "other-version-shim"), trueBin, "755")
	notExec := installFile(t, filepath.Join(dir, "not-executable"), trueBin, "644")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, shim, init, detail string
	}{
		{"binary", built, built, "init: " + built},
		{"wrapper-script", wrapper, built, "init: " + wrapper},
		{"broken", broken, self, broken + " failed its probe (exit status 3)"},
		{"other-version", other, self, other + ` failed its probe (answered "", not "probe-1"`},
		{"not-executable", notExec, self, notExec + " failed its probe"},
		{"missing", filepath.Join(dir, "none"), self, "none failed its probe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := openRuntime(t, Options{ShimPath: c.shim, NoCgroup: true})
			var detail string
			for _, l := range rt.Report().Layers {
				if l.Name == LayerPIDNamespace && l.Active {
					detail = l.Detail
				}
			}
			if !strings.Contains(detail, c.detail) {
				t.Fatalf("pid-namespace layer %q, want it to say %q:\n%s", detail, c.detail, rt.Report())
			}
			marker := testserver.NewMarker(t)
			p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker))
			if err != nil {
				t.Fatal(err)
			}
			newClient(p).initialize(t)
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid()))
			if err != nil {
				t.Fatal(err)
			}
			// An init's file may be replaced while it runs (another test
			// binary rebuilds the shared shim): the link then says so.
			if exe = strings.TrimSuffix(exe, " (deleted)"); exe != c.init {
				t.Errorf("the server's init runs %s, want %s", exe, c.init)
			}
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.Pid())); strings.TrimSpace(string(comm)) != "mcpvisor-shim" {
				t.Errorf("the init shows in ps as %q", comm)
			}
			if err := p.Stop(context.Background()); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if st := p.Status(); st.Kind != ExitStopped {
				t.Errorf("status %v, want stopped", st)
			}
			testserver.WaitGone(t, marker, 0)
		})
	}
}

// TreeUsage sums the resident memory of a server's whole tree: the init,
// the server and what the server started.
func TestTreeUsageMemory(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rt := openRuntime(t, m.opts)
			marker := testserver.NewMarker(t)
			p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker, "FIXTURE_SETSID_CHILD=1", "FIXTURE_STDOUT_CHILD=1"))
			if err != nil {
				t.Fatal(err)
			}
			newClient(p).initialize(t)
			want := 3
			if rt.Report().Active(LayerPIDNamespace) {
				want++
			}
			waitCount(t, marker, want)
			var sum uint64
			for _, pid := range testserver.LiveProcesses(marker) {
				st, ok := readStat(pid)
				if !ok {
					t.Fatalf("pid %d: no stat", pid)
				}
				sum += st.rss * uint64(os.Getpagesize())
			}
			usage, alive := TreeUsage([]Root{p.Root(), {PID: 1 << 30}})
			got, ok := usage[0].MemoryBytes, alive[0]
			if !ok || alive[1] || float64(got) < 0.8*float64(sum) || float64(got) > 1.25*float64(sum) {
				t.Errorf("tree memory %d (found %v), want about %d, the sum over the %d processes", got, ok, sum, want)
			}
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if usage, alive := TreeUsage([]Root{p.Root()}); alive[0] {
				t.Errorf("a stopped tree has %d bytes", usage[0].MemoryBytes)
			}
			t.Logf("%d processes, %.1f MB", want, float64(got)/(1<<20))
		})
	}
}

// The init that passed the probe is the one that runs, even when an
// upgrade removes or replaces its file while mcpvisor runs.
func TestShimRemovedAfterOpen(t *testing.T) {
	built := withShim(t, Options{ShimPath: shimBinary}).ShimPath
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	shimCopy := installFile(t, filepath.Join(t.TempDir(), "mcpvisor-shim"), b, "755")
	rt := openRuntime(t, Options{ShimPath: shimCopy, NoCgroup: true})
	if err := os.Remove(shimCopy); err != nil {
		t.Fatal(err)
	}
	marker := testserver.NewMarker(t)
	p, err := rt.Spawn(t.Context(), fixtureSpec(t, marker))
	if err != nil {
		t.Fatalf("Spawn after the shim's file went: %v", err)
	}
	newClient(p).initialize(t)
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid())); exe != shimCopy+" (deleted)" {
		t.Errorf("the init runs %q, want the removed %s", exe, shimCopy)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	testserver.WaitGone(t, marker, 0)
}

// installFile writes content to path with mode through install(1): a file
// this test binary held open for writing could leak into a concurrent
// fork, and exec'ing it would then fail with ETXTBSY.
func installFile(t *testing.T, path string, content []byte, mode string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "content")
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("install", "-m", mode, src, path).CombinedOutput(); err != nil {
		t.Fatalf("install %s: %v %s", path, err, out)
	}
	return path
}
