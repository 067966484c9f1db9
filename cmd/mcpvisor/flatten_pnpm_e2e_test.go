package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// A server configured as `pnpm dlx @fx/server …`, with each line of pnpm
// (.deps/pnpm10, in JavaScript, and .deps/pnpm12, native; a fake registry
// on 127.0.0.1, pnpm's cache, store and config in the test's own
// directories): its first start runs pnpm dlx as written, which installs
// it; then it is resolved and every start after runs node and the bin
// directly, as pnpm's shim would — the server's args and env kept,
// NODE_PATH set as the shim sets it — with no pnpm in its tree, and ps
// and inspect say so. With pnpm's dlx cache removed, a start runs as
// written again (pnpm installs it again) and resolves again.
func TestFlattenedPNPMServer(t *testing.T) {
	for _, major := range []string{"10", "12"} {
		t.Run("pnpm"+major, func(t *testing.T) {
			t.Parallel()
			pnpm := filepath.Join(testserver.Deps(t, "pnpm"+major), "node_modules", ".bin", "pnpm")
			if _, err := os.Stat(pnpm); err != nil {
				t.Fatalf("pnpm %s is not installed: run scripts/test-deps.sh (%v)", major, err)
			}
			reg := testserver.NewNPMRegistry(t)
			reg.Publish(t, testserver.NPMPackage{Name: "@fx/server", Version: "1.0.0",
				Bin: map[string]string{"fx-server": "index.js"}, Files: map[string]string{"index.js": testserver.NodeMCPServer("1.0.0")}})
			home, cwd := t.TempDir(), t.TempDir()
			cache := filepath.Join(home, "cache")
			s := startServe(t, fmt.Sprintf(`{"mcpServers":{
				"fx":{"command":%q,"args":["dlx","@fx/server","--flag","v"],"cwd":%q,"idleTimeout":"0","env":{
					"npm_config_registry":%q,"pnpm_config_registry":%q,"npm_config_userconfig":%q,
					"XDG_CACHE_HOME":%q,"XDG_DATA_HOME":%q,"XDG_STATE_HOME":%q,"XDG_CONFIG_HOME":%q,
					"FIXTURE_ECHO":"from the config"}}}}`, pnpm, cwd, reg.URL, reg.URL, os.DevNull,
				cache, filepath.Join(home, "data"), filepath.Join(home, "state"), filepath.Join(home, "config")))
			stopAtCleanup(t, s)
			base, addr := s.base, strings.TrimPrefix(s.base, "http://")
			bin := func(args ...string) string {
				t.Helper()
				code, out, stderr := runBin(t, append(args, "--addr", addr)...)
				if code != 0 {
					t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
				}
				return out
			}

			// Learned at start, as written (pnpm installs it); then resolved.
			ls := waitLaunch(t, base, "fx", flattenedAt("1.0.0"))
			dlx := filepath.Join(cache, "pnpm", "dlx") + "/"
			if ls.Last != "as written" || ls.Runs != "pnpm dlx → node …/server@1.0.0" || !strings.HasPrefix(ls.Command[1], dlx) || !strings.HasPrefix(ls.NodePath, dlx) {
				t.Fatalf("after the first start: %+v", ls)
			}
			// The learn at start puts it to sleep; the resolution may end
			// first, and a call before the sleep would reach the process
			// started as written.
			waitDormant(t, base, "fx")
			w := callWhoami(t, base, "fx")
			if w.Version != "1.0.0" || !slices.Equal(w.Args, []string{"--flag", "v"}) || w.Echo != "from the config" {
				t.Fatalf("a flattened start: %+v", w)
			}
			checkFlatTree(t, base, "fx")
			var node int
			for _, p := range treePIDs(servers(t, base)["fx"].PID) {
				if argv := cmdlineOf(p); len(argv) > 1 && argv[1] == ls.Command[1] {
					node = p
				}
			}
			environ, err := os.ReadFile("/proc/" + strconv.Itoa(node) + "/environ")
			if err != nil || !slices.Contains(strings.Split(string(environ), "\x00"), "NODE_PATH="+ls.NodePath) {
				t.Errorf("the flattened node (pid %d) has no NODE_PATH=%s: %v", node, ls.NodePath, err)
			}
			if out := bin("ps"); !regexp.MustCompile(`\n  fx +pnpm dlx → node …/server@1\.0\.0\n`).MatchString(out) {
				t.Errorf("ps:\n%s", out)
			}
			if out := bin("inspect", "fx"); !strings.Contains(out, "pnpm dlx → node …/server@1.0.0 (flattened") || !strings.Contains(out, ls.Command[1]) || !strings.Contains(out, ls.NodePath+" (as pnpm dlx's bin sets it") {
				t.Errorf("inspect:\n%s", out)
			}

			// pnpm's dlx cache gone: as written (installed again), then
			// resolved again.
			bin("sleep", "fx")
			if err := os.RemoveAll(dlx); err != nil {
				t.Fatal(err)
			}
			if w := callWhoami(t, base, "fx"); w.Version != "1.0.0" || servers(t, base)["fx"].Launcher.Last != "as written" {
				t.Fatalf("with its files gone, a start ran %+v, %+v", w, servers(t, base)["fx"].Launcher)
			}
			waitLaunch(t, base, "fx", flattenedAt("1.0.0"))
			bin("sleep", "fx")
			if w := callWhoami(t, base, "fx"); w.Version != "1.0.0" {
				t.Fatalf("after resolving again, a start ran %+v", w)
			}
			checkFlatTree(t, base, "fx")
		})
	}
}
