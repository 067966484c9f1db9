package service

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenSpec has what a definition must carry through: spaces, '%', '$'
// and markup in paths, a PATH of its own.
func goldenSpec(goos string) Spec {
	return Spec{
		GOOS:       goos,
		Executable: "/opt/mcp visor/bin/mcpvisor",
		Config:     "/home/ada/100% sure/$HOME <&> config.json",
		StateDir:   "/home/ada/.local/state/mcpvisor",
		LogDir:     "/home/ada/.local/state/mcpvisor",
		Path:       `/home/ada/.local/bin:/opt/"node"/bin:/usr/bin:/bin`,
	}
}

// The definitions are golden: the systemd unit and the launchd agent,
// made on any OS from the same spec (go test ./internal/service -update
// rewrites them).
func TestDefinitionsGolden(t *testing.T) {
	for _, c := range []struct{ goos, file string }{{"linux", "mcpvisor.service"}, {"darwin", Label + ".plist"}} {
		got, err := Definition(goldenSpec(c.goos))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", c.file)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s:\n%s", c.goos, path, clientcfg.Diff(want, got, "want", "got"))
		}
	}
}

// The unit's settings, read back: the command line word by word as
// systemd splits it, and the stop, restart and kill settings against
// mcpvisor's own shutdown bound.
func TestSystemdUnitSettings(t *testing.T) {
	spec := goldenSpec("linux")
	spec.ShutdownTimeout = 25 * time.Second
	def, _ := Definition(spec)
	settings := map[string][]string{}
	for _, l := range strings.Split(string(def), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			settings[k] = append(settings[k], v)
		}
	}
	want := map[string]string{"Type": "exec", "Restart": "on-failure", "RestartSec": "2", "KillMode": "mixed",
		"KillSignal": "SIGTERM", "TimeoutStopSec": "45", "Delegate": "yes", "WantedBy": "default.target"}
	for k, v := range want {
		if got := settings[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s=%v, want %s", k, got, v)
		}
	}
	words := splitExec(t, settings["ExecStart"][0])
	wantWords := []string{spec.Executable, "serve", "--config", spec.Config, "--state-dir", spec.StateDir, "--shutdown-timeout", "25s"}
	if !slices.Equal(words, wantWords) {
		t.Errorf("ExecStart splits into %q, want %q", words, wantWords)
	}
	if env := splitExec(t, settings["Environment"][0]); len(env) != 1 || env[0] != "PATH="+spec.Path {
		t.Errorf("Environment %q", env)
	}
}

// splitExec splits a command line as systemd.service(5) says it does:
// words separated by spaces, double-quoted words with C escapes, "%%" a
// '%' and "$$" a '$'.
func splitExec(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		var w string
		if line[0] == '"' {
			end := 1
			for end < len(line) && line[end] != '"' {
				if line[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(line) {
				t.Fatalf("unterminated quote in %q", line)
			}
			var err error
			if w, err = strconv.Unquote(line[:end+1]); err != nil {
				t.Fatalf("%q: %v", line[:end+1], err)
			}
			line = line[end+1:]
		} else {
			w, line, _ = strings.Cut(line, " ")
		}
		words = append(words, strings.NewReplacer("%%", "%", "$$", "$").Replace(w))
	}
	return words
}

// plistValue decodes one property-list value (the element start opened),
// or fails the test: the file is XML a plist reader takes, each value of
// a type it knows.
func plistValue(t *testing.T, d *xml.Decoder, start xml.StartElement) any {
	t.Helper()
	switch start.Name.Local {
	case "dict":
		m := map[string]any{}
		for {
			key, ok := nextStart(t, d)
			if !ok {
				return m
			}
			if key.Name.Local != "key" {
				t.Fatalf("a dict holds %s where a key goes", key.Name.Local)
			}
			var k string
			if err := d.DecodeElement(&k, &key); err != nil {
				t.Fatal(err)
			}
			v, ok := nextStart(t, d)
			if !ok {
				t.Fatalf("key %s has no value", k)
			}
			if _, dup := m[k]; dup {
				t.Fatalf("key %s twice", k)
			}
			m[k] = plistValue(t, d, v)
		}
	case "array":
		var a []any
		for {
			v, ok := nextStart(t, d)
			if !ok {
				return a
			}
			a = append(a, plistValue(t, d, v))
		}
	case "string", "integer":
		var s string
		if err := d.DecodeElement(&s, &start); err != nil {
			t.Fatal(err)
		}
		if start.Name.Local == "string" {
			return s
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("integer %q", s)
		}
		return n
	case "true", "false":
		if err := d.Skip(); err != nil {
			t.Fatal(err)
		}
		return start.Name.Local == "true"
	}
	t.Fatalf("unknown plist element %s", start.Name.Local)
	return nil
}

// nextStart is the next element's start, or false at its parent's end.
func nextStart(t *testing.T, d *xml.Decoder) (xml.StartElement, bool) {
	t.Helper()
	for {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			return tok, true
		case xml.EndElement:
			return xml.StartElement{}, false
		case xml.CharData:
			if len(bytes.TrimSpace(tok)) > 0 {
				t.Fatalf("text %q between elements", tok)
			}
		}
	}
}

// parsePlist reads a whole property list: well-formed XML (no "--" in a
// comment, every string escaped), a plist root of version 1.0 holding one
// dict, nothing after it.
func parsePlist(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	root, ok := nextStart(t, d) // past the prolog: declaration, doctype, comment
	if !ok || root.Name.Local != "plist" || attr(root, "version") != "1.0" {
		t.Fatalf("root %+v", root)
	}
	dict, ok := nextStart(t, d)
	if !ok || dict.Name.Local != "dict" {
		t.Fatalf("the plist holds %+v, not a dict", dict)
	}
	m := plistValue(t, d, dict).(map[string]any)
	if _, ok := nextStart(t, d); ok {
		t.Fatal("more than one value in the plist")
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return m
		}
		if err != nil {
			t.Fatalf("after the plist: %v", err)
		}
		if cd, ok := tok.(xml.CharData); !ok || len(bytes.TrimSpace(cd)) > 0 {
			t.Fatalf("after the plist: %#v", tok)
		}
	}
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// The launchd agent is a well-formed property list (plutil is not on
// Linux: encoding/xml reads it, strictly) with the keys launchd needs,
// the arguments as given, and its stop timeout above mcpvisor's own.
func TestLaunchdPlistIsValid(t *testing.T) {
	spec := goldenSpec("darwin")
	def, err := Definition(spec)
	if err != nil {
		t.Fatal(err)
	}
	m := parsePlist(t, def)
	wantArgs := []any{spec.Executable, "serve", "--config", spec.Config, "--state-dir", spec.StateDir, "--shutdown-timeout", "10s"}
	if got, _ := m["ProgramArguments"].([]any); !slices.Equal(got, wantArgs) {
		t.Errorf("ProgramArguments %q, want %q", got, wantArgs)
	}
	log := "/home/ada/.local/state/mcpvisor/mcpvisor.log"
	for k, want := range map[string]any{
		"Label": Label, "RunAtLoad": true, "ProcessType": "Standard", "ExitTimeOut": int64(30),
		"StandardOutPath": log, "StandardErrorPath": log,
	} {
		if m[k] != want {
			t.Errorf("%s = %#v, want %#v", k, m[k], want)
		}
	}
	if ka, _ := m["KeepAlive"].(map[string]any); ka["SuccessfulExit"] != false || ka["Crashed"] != true {
		t.Errorf("KeepAlive %#v", m["KeepAlive"])
	}
	if env, _ := m["EnvironmentVariables"].(map[string]any); env["PATH"] != spec.Path {
		t.Errorf("EnvironmentVariables %#v", m["EnvironmentVariables"])
	}
	// The check can fail: a comment with "--" in it is not XML.
	bad := bytes.Replace(def, []byte("<!-- Standard"), []byte("<!-- --Standard"), 1)
	d := xml.NewDecoder(bytes.NewReader(bad))
	for {
		_, err := d.Token()
		if err == io.EOF {
			t.Fatal("a comment with -- in it read as XML")
		}
		if err != nil {
			break
		}
	}
}

// What cannot be written in a definition is refused, saying what.
func TestDefinitionRefuses(t *testing.T) {
	for _, c := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Config = "config.json" }, "the config file: \"config.json\" is not an absolute path"},
		{func(s *Spec) { s.Executable = "/bin/mcp\nvisor" }, "the mcpvisor binary: \"/bin/mcp\\nvisor\" has a control character"},
		{func(s *Spec) { s.Path = "/bin\x00" }, "PATH"},
		{func(s *Spec) { s.GOOS = "windows" }, "supports Linux"},
	} {
		s := goldenSpec("linux")
		c.edit(&s)
		if _, err := Definition(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", s, err, c.want)
		}
	}
	if _, err := Location("plan9", "/home/ada", ""); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Location on plan9: %v", err)
	}
}

// fakeRunner records every command instead of running it, and fails
// those named in fail with their output.
type fakeRunner struct {
	ran  [][]string
	fail map[string]string // shellLine → output
}

func (r *fakeRunner) Run(_ context.Context, argv ...string) ([]byte, error) {
	r.ran = append(r.ran, slices.Clone(argv))
	if out, ok := r.fail[shellLine(argv)]; ok {
		return []byte(out), errors.New("exit status 1")
	}
	return nil, nil
}

// host is a user whose home is a temporary directory.
func host(t *testing.T, goos string) (Host, *fakeRunner, *bytes.Buffer) {
	t.Helper()
	r := &fakeRunner{fail: map[string]string{}}
	out := &bytes.Buffer{}
	home := t.TempDir()
	return Host{GOOS: goos, Home: home, XDGConfigHome: filepath.Join(home, "xdg"), UID: 501, User: "ada",
		LingerDir: t.TempDir(), Runner: r, Out: out}, r, out
}

func argvs(lines ...string) [][]string {
	var out [][]string
	for _, l := range lines {
		out = append(out, strings.Fields(l))
	}
	return out
}

// Installing on Linux: the unit is written under $XDG_CONFIG_HOME, the
// manager reloaded and the unit enabled and started; lingering is
// suggested while the user has none. Installing the same again runs
// nothing; a different one is refused, its difference shown, the file
// untouched, until --force replaces it and restarts the service.
// Uninstalling stops and disables it, removes the unit and reloads.
func TestInstallUninstallSystemd(t *testing.T) {
	h, r, out := host(t, "linux")
	ctx := context.Background()
	spec := goldenSpec("")
	path := filepath.Join(h.XDGConfigHome, "systemd", "user", Unit)
	if err := Install(ctx, h, spec, Options{}); err != nil {
		t.Fatal(err)
	}
	want, _ := Definition(goldenSpec("linux"))
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the unit at %s: %v\n%s", path, err, got)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	if w := argvs("systemctl --user daemon-reload", "systemctl --user enable --now mcpvisor.service"); !slices.EqualFunc(r.ran, w, slices.Equal) {
		t.Errorf("ran %q, want %q", r.ran, w)
	}
	if !strings.Contains(out.String(), "loginctl enable-linger ada") {
		t.Errorf("no lingering hint:\n%s", out)
	}

	// Lingering already: no hint. The same unit: nothing run.
	if err := os.WriteFile(filepath.Join(h.LingerDir, "ada"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.ran = nil
	out.Reset()
	if err := Install(ctx, h, spec, Options{}); err != nil || r.ran != nil || !strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("installing the same again: %v, ran %q\n%s", err, r.ran, out)
	}

	// A different one: refused with its difference, then forced.
	other := spec
	other.ShutdownTimeout = 20 * time.Second
	out.Reset()
	err := Install(ctx, h, other, Options{})
	if !errors.Is(err, ErrExists) || r.ran != nil {
		t.Fatalf("a different unit without --force: %v, ran %q", err, r.ran)
	}
	if !strings.Contains(out.String(), "-TimeoutStopSec=30\n") || !strings.Contains(out.String(), "+TimeoutStopSec=40\n") {
		t.Errorf("the difference shown:\n%s", out)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatal("the unit changed without --force")
	}
	out.Reset()
	if err := Install(ctx, h, other, Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	if w := argvs("systemctl --user daemon-reload", "systemctl --user enable mcpvisor.service", "systemctl --user restart mcpvisor.service"); !slices.EqualFunc(r.ran, w, slices.Equal) {
		t.Errorf("ran %q, want %q", r.ran, w)
	}
	if strings.Contains(out.String(), "enable-linger ada") {
		t.Errorf("a lingering hint for a user who lingers:\n%s", out)
	}

	r.ran = nil
	if err := Uninstall(ctx, h, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unit is still there: %v", err)
	}
	if w := argvs("systemctl --user disable --now mcpvisor.service", "systemctl --user daemon-reload"); !slices.EqualFunc(r.ran, w, slices.Equal) {
		t.Errorf("ran %q, want %q", r.ran, w)
	}
	r.ran = nil
	out.Reset()
	if err := Uninstall(ctx, h, Options{}); err != nil || r.ran != nil || !strings.Contains(out.String(), "nothing to do") {
		t.Errorf("uninstalling nothing: %v, ran %q\n%s", err, r.ran, out)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 0 {
		t.Errorf("left in %s: %v", filepath.Dir(path), entries)
	}
}

// --dry-run writes nothing and runs nothing, and says what it would.
func TestDryRun(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		h, r, out := host(t, goos)
		path, _ := Location(goos, h.Home, h.XDGConfigHome)
		if err := Install(context.Background(), h, goldenSpec(""), Options{DryRun: true}); err != nil {
			t.Fatal(err)
		}
		def, _ := Definition(goldenSpec(goos))
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) || r.ran != nil {
			t.Fatalf("%s: a dry run wrote (%v) or ran %q", goos, err, r.ran)
		}
		if !strings.Contains(out.String(), "would write "+path+":\n"+string(def)) || !strings.Contains(out.String(), "would run: ") {
			t.Errorf("%s: the dry run said\n%s", goos, out)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := clientcfg.WriteFileAtomic(path, def, 0o644); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if err := Uninstall(context.Background(), h, Options{DryRun: true}); err != nil || r.ran != nil {
			t.Fatalf("%s: uninstall dry run: %v, ran %q", goos, err, r.ran)
		}
		if _, err := os.Stat(path); err != nil || !strings.Contains(out.String(), "would remove "+path) {
			t.Errorf("%s: after the uninstall dry run: %v\n%s", goos, err, out)
		}
	}
}

// macOS: the agent goes to ~/Library/LaunchAgents (its log's directory
// made first) and is bootstrapped in the user's GUI domain; replacing it boots the old one out first (not
// loaded: said, and the install goes on); uninstall boots it out (same)
// and removes it.
func TestInstallUninstallLaunchd(t *testing.T) {
	h, r, out := host(t, "darwin")
	ctx := context.Background()
	path := filepath.Join(h.Home, "Library", "LaunchAgents", Label+".plist")
	spec := goldenSpec("")
	spec.LogDir = filepath.Join(h.Home, "state")
	if err := Install(ctx, h, spec, Options{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(spec.LogDir); err != nil || !fi.IsDir() {
		t.Errorf("the log directory was not made: %v", err)
	}
	if w := [][]string{{"launchctl", "bootstrap", "gui/501", path}}; !slices.EqualFunc(r.ran, w, slices.Equal) {
		t.Errorf("ran %q, want %q", r.ran, w)
	}
	r.ran = nil
	r.fail["launchctl bootout gui/501/"+Label] = "Boot-out failed: 3: No such process"
	other := spec
	other.Path = "/usr/bin"
	if err := Install(ctx, h, other, Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	if w := [][]string{{"launchctl", "bootout", "gui/501/" + Label}, {"launchctl", "bootstrap", "gui/501", path}}; !slices.EqualFunc(r.ran, w, slices.Equal) {
		t.Errorf("ran %q, want %q", r.ran, w)
	}
	if !strings.Contains(out.String(), "No such process: going on") {
		t.Errorf("the bootout's failure not said:\n%s", out)
	}
	r.ran = nil
	if err := Uninstall(ctx, h, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) || len(r.ran) != 1 {
		t.Errorf("after uninstall: %v, ran %q", err, r.ran)
	}
}

// A failing manager command: install says which and what it printed, and
// the unit stays written; uninstall keeps the unit when the service cannot
// be stopped. A unit mcpvisor did not write is not removed without
// --force.
func TestFailuresAndForeignUnits(t *testing.T) {
	h, r, _ := host(t, "linux")
	ctx := context.Background()
	path, _ := Location("linux", h.Home, h.XDGConfigHome)
	r.fail["systemctl --user daemon-reload"] = "Failed to connect to bus: No medium found"
	err := Install(ctx, h, goldenSpec(""), Options{})
	if err == nil || !strings.Contains(err.Error(), "systemctl --user daemon-reload failed") || !strings.Contains(err.Error(), "No medium found") {
		t.Fatalf("install with no user bus: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the unit is not kept: %v", err)
	}
	if len(r.ran) != 1 {
		t.Errorf("went on after the failure: %q", r.ran)
	}
	r.fail["systemctl --user disable --now mcpvisor.service"] = "Failed to connect to bus"
	if err := Uninstall(ctx, h, Options{}); err == nil || !strings.Contains(err.Error(), "is kept") {
		t.Errorf("uninstall when the service cannot be stopped: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the unit went: %v", err)
	}

	foreign := []byte("[Service]\nExecStart=/usr/bin/something-else\n")
	if err := os.WriteFile(path, foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	r.fail, r.ran = nil, nil
	if err := Uninstall(ctx, h, Options{}); !errors.Is(err, ErrNotOurs) || r.ran != nil {
		t.Errorf("uninstall of a unit not ours: %v, ran %q", err, r.ran)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, foreign) {
		t.Error("a unit not ours changed")
	}
	if err := Uninstall(ctx, h, Options{Force: true}); err != nil {
		t.Errorf("forced: %v", err)
	}
}

// ExecRunner's commands are bounded by their context: one that would run
// for a minute ends with it, as an error.
func TestExecRunnerIsBoundedByCtx(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ExecRunner{}.Run(ctx, "sleep", "60")
	if err == nil || time.Since(start) > 30*time.Second {
		t.Fatalf("sleep 60 under a 100 ms context: %v after %v", err, time.Since(start))
	}
	out, err := ExecRunner{}.Run(context.Background(), "sh", "-c", "echo out; echo err >&2; exit 3")
	if err == nil || string(out) != "out\nerr\n" {
		t.Errorf("a failing command: %v, printed %q (stdout and stderr, both)", err, out)
	}
}

// ExecRunner bounds each command by its Timeout, and a command that
// exited leaving a grandchild with its output pipe open returns (with
// its output, no error) instead of waiting for the grandchild.
func TestExecRunnerIsBounded(t *testing.T) {
	start := time.Now()
	_, err := ExecRunner{Timeout: 100 * time.Millisecond}.Run(context.Background(), "sleep", "60")
	if err == nil || !strings.Contains(err.Error(), "did not finish within 100ms") || time.Since(start) > 30*time.Second {
		t.Fatalf("sleep 60 under a 100 ms Timeout: %v after %v", err, time.Since(start))
	}

	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	start = time.Now()
	out, err := ExecRunner{}.Run(context.Background(), "sh", "-c", "echo started; sleep 60 & echo $! > "+pidFile)
	if err != nil || string(out) != "started\n" || time.Since(start) > 30*time.Second {
		t.Fatalf("a command that left a grandchild holding its output: %v, printed %q, after %v", err, out, time.Since(start))
	}
}

// Installed finds only a definition install wrote (its Marker); Start
// runs the manager's start command and nothing else.
func TestInstalledAndStart(t *testing.T) {
	for _, c := range []struct{ goos, start string }{
		{"linux", "systemctl --user start mcpvisor.service"},
		{"darwin", "launchctl kickstart gui/501/" + Label},
	} {
		h, r, out := host(t, c.goos)
		path, _ := Location(c.goos, h.Home, h.XDGConfigHome)
		if _, ok := Installed(h); ok {
			t.Errorf("%s: Installed with no file", c.goos)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := clientcfg.WriteFileAtomic(path, []byte("not ours\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok := Installed(h); ok {
			t.Errorf("%s: Installed on a file without the marker", c.goos)
		}
		if err := Install(context.Background(), h, Spec{Executable: "/bin/mcpvisor", Config: "/c.json"}, Options{Force: true}); err != nil {
			t.Fatal(err)
		}
		if got, ok := Installed(h); !ok || got != path {
			t.Errorf("%s: Installed = %q %v after install, want %s", c.goos, got, ok, path)
		}
		r.ran = nil
		_ = out
		if err := Start(context.Background(), h); err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(r.ran, argvs(c.start), slices.Equal) {
			t.Errorf("%s: Start ran %q, want %q", c.goos, r.ran, c.start)
		}
		r.fail[c.start] = "no such unit"
		if err := Start(context.Background(), h); err == nil || !strings.Contains(err.Error(), c.start+" failed") || !strings.Contains(err.Error(), "no such unit") {
			t.Errorf("%s: a failing start: %v", c.goos, err)
		}
	}
}
