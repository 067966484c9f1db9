package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Resolution is how to run a launcher's package without the launcher: the
// interpreter its bin needs and the bin's script, found where the user's
// package manager installed them.
type Resolution struct {
	Launcher string `json:"launcher"`
	// Command is the interpreter, an absolute path: the node the bin's
	// #! line finds on the PATH the launcher gives it.
	Command string `json:"command"`
	// Args go before the server's own arguments: the interpreter's
	// options from the bin's #! line, if any, then the bin's script (an
	// absolute path, symlinks resolved).
	Args []string `json:"args"`
	// Bin is the name of the bin the launcher runs.
	Bin string `json:"bin"`
	// Package and Version are the installed package the bin belongs to:
	// a version range or a tag in the configured spec is resolved to the
	// version installed when this was resolved.
	Package string `json:"package"`
	Version string `json:"version"`
	// Spec is the package spec as configured.
	Spec string `json:"spec"`
	// NodePath is what the launcher's bin shim sets NODE_PATH to (pnpm's
	// does): its own directories, then the NODE_PATH the launcher gave it
	// (the server's, and what a launcher that is itself a shim added);
	// "" for none.
	NodePath string `json:"nodePath,omitempty"`
	// Files must all exist for the resolution to hold (Check): the
	// interpreter, the script and the package's package.json.
	Files []string `json:"files"`
}

// Environ is env (complete, "KEY=value") as the launcher's bin would get
// it: with NODE_PATH set to NodePath, in place of any it has, when
// NodePath is set. env itself is never written: a changed environment is
// a copy.
func (r *Resolution) Environ(env []string) []string {
	if r.NodePath == "" {
		return env
	}
	const key = "NODE_PATH="
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key) {
			out = append(out, kv)
		}
	}
	return append(out, key+r.NodePath)
}

// Argv is the command and arguments that run the server of f (its Args
// after the resolution's own) directly.
func (r *Resolution) Argv(f *Form) (string, []string) {
	args := make([]string, 0, len(r.Args)+len(f.Args))
	return r.Command, append(append(args, r.Args...), f.Args...)
}

// Check reports whether every file the resolution names still exists:
// one stat each. Its error names the first that does not.
func (r *Resolution) Check() error {
	if len(r.Files) == 0 {
		return errors.New("the resolution names no files")
	}
	for _, f := range r.Files {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s is gone: %w", f, err)
		}
	}
	return nil
}

// String is the short form ps and inspect show: npx → node
// …/server-everything@2026.8.31.
func (r *Resolution) String() string {
	name := r.Package
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = "…/" + name[i+1:]
	}
	return fmt.Sprintf("%s → %s %s@%s", r.Launcher, filepath.Base(r.Command), name, r.Version)
}

// Error is why a resolution failed. Retry is set when the same
// configuration may resolve later — the package is not installed yet (a
// start as written installs it), or the package manager failed or timed
// out —, unset when only a change of the configuration or of the
// installed package can make a difference (the bin is not a Node script,
// the launcher cannot be resolved).
type Error struct {
	Reason string
	Retry  bool
}

func (e *Error) Error() string { return e.Reason }

func retryable(format string, a ...any) error {
	return &Error{Reason: fmt.Sprintf(format, a...), Retry: true}
}

func permanent(format string, a ...any) error {
	return &Error{Reason: fmt.Sprintf(format, a...)}
}

// Resolver resolves launcher command lines with the user's own package
// manager.
type Resolver struct {
	// LookPath finds the launcher's program; nil means exec.LookPath, in
	// mcpvisor's environment, as the server's own spawn finds it.
	LookPath func(file string) (string, error)
	// TempDir holds the probe's script while it runs ("" means
	// os.TempDir()).
	TempDir string
}

// Resolve finds what the launcher command line f (its program command,
// as configured) runs, in the server's environment env (complete,
// "KEY=value") and working directory dir ("" means mcpvisor's), bounded
// by ctx. It never installs anything.
//
// npx and npm exec are asked to run the command line as written but with
// --yes=false (install nothing) and --dry-run (even where npm installs on
// its own: a bin of the project in dir), and with a script shell of ours
// in place of sh: npm finds the package its own way — the project in dir,
// its global packages, its npx cache, its registry and .npmrc for a range
// or a tag — and hands that script the bin it would run and the PATH it
// would run it with, where the bin and then its #! interpreter are looked
// up as sh and env would. npm answers that a package it has but would
// install again is missing — a range or a tag in its npx cache, or any
// package when its lockfiles omit where packages came from — so then it
// is asked once more with --yes (still a dry run), and what it has is
// taken only if it is the very version npm named.
//
// pnpm dlx is asked the same way, offline and with no store to install
// from (see resolvePNPM). bunx and yarn dlx are not resolved: yarn dlx
// installs what it runs into a project it removes afterwards, with no way
// to look a package up without installing it; bunx can skip the install
// (--no-install) but runs the bin itself, with no hook that would tell
// which bin and where (and adds next to nothing to a start: see
// docs/launcher-flattening.md).
func (r *Resolver) Resolve(ctx context.Context, f *Form, command string, env []string, dir string) (*Resolution, error) {
	lookPath := r.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	program, err := lookPath(command)
	if err != nil {
		return nil, retryable("%s is not installed: %v", filepath.Base(command), err)
	}
	switch f.Launcher {
	case NPX, NPMExec:
	case PNPMDlx:
		return r.resolvePNPM(ctx, f, program, env, dir)
	case Bunx:
		return nil, permanent("bunx is not flattened: it runs the bin itself (with --no-install, only if installed) and cannot be asked which bin that is and where")
	case YarnDlx:
		return nil, permanent("yarn dlx is not flattened: it installs what it runs into a temporary project that it removes when the command ends")
	default:
		return nil, permanent("unknown launcher %q", f.Launcher)
	}
	// npm runs the probe as `probe -c "'bin' args…"` with
	// npm_lifecycle_script set to 'bin', quoted for sh.
	tmp, probe, out, err := r.writeProbe("sh", "npm_lifecycle_script", "PATH")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	common := []string{"--dry-run", "--script-shell=" + probe, "--update-notifier=false"}
	stderr, err := runProbe(ctx, program, f.probeArgs(append([]string{"--yes=false"}, common...)...), env, dir)
	res, rerr := readProbe(out, f, env, dir, nil)
	if rerr == nil || !errors.Is(rerr, fs.ErrNotExist) {
		return res, rerr
	}
	if ctx.Err() != nil {
		return nil, retryable("%s did not answer in time: %v", f.Launcher, context.Cause(ctx))
	}
	wanted, missing := missingPackages(stderr)
	if !missing {
		return nil, retryable("%s failed: %s", f.Launcher, npmError(stderr, err))
	}
	_, _ = runProbe(ctx, program, f.probeArgs(append([]string{"--yes"}, common...)...), env, dir)
	res, rerr = readProbe(out, f, env, dir, wanted)
	switch {
	case rerr == nil:
		return res, nil
	case !errors.Is(rerr, fs.ErrNotExist):
		return nil, rerr
	case ctx.Err() != nil:
		return nil, retryable("%s did not answer in time: %v", f.Launcher, context.Cause(ctx))
	}
	// Not there (npm's dry run fails without its npx directory), or not
	// the version npm wants.
	return nil, retryable("not installed: npm would install %s", strings.Join(wanted, ", "))
}

// writeProbe writes, in a new temporary directory tmp, a sh script named
// name that writes the values of the variables vars, each followed by a
// NUL, to the file out of the same directory. The caller removes tmp.
func (r *Resolver) writeProbe(name string, vars ...string) (tmp, probe, out string, err error) {
	tmp, err = os.MkdirTemp(r.TempDir, "mcpvisor-launch-")
	if err != nil {
		return "", "", "", retryable("cannot write the probe: %v", err)
	}
	out, probe = filepath.Join(tmp, "out"), filepath.Join(tmp, name)
	if strings.ContainsAny(out, "'\n") {
		os.RemoveAll(tmp)
		return "", "", "", permanent("temporary directory %q cannot be quoted for sh", tmp)
	}
	script := "#!/bin/sh\nprintf '" + strings.Repeat("%s\\0", len(vars)) + "'"
	for _, v := range vars {
		script += ` "$` + v + `"`
	}
	script += " > '" + out + "'\n"
	if err := os.WriteFile(probe, []byte(script), 0o700); err != nil {
		os.RemoveAll(tmp)
		return "", "", "", retryable("cannot write the probe: %v", err)
	}
	return tmp, probe, out, nil
}

// missingPackages reads npm's refusal to install (libnpmexec): the
// packages it would install.
func missingPackages(stderr []byte) ([]string, bool) {
	const marker = "npx canceled due to missing packages and no YES option: "
	i := bytes.Index(stderr, []byte(marker))
	if i < 0 {
		return nil, false
	}
	line, _, _ := bytes.Cut(stderr[i+len(marker):], []byte("\n"))
	var ids []string
	if json.Unmarshal(bytes.TrimSpace(line), &ids) != nil || len(ids) == 0 {
		return nil, false
	}
	return ids, true
}

// npmError is the gist of a failed npm run: its "npm error" lines (at most
// four), else its last line, else how it ended.
func npmError(stderr []byte, err error) string {
	var lines []string
	var last string
	for l := range strings.SplitSeq(string(stderr), "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		last = l
		if m, ok := strings.CutPrefix(l, "npm error "); ok && !strings.HasPrefix(m, "A complete log") && len(lines) < 4 {
			lines = append(lines, m)
		}
	}
	switch {
	case len(lines) > 0:
		return strings.Join(lines, "; ")
	case last != "":
		return last
	case err != nil:
		return err.Error()
	}
	return "it ran no command"
}

// stderrKeep bounds what is kept of a probe's stderr: its end.
const stderrKeep = 32 << 10

// tail keeps the last stderrKeep bytes written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > stderrKeep {
		t.b = append(t.b[:0], t.b[len(t.b)-stderrKeep:]...)
	}
	return len(p), nil
}

// probeWaitDelay bounds how long a probe's pipes may stay open after it
// was killed or ended.
const probeWaitDelay = time.Second

// runProbe runs program in its own process group, bounded by ctx, and
// returns the end of its stderr; the group is killed once it ends, so no
// descendant outlives it.
func runProbe(ctx context.Context, program string, args, env []string, dir string) ([]byte, error) {
	var stderr tail
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	cmd.WaitDelay = probeWaitDelay
	ownGroup(cmd)
	err := cmd.Run()
	if cmd.Process != nil {
		killGroup(cmd.Process.Pid)
	}
	return stderr.b, err
}

// readProbe reads what the probe script wrote (an error wrapping
// fs.ErrNotExist when it did not run) and resolves the bin it names. With
// wanted set, the bin's package must be one of those npm named.
func readProbe(out string, f *Form, env []string, dir string, wanted []string) (*Resolution, error) {
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	os.Remove(out)
	fields := strings.Split(string(data), "\x00")
	if len(fields) < 3 {
		return nil, retryable("%s: the probe's answer is cut short", f.Launcher)
	}
	bin, ok := unquoteSh(fields[0])
	if !ok || bin == "" {
		return nil, permanent("%s runs %q, which is not a bin name", f.Launcher, fields[0])
	}
	if strings.Contains(bin, "/") {
		return nil, permanent("%s runs %s, a path, not a bin", f.Launcher, bin)
	}
	path := filepath.SplitList(fields[1])
	if dir == "" {
		dir, _ = os.Getwd()
	}
	found, err := lookIn(path, bin, dir)
	if err != nil {
		return nil, retryable("not installed: %s would run %s, which is on none of its PATH: %v", f.Launcher, bin, err)
	}
	script, err := filepath.EvalSymlinks(found)
	if err != nil {
		return nil, retryable("bin %s: %v", found, err)
	}
	pkgJSON, name, version, err := owningPackage(script)
	if err != nil {
		return nil, err
	}
	if wanted != nil && !containsString(wanted, name+"@"+version) {
		return nil, retryable("not installed: npm would install %s (it has %s@%s)", strings.Join(wanted, ", "), name, version)
	}
	interp, iargs, err := interpreter(script, path, dir)
	if err != nil {
		return nil, err
	}
	return &Resolution{
		Launcher: f.Launcher,
		Command:  interp,
		Args:     append(iargs, script),
		Bin:      bin,
		Package:  name,
		Version:  version,
		Spec:     f.Spec(),
		Files:    []string{interp, script, pkgJSON},
	}, nil
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// unquoteSh reads one word quoted for sh the way npm quotes a bin name:
// 'text', with ' written as '\”.
func unquoteSh(s string) (string, bool) {
	var b strings.Builder
	for s != "" {
		switch {
		case strings.HasPrefix(s, `\'`):
			b.WriteByte('\'')
			s = s[2:]
		case s[0] == '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return "", false
			}
			b.WriteString(s[1 : 1+end])
			s = s[2+end:]
		default:
			if strings.ContainsAny(s[:1], " \t\n\"$`\\;&|<>()*?[]{}~") {
				return "", false
			}
			b.WriteByte(s[0])
			s = s[1:]
		}
	}
	return b.String(), true
}

// lookIn finds an executable regular file named name in the directories
// of path, in order, as sh does (a relative directory is taken from dir).
func lookIn(path []string, name, dir string) (string, error) {
	for _, d := range path {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}

// owningPackage finds the package script belongs to: the nearest
// package.json above it that has a name and a version (a package's inner
// package.json files, such as dist/package.json with only a "type", are
// passed over).
func owningPackage(script string) (file, name, version string, err error) {
	for d := filepath.Dir(script); ; {
		p := filepath.Join(d, "package.json")
		data, rerr := os.ReadFile(p)
		if rerr == nil {
			var pkg struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			}
			if jerr := json.Unmarshal(data, &pkg); jerr != nil {
				return "", "", "", retryable("%s is not valid JSON: %v", p, jerr)
			}
			if pkg.Name != "" && pkg.Version != "" {
				return p, pkg.Name, pkg.Version, nil
			}
		} else if !errors.Is(rerr, fs.ErrNotExist) {
			return "", "", "", retryable("%s: %v", p, rerr)
		}
		up := filepath.Dir(d)
		if up == d {
			return "", "", "", permanent("bin %s belongs to no package (no package.json with a name and a version above it)", script)
		}
		d = up
	}
}

// shebangMax bounds the #! line read.
const shebangMax = 512

// interpreter reads the #! line of script and finds the Node it names:
// `#!/usr/bin/env node` (or env -S node options…) on path, as env would
// find it, or an absolute path (with at most one argument, as the kernel
// passes it).
func interpreter(script string, path []string, dir string) (string, []string, error) {
	fh, err := os.Open(script)
	if err != nil {
		return "", nil, retryable("bin %s: %v", script, err)
	}
	buf := make([]byte, shebangMax)
	n, _ := io.ReadFull(fh, buf)
	fh.Close()
	line, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	rest, ok := bytes.CutPrefix(line, []byte("#!"))
	if !ok {
		return "", nil, permanent("bin %s has no #! line: only Node scripts are run directly", script)
	}
	words := strings.Fields(string(rest))
	if len(words) == 0 {
		return "", nil, permanent("bin %s has an empty #! line", script)
	}
	prog, args := words[0], words[1:]
	if filepath.Base(prog) == "env" {
		switch {
		case len(args) > 0 && args[0] == "-S":
			args = args[1:]
		case len(args) > 0 && strings.HasPrefix(args[0], "-S"):
			args = append([]string{args[0][2:]}, args[1:]...)
		case len(args) > 1:
			return "", nil, permanent("bin %s: #!%s: env with more than one argument needs -S", script, rest)
		}
		if len(args) == 0 || strings.HasPrefix(args[0], "-") || strings.Contains(args[0], "=") {
			return "", nil, permanent("bin %s: #!%s is not understood", script, rest)
		}
		prog, args = args[0], args[1:]
		if !strings.Contains(prog, "/") {
			found, err := lookIn(path, prog, dir)
			if err != nil {
				return "", nil, retryable("bin %s needs %s, which is on none of the launcher's PATH", script, prog)
			}
			prog = found
		}
	} else if len(args) > 1 {
		args = []string{strings.Join(args, " ")} // the kernel passes the rest as one argument
	}
	if b := filepath.Base(prog); b != "node" && b != "nodejs" {
		return "", nil, permanent("bin %s runs %s, not Node: only Node scripts are run directly", script, b)
	}
	if !filepath.IsAbs(prog) {
		prog = filepath.Join(dir, prog)
	}
	return prog, args, nil
}
