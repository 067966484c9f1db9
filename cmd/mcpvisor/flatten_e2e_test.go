package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// fxWhoami is what the npm fixture's tool says of its process.
type fxWhoami struct {
	Version string   `json:"version"`
	Args    []string `json:"args"`
	ViaNpm  bool     `json:"viaNpm"`
	Echo    string   `json:"echo"`
}

// callWhoami calls the fixture's tool on /servers/name/mcp (waking the
// server if it sleeps).
func callWhoami(t *testing.T, base, name string) fxWhoami {
	t.Helper()
	sess := connectHTTP(t, base+"/servers/"+name+"/mcp", nil)
	defer sess.Close()
	out, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami"})
	if err != nil || out.IsError {
		t.Fatalf("whoami on %s: %v %v", name, out, err)
	}
	var w fxWhoami
	if err := json.Unmarshal([]byte(text(out)), &w); err != nil {
		t.Fatalf("whoami on %s said %q", name, text(out))
	}
	return w
}

// waitLaunch waits until the server's launch status satisfies ok.
func waitLaunch(t *testing.T, base, name string, ok func(*launch.Status) bool) *launch.Status {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ls := servers(t, base)[name].Launcher
		if ls != nil && ok(ls) {
			return ls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: launch %+v after 90s", name, ls)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func flattenedAt(version string) func(*launch.Status) bool {
	return func(ls *launch.Status) bool { return ls.Flattened && ls.Version == version }
}

// treeOf lists the command lines of the live processes of the tree of
// pid (pid and its descendants).
func treeOf(pid int) [][]string {
	var out [][]string
	for _, p := range treePIDs(pid) {
		if argv := cmdlineOf(p); argv != nil {
			out = append(out, argv)
		}
	}
	return out
}

// cmdlineOf is the command line of the live process pid, nil if it is
// gone.
func cmdlineOf(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// treePIDs lists the live processes of the tree of pid: pid and its
// descendants.
func treePIDs(pid int) []int {
	var out []int
	var walk func(int)
	walk = func(p int) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(p)); err != nil {
			return
		}
		out = append(out, p)
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, task := range tasks {
			kids, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + task.Name() + "/children")
			for _, k := range strings.Fields(string(kids)) {
				if c, err := strconv.Atoi(k); err == nil {
					walk(c)
				}
			}
		}
	}
	walk(pid)
	return out
}

// checkFlatTree checks that the server's running tree is node running
// the resolved bin, under the pid-namespace init where there is one, and
// no launcher.
func checkFlatTree(t *testing.T, base, name string) {
	t.Helper()
	st := servers(t, base)[name]
	if st.PID == 0 || st.Launcher == nil || st.Launcher.Last != "flattened" {
		t.Fatalf("%s: %+v", name, st)
	}
	tree := treeOf(st.PID)
	node := 0
	for _, argv := range tree {
		switch {
		case slices.Equal(argv[:min(len(argv), len(st.Launcher.Command))], st.Launcher.Command):
			node++
		case argv[0] == "mcpvisor-shim":
		default:
			t.Errorf("%s: the flattened tree runs %q", name, argv)
		}
	}
	if node != 1 {
		t.Errorf("%s: the flattened tree %q has %d node processes running %q, want 1", name, tree, node, st.Launcher.Command)
	}
}

// A server configured as `npx -y @fx/server …` (a fake registry on
// 127.0.0.1, an npm cache of its own): its first start runs npx as
// written, which installs it; then it is resolved and every start after
// runs node and the bin directly — the server's args and env kept — and
// ps and inspect say so. mcpvisor refresh, after a newer version is
// published, finds it not installed: the next start runs as written
// (installs it), and the one after runs it flattened. With the npx cache
// removed, a start runs as written again and resolves again. refresh
// refuses a server with no launcher.
func TestFlattenedNPMServer(t *testing.T) {
	reg := testserver.NewNPMRegistry(t)
	publish := func(v string) {
		reg.Publish(t, testserver.NPMPackage{Name: "@fx/server", Version: v,
			Bin: map[string]string{"fx-server": "index.js"}, Files: map[string]string{"index.js": testserver.NodeMCPServer(v)}})
	}
	publish("1.0.0")
	cache, cwd := t.TempDir(), t.TempDir()
	s := startServe(t, fmt.Sprintf(`{"mcpServers":{
		"fx":{"command":"npx","args":["-y","@fx/server","--flag","v"],"cwd":%q,"idleTimeout":"0","env":{
			"npm_config_registry":%q,"npm_config_cache":%q,"npm_config_userconfig":%q,"npm_config_update_notifier":"false",
			"npm_config_audit":"false","npm_config_fund":"false","FIXTURE_ECHO":"from the config"}},
		"plain":{"command":%q}}}`, cwd, reg.URL, cache, os.DevNull, testserver.Build(t)))
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")
	bin := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, stderr := runBin(t, append(args, "--addr", addr)...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, want, out, stderr)
		}
		return out, stderr
	}

	// Learned at start, as written (npx installs it); then resolved.
	ls := waitLaunch(t, base, "fx", flattenedAt("1.0.0"))
	if ls.Last != "as written" || ls.Runs != "npx → node …/server@1.0.0" || !strings.HasPrefix(ls.Command[1], filepath.Join(cache, "_npx")) {
		t.Fatalf("after the first start: %+v", ls)
	}
	// The learn at start puts it to sleep; the resolution may end
	// first, and a call before the sleep would reach the process
	// started as written.
	waitDormant(t, base, "fx")
	w := callWhoami(t, base, "fx")
	if w.ViaNpm || w.Version != "1.0.0" || !slices.Equal(w.Args, []string{"--flag", "v"}) || w.Echo != "from the config" {
		t.Fatalf("a flattened start: %+v", w)
	}
	checkFlatTree(t, base, "fx")
	if out, _ := bin(0, "ps"); !regexp.MustCompile(`\n  fx +npx → node …/server@1\.0\.0\n`).MatchString(out) {
		t.Errorf("ps:\n%s", out)
	}
	if out, _ := bin(0, "inspect", "fx"); !strings.Contains(out, "npx → node …/server@1.0.0 (flattened") || !strings.Contains(out, ls.Command[1]) {
		t.Errorf("inspect:\n%s", out)
	}

	publish("1.1.0")
	out, _ := bin(0, "refresh", "fx")
	if !strings.Contains(out, "fx: npx as written: not installed: npm would install @fx/server@1.1.0 (it has @fx/server@1.0.0)") ||
		!strings.Contains(out, "started flattened; this applies from its next start") {
		t.Fatalf("refresh printed %q", out)
	}
	if w := callWhoami(t, base, "fx"); w.Version != "1.0.0" || w.ViaNpm {
		t.Fatalf("the running process changed at the refresh: %+v", w)
	}
	bin(0, "sleep", "fx")
	if w := callWhoami(t, base, "fx"); w.Version != "1.1.0" || !w.ViaNpm {
		t.Fatalf("the start after the refresh: %+v; want 1.1.0 as written", w)
	}
	waitLaunch(t, base, "fx", flattenedAt("1.1.0"))
	bin(0, "sleep", "fx")
	if w := callWhoami(t, base, "fx"); w.Version != "1.1.0" || w.ViaNpm {
		t.Fatalf("the start after that: %+v; want 1.1.0 flattened", w)
	}

	// The npx cache gone: as written (reinstalled), then resolved again.
	bin(0, "sleep", "fx")
	if err := os.RemoveAll(filepath.Join(cache, "_npx")); err != nil {
		t.Fatal(err)
	}
	if w := callWhoami(t, base, "fx"); !w.ViaNpm {
		t.Fatalf("with its files gone, a start ran %+v", w)
	}
	waitLaunch(t, base, "fx", flattenedAt("1.1.0"))
	bin(0, "sleep", "fx")
	if w := callWhoami(t, base, "fx"); w.ViaNpm {
		t.Fatalf("after resolving again, a start ran %+v", w)
	}

	if _, stderr := bin(1, "refresh", "plain"); !strings.Contains(stderr, "not a package launcher") {
		t.Errorf("refresh of a server with no launcher: %q", stderr)
	}
	if out, _ := bin(0, "refresh"); !strings.Contains(out, "fx: npx → node …/server@1.1.0") || strings.Contains(out, "plain") {
		t.Errorf("refresh of every launcher printed %q", out)
	}
	var answers []struct {
		Server string       `json:"server"`
		OK     bool         `json:"ok"`
		Status fleet.Status `json:"status"`
	}
	if out, _ := bin(0, "refresh", "--json"); json.Unmarshal([]byte(out), &answers) != nil || len(answers) != 1 ||
		answers[0].Server != "fx" || !answers[0].OK || answers[0].Status.Launcher == nil || !answers[0].Status.Launcher.Flattened {
		t.Errorf("refresh --json printed %q", out)
	}
}

// A flattened Node server is given node's module compile cache in
// mcpvisor's state directory (node 22 here, from .deps): its process has
// NODE_COMPILE_CACHE set to the directory the status names, the cache is
// written when it goes to sleep (it exits by itself when its stdin ends),
// and the next start compiles nothing the cache holds — node says so
// (NODE_DEBUG_NATIVE=COMPILE_CACHE) for the server's own modules. A
// server whose environment turns the cache off keeps it off.
func TestFlattenedNodeServerKeepsACompileCache(t *testing.T) {
	node, _ := node22(t)
	project := testserver.Deps(t, "npm")
	server := func(extra string) string {
		return fmt.Sprintf(`{"command":"npx","args":["-y","@modelcontextprotocol/server-everything"],"cwd":%q,"idleTimeout":"0",
			"env":{"PATH":%q,"npm_config_userconfig":%q,"npm_config_update_notifier":"false","NODE_DEBUG_NATIVE":"COMPILE_CACHE"%s}}`,
			project, filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"), os.DevNull, extra)
	}
	s := startServe(t, `{"mcpServers":{"ev":`+server("")+`,"off":`+server(`,"NODE_DISABLE_COMPILE_CACHE":"1"`)+`}}`)
	stopAtCleanup(t, s)
	base, addr := s.base, strings.TrimPrefix(s.base, "http://")

	ls := waitLaunch(t, base, "ev", func(ls *launch.Status) bool { return ls.Flattened })
	cache := ls.CompileCache
	if !filepath.IsAbs(cache) || ls.Command[0] != node {
		t.Fatalf("flattened ev: %+v; want node %s and an absolute compile cache directory", ls, node)
	}
	if off := waitLaunch(t, base, "off", func(ls *launch.Status) bool { return ls.Flattened }); off.CompileCache != "" || off.CompileCacheSetBy != "NODE_DISABLE_COMPILE_CACHE" {
		t.Errorf("off's status: compile cache %q set by %q", off.CompileCache, off.CompileCacheSetBy)
	}
	if code, out, _ := runBin(t, "inspect", "off", "--addr", addr); code != 0 || !strings.Contains(out, "NODE_DISABLE_COMPILE_CACHE is set") {
		t.Errorf("inspect off (exit %d):\n%s", code, out)
	}
	if code, out, _ := runBin(t, "inspect", "ev", "--addr", addr); code != 0 || !strings.Contains(out, cache) {
		t.Errorf("inspect ev (exit %d) does not name the compile cache %s:\n%s", code, cache, out)
	}
	// nodeEnv is the environment of the server's node process.
	nodeEnv := func(name string) []string {
		t.Helper()
		st := servers(t, base)[name]
		for _, pid := range treePIDs(st.PID) {
			if argv := cmdlineOf(pid); len(argv) > 0 && argv[0] == node {
				b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
				if err != nil {
					t.Fatal(err)
				}
				return strings.Split(string(b), "\x00")
			}
		}
		t.Fatalf("%s: no node in the tree of %d: %q", name, st.PID, treeOf(st.PID))
		return nil
	}
	echo := func(name string) {
		t.Helper()
		sess := connectHTTP(t, base+"/servers/"+name+"/mcp", nil)
		defer sess.Close()
		out, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
		if err != nil || out.IsError || !strings.Contains(text(out), "hi") {
			t.Fatalf("echo on %s: %v %v", name, out, err)
		}
	}
	sleep := func(name string) {
		t.Helper()
		if code, out, stderr := runBin(t, "sleep", name, "--addr", addr); code != 0 {
			t.Fatalf("sleep %s: exit %d\n%s%s", name, code, out, stderr)
		}
	}
	cached := func() int {
		n := 0
		filepath.WalkDir(cache, func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		return n
	}

	echo("ev")
	if env := nodeEnv("ev"); !slices.Contains(env, "NODE_COMPILE_CACHE="+cache) {
		t.Fatalf("ev's node has no NODE_COMPILE_CACHE=%s", cache)
	}
	echo("off")
	if env := nodeEnv("off"); slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "NODE_COMPILE_CACHE=") }) {
		t.Errorf("off's node was given a compile cache")
	}
	sleep("off")
	before := cached()
	sleep("ev")
	if n := cached(); n == 0 || n <= before {
		t.Fatalf("%d files in %s after ev went to sleep (%d before): node wrote no cache", n, cache, before)
	}

	echo("ev")
	pid := servers(t, base)["ev"].PID
	_, out, _ := runBin(t, "logs", "ev", "--json", "--tail", "1000", "--addr", addr)
	accepted := 0
	for line := range strings.Lines(out) {
		var e struct {
			PID  int    `json:"pid"`
			Line string `json:"line"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.PID == pid &&
			strings.Contains(e.Line, "server-everything/dist/") && strings.Contains(e.Line, "was accepted") {
			accepted++
		}
	}
	if accepted < 10 {
		t.Errorf("the start after a sleep took %d of server-everything's modules from the compile cache, want them all", accepted)
	}
}

// waitDormant waits until the admin API says name is dormant.
func waitDormant(t *testing.T, base, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/api/servers/" + name)
		if err == nil {
			var st struct {
				State string `json:"state"`
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.State == "dormant" {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not go dormant", name)
}
