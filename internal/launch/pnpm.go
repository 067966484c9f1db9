package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// pnpm dlx (pnpm 9 and later, in JavaScript up to 11, native from 12)
// installs the packages it runs into a directory of its cache, one per
// package set and resolved version (<cache>/dlx/<key>/<dir>, behind a pkg
// link), and runs the bin from there through the shell shim it wrote in
// node_modules/.bin, which sets NODE_PATH and execs node on the script.
//
// resolvePNPM asks the user's own pnpm, with the command line as
// configured, to run a probe of ours in place of the bin (--package names
// the package, the probe is the command) — offline and with an empty
// store of ours, which no setting of the server's environment overrides:
// where the package is installed (and its install not expired by pnpm's
// dlx-cache-max-age), pnpm finds it by its own key (registries,
// architectures, allowed builds and the version its metadata cache
// resolves the spec to) and runs the probe with the PATH and NODE_PATH it
// would run the bin with, the PATH's first entry the install's
// node_modules/.bin; where it is not, pnpm cannot install it (nothing to
// fetch offline, no store to take it from) and fails. The bin is the one
// pnpm's rule picks (the package's only bin, or the one named like it),
// found through its shim: the script it execs, the node it finds on that
// PATH, and the NODE_PATH it sets. Only registry specs are resolved (a
// local directory, tarball or URL needs no fetch, so pnpm would install it
// even offline). An answer after which the probe's store holds files
// (pnpm installed through it after all) is refused.
//
// Resolved offline, the spec resolves to what pnpm's metadata cache says,
// which is as fresh as pnpm's last run online: right after a start as
// written, when a resolution runs, it is that start's. A refresh therefore
// does not resolve pnpm dlx at once (see Form.RefreshAsWritten).
func (r *Resolver) resolvePNPM(ctx context.Context, f *Form, program string, env []string, dir string) (*Resolution, error) {
	if len(f.Packages) > 1 {
		return nil, permanent("pnpm dlx with more than one --package is not flattened")
	}
	if !registrySpec(f.Spec()) {
		return nil, permanent("pnpm dlx %s is not flattened: only a package of a registry is (a directory, a tarball or a URL is installed again by every run)", f.Spec())
	}
	tmp, probe, out, err := r.writeProbe("probe", "PATH", "NODE_PATH")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	store := filepath.Join(tmp, "store")
	args := append(f.pnpmProbeArgs(), probe)
	stderr, err := runProbe(ctx, program, args, offlineEnv(env, store), dir)
	data, rerr := os.ReadFile(out)
	if rerr != nil {
		if ctx.Err() != nil {
			return nil, retryable("pnpm dlx did not answer in time: %v", context.Cause(ctx))
		}
		removeProbeLeftover(stderr)
		if notInstalled(stderr) {
			return nil, retryable("not installed: pnpm dlx would install %s", f.Spec())
		}
		return nil, retryable("pnpm dlx failed: %s", pnpmError(stderr, err))
	}
	if holdsFiles(store) {
		// pnpm installs through its store: it put files in ours.
		return nil, retryable("pnpm dlx installed %s while it was asked where it is: not flattened until a start as written installs it", f.Spec())
	}
	fields := strings.Split(string(data), "\x00")
	if len(fields) < 3 {
		return nil, retryable("pnpm dlx: the probe's answer is cut short")
	}
	path := filepath.SplitList(fields[0])
	if len(path) == 0 || filepath.Base(path[0]) != ".bin" || filepath.Base(filepath.Dir(path[0])) != "node_modules" || !filepath.IsAbs(path[0]) {
		return nil, permanent("pnpm dlx ran its command with PATH %q, whose first entry is no install's node_modules/.bin", fields[0])
	}
	binsDir := path[0]
	install := filepath.Dir(filepath.Dir(binsDir))
	bin := f.Target
	if len(f.Packages) == 0 {
		if bin, err = pnpmBinName(install); err != nil {
			return nil, err
		}
	} else if strings.Contains(bin, "/") {
		return nil, permanent("pnpm dlx runs %s, a path, not a bin", bin)
	}
	if dir == "" {
		dir, _ = os.Getwd()
	}
	found, err := lookIn(path, bin, dir)
	if err != nil {
		return nil, retryable("not installed: pnpm dlx would run %s, which is on none of its PATH", bin)
	}
	if filepath.Dir(found) != binsDir {
		return nil, permanent("pnpm dlx would run %s, which is not the installed package's bin", found)
	}
	target, nodePath, err := readShim(found)
	if err != nil {
		return nil, err
	}
	if nodePath != "" && fields[1] != "" {
		// As the shim sets it: its own, then what it was given (the
		// server's, and what a pnpm that is itself a shim added).
		nodePath += string(filepath.ListSeparator) + fields[1]
	}
	scriptPath, err := filepath.EvalSymlinks(filepath.Join(binsDir, target))
	if err != nil {
		return nil, retryable("bin %s: %v", found, err)
	}
	pkgJSON, name, version, err := owningPackage(scriptPath)
	if err != nil {
		return nil, err
	}
	// The shim runs the node its PATH finds (its own directory first),
	// whatever the script's #! line says.
	node, err := lookIn(path, "node", dir)
	if err != nil {
		return nil, retryable("bin %s needs node, which is on none of pnpm's PATH", found)
	}
	return &Resolution{
		Launcher: f.Launcher,
		Command:  node,
		Args:     []string{scriptPath},
		Bin:      bin,
		Package:  name,
		Version:  version,
		Spec:     f.Spec(),
		NodePath: nodePath,
		Files:    []string{node, scriptPath, pkgJSON},
	}, nil
}

// pnpmProbeArgs is the launcher's command line up to the package, with
// --package=<the package> added when it names none, and without the
// options that only quiet pnpm (a silent pnpm does not say why it
// failed): what precedes the probe, which takes the place of the bin.
func (f *Form) pnpmProbeArgs() []string {
	at := f.target
	if f.sep {
		at--
	}
	var out []string
	for i := 0; i < at; i++ {
		a := f.argv[i]
		key, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") {
			switch key {
			case "silent", "s":
				continue
			case "reporter":
				if !hasVal {
					i++
				}
				continue
			}
		}
		out = append(out, a)
	}
	if len(f.Packages) == 0 {
		out = append(out, "--package="+f.Target)
	}
	return out
}

// probeSettings are the pnpm settings the probe sets, and the ones it
// takes out of the environment it is given (in any case, with - or _):
// any of them set by the server's environment could make pnpm install.
var probeSettings = []string{"offline", "prefer_offline", "store_dir"}

// offlineEnv is env for the probe: pnpm offline with the empty store
// store, whatever env says of those settings. pnpm up to 10 reads its
// settings from npm_config_*, later ones from pnpm_config_* too; its dlx
// command refuses --offline and --store-dir as options, not as
// settings.
func offlineEnv(env []string, store string) []string {
	out := make([]string, 0, len(env)+4)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		k = strings.ReplaceAll(strings.ToLower(k), "-", "_")
		name, ok := strings.CutPrefix(k, "npm_config_")
		if !ok {
			name, ok = strings.CutPrefix(k, "pnpm_config_")
		}
		if ok && slices.Contains(probeSettings, name) {
			continue
		}
		out = append(out, kv)
	}
	for _, kv := range [][2]string{{"offline", "true"}, {"store_dir", store}} {
		out = append(out, "npm_config_"+kv[0]+"="+kv[1], "pnpm_config_"+kv[0]+"="+kv[1])
	}
	return out
}

// registrySpec reports whether spec names a package of a registry
// (name, name@range, name@tag, @scope/name…), not a directory, a tarball,
// a URL, a git host or an alias.
func registrySpec(spec string) bool {
	name := spec
	if strings.HasPrefix(name, "@") {
		scope, rest, ok := strings.Cut(name[1:], "/")
		if !ok || scope == "" {
			return false
		}
		name = rest
	}
	name, version, _ := strings.Cut(name, "@")
	if name == "" || strings.ContainsAny(name, `/\:~`) || strings.HasPrefix(name, ".") {
		return false
	}
	for _, ext := range []string{".tgz", ".tar.gz", ".tar"} {
		if strings.HasSuffix(name, ext) || strings.HasSuffix(version, ext) {
			return false
		}
	}
	return !strings.ContainsAny(version, `/\:`)
}

// binNameOK reports whether pnpm links a bin of this name (its scope
// taken off): one that encodeURIComponent leaves as it is (or $), and not
// . or ..
func binNameOK(name string) bool {
	if name == "" || name == "." || name == ".." {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.!~*'()$", c)) {
			return false
		}
	}
	return true
}

// binPathOK reports whether a bin's path stays inside its package.
func binPathOK(path string) bool {
	p := filepath.Clean(filepath.Join("pkg", path))
	return p != "pkg" && strings.HasPrefix(p, "pkg"+string(filepath.Separator))
}

func count(l []string, s string) int {
	n := 0
	for _, x := range l {
		if x == s {
			n++
		}
	}
	return n
}

// holdsFiles reports whether anything but directories is under dir, or
// may be: a directory that cannot be read counts as holding files. One
// that does not exist holds none.
func holdsFiles(dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil && !(path == dir && errors.Is(err, fs.ErrNotExist)) || err == nil && !e.IsDir() {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// pnpmBinName is the bin pnpm dlx runs of the package installed in
// install (its package.json's one dependency): the package's only bin,
// or the one named like the package without its scope.
func pnpmBinName(install string) (string, error) {
	var deps struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	p := filepath.Join(install, "package.json")
	data, err := os.ReadFile(p)
	if err != nil {
		return "", retryable("pnpm's install %s: %v", install, err)
	}
	if err := json.Unmarshal(data, &deps); err != nil {
		return "", retryable("%s is not valid JSON: %v", p, err)
	}
	if len(deps.Dependencies) != 1 {
		return "", permanent("%s names %d dependencies, not the one package pnpm dlx runs", p, len(deps.Dependencies))
	}
	var pkg string
	for pkg = range deps.Dependencies {
	}
	p = filepath.Join(install, "node_modules", pkg, "package.json")
	data, err = os.ReadFile(p)
	if err != nil {
		return "", retryable("package %s: %v", pkg, err)
	}
	var manifest struct {
		Name string          `json:"name"`
		Bin  json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(data, &manifest); err != nil {
		return "", retryable("%s is not valid JSON: %v", p, err)
	}
	scopeless := manifest.Name
	if strings.HasPrefix(scopeless, "@") {
		_, scopeless, _ = strings.Cut(scopeless, "/")
	}
	// The bins pnpm links: scopes taken off the names, unsafe names and
	// paths outside the package left out.
	var names []string
	var one string
	if json.Unmarshal(manifest.Bin, &one) == nil && one != "" {
		if binNameOK(scopeless) && binPathOK(one) {
			names = append(names, scopeless)
		}
	} else {
		var bins map[string]string
		_ = json.Unmarshal(manifest.Bin, &bins)
		for name, path := range bins {
			if _, after, ok := strings.Cut(name, "/"); strings.HasPrefix(name, "@") && ok {
				name = after
			}
			if binNameOK(name) && binPathOK(path) {
				names = append(names, name) // two of one name are two bins, as pnpm counts them
			}
		}
	}
	switch {
	case len(names) == 0:
		return "", permanent("package %s has no bin", pkg)
	case len(names) == 1:
		return names[0], nil
	case count(names, scopeless) == 1:
		return scopeless, nil
	}
	return "", permanent("package %s has %d bins, none named %s: pnpm dlx cannot tell which to run", pkg, len(names), scopeless)
}

// The lines of pnpm's bin shim (@pnpm/cmd-shim) that flattening reads:
// NODE_PATH as it sets it when unset, and the script the branch that
// finds node on PATH execs (relative to the shim's directory).
var (
	shimNodePath = regexp.MustCompile(`(?m)^\s*export NODE_PATH="([^"$` + "`" + `\\]*)"\s*$`)
	shimExec     = regexp.MustCompile(`(?m)^\s*exec node +"\$basedir/([^"$` + "`" + `\\]+)" +"\$@"\s*$`)
)

// shimMax bounds the shim read.
const shimMax = 64 << 10

// readShim reads pnpm's shim at path: the script it runs (relative to its
// directory) and the NODE_PATH it sets ("" if none).
func readShim(path string) (target, nodePath string, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", "", retryable("bin %s: %v", path, err)
	}
	defer fh.Close()
	buf := make([]byte, shimMax)
	n, _ := io.ReadFull(fh, buf) // a shim is shorter: the whole of it
	data := buf[:n]
	if !bytes.HasPrefix(data, []byte("#!/bin/sh")) {
		return "", "", permanent("bin %s is no pnpm shim", path)
	}
	m := shimExec.FindSubmatch(data)
	if m == nil {
		return "", "", permanent("bin %s runs no Node script (or not in a form its shim can be read in): only Node scripts are run directly", path)
	}
	target = string(m[1])
	if np := shimNodePath.FindSubmatch(data); np != nil {
		nodePath = string(np[1])
	} else if bytes.Contains(data, []byte("NODE_PATH=")) {
		return "", "", permanent("bin %s sets NODE_PATH in a form that cannot be read", path)
	}
	return target, nodePath, nil
}

// notInstalled reads pnpm's refusals to fetch offline: the package (or its
// metadata) is not there.
func notInstalled(stderr []byte) bool {
	for _, s := range []string{"ERR_PNPM_NO_OFFLINE_META", "ERR_PNPM_NO_OFFLINE_TARBALL", "in offline mode", "not present in local store", "in package mirror"} {
		if bytes.Contains(stderr, []byte(s)) {
			return true
		}
	}
	return false
}

// leftoverOf finds, in pnpm's stderr, the directory a failed dlx install
// was made in.
var leftoverOf = regexp.MustCompile(`(?m)installing a direct dependency of (/.*?)\s*$`)

// removeProbeLeftover removes the directory pnpm made for the install a
// failed probe could not make (pnpm 10 names it, and leaves the empty
// directories of its virtual store there), if it is one of its dlx cache
// that holds nothing but directories, and then the key directory above
// it if that is left empty: what was made empty, and nothing else.
func removeProbeLeftover(stderr []byte) {
	m := leftoverOf.FindSubmatch(stderr)
	if m == nil {
		return
	}
	d := filepath.Clean(string(m[1]))
	key := filepath.Dir(d)
	if filepath.Base(filepath.Dir(key)) != "dlx" {
		return
	}
	if target, err := os.Readlink(filepath.Join(key, "pkg")); err == nil && filepath.Base(target) == filepath.Base(d) {
		return // an install after all
	}
	if holdsFiles(d) {
		return
	}
	if os.RemoveAll(d) == nil {
		_ = os.Remove(key) // only if empty
	}
}

// pnpmError is the gist of a failed pnpm run: its ERR_PNPM line, else its
// last line, else how it ended.
func pnpmError(stderr []byte, err error) string {
	var last string
	for l := range strings.SplitSeq(string(stderr), "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if strings.Contains(l, "ERR_PNPM_") {
			return l
		}
		last = l
	}
	switch {
	case last != "":
		return last
	case err != nil:
		return err.Error()
	}
	return "it ran no command"
}
