// Package launch flattens package launchers: a server configured as
// `npx -y @scope/server args…` (or `npm exec …`) is run as the program the
// launcher would run — `node <the package's bin> args…` — instead of
// through the launcher, which otherwise stays resident as the server's
// parent (npm exec holds ~90 MB for the server's whole life and adds
// half a second or more to every start).
//
// Parse recognises the launcher forms (npx, npm exec / npm x, pnpm dlx and
// pnpx, bunx and bun x, yarn dlx) and says what they run. Resolve asks the
// user's own package manager, once, where the installed package's bin is
// and which interpreter it needs, never installing anything; the caller
// keeps the Resolution (keyed by Key) and checks it before each spawn
// (Resolution.Check). A form Parse does not understand, or a resolution
// that fails, is an error that says why: the caller then runs the command
// as written.
//
// npm's launchers and pnpm dlx are resolved: bunx and yarn dlx are
// parsed, and run as written, saying why (see Resolve).
//
// A Flattener is that caller for a set of configured servers: it owns
// what is known of each server's launcher, resolves in the background,
// persists the outcome, rewrites each spawn, and says how each server
// starts (Status).
package launch

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Launchers, as Form.Launcher names them.
const (
	NPX     = "npx"
	NPMExec = "npm exec"
	PNPMDlx = "pnpm dlx"
	Bunx    = "bunx"
	YarnDlx = "yarn dlx"
)

// Form is a launcher command line understood: which launcher, what it
// runs and with which arguments.
type Form struct {
	// Launcher is NPX, NPMExec, PNPMDlx, Bunx or YarnDlx.
	Launcher string
	// Packages are the package specs named with --package (-p for npx),
	// in order; none means Target is the package.
	Packages []string
	// Target is the launcher's first positional argument: the package
	// to run (npm runs the bin its rule picks: the only one, or the one
	// named like the package) or, with Packages, the command to run.
	Target string
	// Args are the arguments that follow Target: the server's own.
	Args []string

	// The launcher's arguments as written; target is Target's index in
	// them and sep is set when a "--" comes right before it.
	argv   []string
	target int
	sep    bool
	drop   []int // indices of options the probe replaces (yes/no, script shell)
}

// Spec is the package spec of what runs: the first --package, else
// Target.
func (f *Form) Spec() string {
	if len(f.Packages) > 0 {
		return f.Packages[0]
	}
	return f.Target
}

// NotUnderstood is the error of Parse for a launcher command line in a
// form this package does not flatten; Reason says which part.
type NotUnderstood struct {
	Launcher string
	Reason   string
}

func (e *NotUnderstood) Error() string {
	return e.Launcher + " command line not understood: " + e.Reason
}

// IsLauncher reports whether command names a program Parse knows (npx,
// npm, pnpm, pnpx, bunx, bun, yarn), by its base name; it allocates
// nothing.
func IsLauncher(command string) bool {
	switch filepath.Base(command) {
	case "npx", "npm", "pnpm", "pnpx", "bunx", "bun", "yarn":
		return true
	}
	return false
}

// Parse reads a server's command line. It returns nil and no error when
// command is no package launcher (or npm, pnpm, bun or yarn run something
// else than a package: `npm start`), and an error wrapping
// *NotUnderstood when it is one in a form this package does not flatten.
func Parse(command string, args []string) (*Form, error) {
	switch filepath.Base(command) {
	case "npx":
		return parseNPM(NPX, args, 0)
	case "npm":
		if len(args) == 0 || (args[0] != "exec" && args[0] != "x") {
			if i := firstWord(args); i >= 0 && (args[i] == "exec" || args[i] == "x") {
				return nil, &NotUnderstood{NPMExec, "npm's options before " + args[i] + " (write them after it)"}
			}
			return nil, nil
		}
		return parseNPM(NPMExec, args, 1)
	case "pnpm":
		if len(args) == 0 || args[0] != "dlx" {
			if i := firstWord(args); i >= 0 && args[i] == "dlx" {
				return nil, &NotUnderstood{PNPMDlx, "pnpm's options before dlx (write them after it)"}
			}
			return nil, nil
		}
		return parseOther(PNPMDlx, args, 1, pnpmDlxOptions)
	case "pnpx":
		return parseOther(PNPMDlx, args, 0, pnpmDlxOptions)
	case "bunx":
		return parseOther(Bunx, args, 0, bunxOptions)
	case "bun":
		if len(args) == 0 || args[0] != "x" {
			return nil, nil
		}
		return parseOther(Bunx, args, 1, bunxOptions)
	case "yarn":
		if len(args) == 0 || args[0] != "dlx" {
			if i := firstWord(args); i >= 0 && args[i] == "dlx" {
				return nil, &NotUnderstood{YarnDlx, "yarn's options before dlx (write them after it)"}
			}
			return nil, nil
		}
		return parseOther(YarnDlx, args, 1, yarnDlxOptions)
	}
	return nil, nil
}

// RefreshAsWritten says why a refresh of f does not resolve it at once,
// "" when it does. pnpm dlx is resolved offline, from the metadata pnpm
// fetched when it last ran online — which a flattened server never makes
// it do —, so it would find again what it found: a refresh has the next
// start run it as written, which takes a newer version as pnpm does
// (pnpm 10 and earlier resolve the spec online at every run; pnpm 12
// keeps its install of the spec until it is older than its
// dlx-cache-max-age), and it is resolved after that start.
func (f *Form) RefreshAsWritten() string {
	if f.Launcher == PNPMDlx {
		return "refreshed: the next start runs pnpm dlx as written, which takes a newer version of " + f.Spec() + " as pnpm does (pnpm 12 only once its install is older than its dlx-cache-max-age), then it is resolved again"
	}
	return ""
}

// firstWord is the index of the first argument that is no option, or -1.
func firstWord(args []string) int {
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			return i
		}
	}
	return -1
}

// option is how a launcher reads one of its options.
type option uint8

const (
	optUnknown option = iota
	optSwitch         // takes no value
	optValue          // takes a value: --name=v or --name v
	optPackage        // --package: a package spec
	optYes            // the confirm-install switches: replaced by the probe's
	optShell          // the script shell: replaced by the probe's
	optRefused        // understood, but flattening does not follow it
	optRemoved        // an npx option npm removed: npx refuses it
)

// parseOther parses pnpm dlx, bunx and yarn dlx: options, then the
// package, then its arguments (which are the server's).
func parseOther(launcher string, args []string, from int, opts map[string]option) (*Form, error) {
	f := &Form{Launcher: launcher, argv: args}
	for i := from; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return f.finish(i+1, true)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return f.finish(i, false)
		}
		key, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch opts[key] {
		case optSwitch:
			if hasVal {
				return nil, &NotUnderstood{launcher, fmt.Sprintf("option %s takes no value", a)}
			}
		case optValue, optPackage:
			if !hasVal {
				if i+1 >= len(args) {
					return nil, &NotUnderstood{launcher, fmt.Sprintf("option %s has no value", a)}
				}
				i++
				val = args[i]
			}
			if opts[key] == optPackage {
				f.Packages = append(f.Packages, val)
			}
		case optRefused:
			return nil, &NotUnderstood{launcher, fmt.Sprintf("option %s is not followed when flattening", a)}
		default:
			return nil, &NotUnderstood{launcher, fmt.Sprintf("unknown option %s", a)}
		}
	}
	return nil, &NotUnderstood{launcher, ErrNoPackage.Error()}
}

// finish records the target at index i and checks that there is one.
func (f *Form) finish(i int, sep bool) (*Form, error) {
	if i >= len(f.argv) || f.argv[i] == "" {
		return nil, fmt.Errorf("%w", &NotUnderstood{f.Launcher, ErrNoPackage.Error()})
	}
	f.target, f.sep = i, sep
	f.Target = f.argv[i]
	f.Args = append([]string{}, f.argv[i+1:]...)
	return f, nil
}

// pnpm dlx's options (pnpm 9/10): --package/-p may repeat; --shell-mode
// (-c) runs a shell command line.
var pnpmDlxOptions = map[string]option{
	"package": optPackage, "silent": optSwitch, "s": optSwitch,
	"allow-build": optValue, "cpu": optValue, "os": optValue, "libc": optValue,
	"reporter": optValue, "registry": optValue, "dir": optValue, "C": optValue,
	"shell-mode": optRefused, "c": optRefused,
}

// bunx's options: --package/-p names the package of another bin.
var bunxOptions = map[string]option{
	"package": optPackage, "p": optPackage, "bun": optSwitch, "b": optSwitch,
	"silent": optSwitch, "verbose": optSwitch, "no-install": optSwitch,
}

// yarn dlx's options (yarn 2+).
var yarnDlxOptions = map[string]option{
	"package": optPackage, "p": optPackage, "quiet": optSwitch, "q": optSwitch,
}
