package launch

import (
	"fmt"
	"strings"
)

// parseNPM parses npx's and npm exec's command lines as npm 7 and later
// read them (npm's bin/npx-cli.js, then its option parser): npm's own
// options, the package (or, after --package, the command), then the
// arguments that go to what runs. For npx every argument after the package
// is the server's; npm exec reads an option after the package as its own
// unless a "--" comes before the package, so such a line is not understood.
// from is the index of the first argument after "exec".
func parseNPM(launcher string, args []string, from int) (*Form, error) {
	f := &Form{Launcher: launcher, argv: args}
	bad := func(format string, a ...any) error {
		return &NotUnderstood{launcher, fmt.Sprintf(format, a...)}
	}
	for i := from; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return f.finishNPM(i+1, true)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return f.finishNPM(i, false)
		}
		long := strings.HasPrefix(a, "--")
		key, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		kind, name := npmOption(launcher, key, long)
		switch kind {
		case optYes, optShell:
			f.drop = append(f.drop, i)
			if kind == optShell && !hasVal {
				if i+1 >= len(args) {
					return nil, bad("option %s has no value", a)
				}
				i++
				f.drop = append(f.drop, i)
			}
			continue
		case optSwitch:
			// --no-<switch> negates; npx reads the word after one as its
			// value (bin/npx-cli.js), npm as the package: they disagree.
			if launcher == NPX && strings.HasPrefix(name, "no-") && !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				return nil, bad("option %s right before the package (npx takes the package for its value)", a)
			}
			continue
		case optValue, optPackage:
			if !hasVal {
				if i+1 >= len(args) || strings.HasPrefix(args[i+1], "-") {
					return nil, bad("option %s has no value", a)
				}
				i++
				val = args[i]
			}
			if kind == optPackage {
				if val == "" {
					return nil, bad("option %s names no package", a)
				}
				f.Packages = append(f.Packages, val)
			}
			continue
		case optRefused:
			return nil, bad("option %s is not followed when flattening (%s)", a, refusedWhy(name))
		case optRemoved:
			return nil, bad("option %s was removed from npx (npm 7)", a)
		default:
			return nil, bad("unknown npm option %s", a)
		}
	}
	return nil, bad("%s", ErrNoPackage.Error())
}

// finishNPM records the target at index i; npm exec must not have options
// after it unless a "--" came before it.
func (f *Form) finishNPM(i int, sep bool) (*Form, error) {
	if _, err := f.finish(i, sep); err != nil {
		return nil, err
	}
	if f.Launcher == NPMExec && !sep {
		for _, a := range f.Args {
			if strings.HasPrefix(a, "-") {
				return nil, &NotUnderstood{f.Launcher, fmt.Sprintf("npm exec reads %s after the package as its own option: put \"--\" before the package", a)}
			}
		}
	}
	return f, nil
}

// probeArgs is the launcher's command line with the options the probe
// replaces left out and extra put last among the launcher's options,
// where the last of an option given twice wins.
func (f *Form) probeArgs(extra ...string) []string {
	at := f.target
	if f.sep {
		at-- // before the "--"
	}
	out := make([]string, 0, len(f.argv)+len(extra))
	for i, a := range f.argv[:at] {
		if !contains(f.drop, i) {
			out = append(out, a)
		}
	}
	out = append(out, extra...)
	return append(out, f.argv[at:]...)
}

func contains(l []int, v int) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

func refusedWhy(name string) string {
	switch name {
	case "call":
		return "it runs a shell command line"
	case "workspace", "workspaces", "include-workspace-root":
		return "it runs in workspaces"
	case "usage", "version":
		return "it runs no package"
	}
	return "unsupported"
}

// npmOption says how npx (launcher NPX) or npm exec reads the option key
// (without its dashes and value; long when it was written with two
// dashes), and its name after npm's shorthands.
func npmOption(launcher, key string, long bool) (option, string) {
	if !long {
		switch {
		case key == "p" && launcher == NPX:
			return optPackage, "package" // npx's -p; npm's is --parseable
		case key == "n" && launcher == NPX:
			return optRemoved, "n"
		}
		sh, ok := npmShorthands[key]
		if !ok {
			return optUnknown, key
		}
		key = sh
	} else if sh, ok := npmShorthands[key]; ok && !npmSwitches[key] && !npmValues[key] {
		key = sh // --quiet, --silent, --no, …
	}
	switch key {
	case "yes", "no-yes", "no-install":
		if key == "no-install" && launcher != NPX {
			return optUnknown, key
		}
		return optYes, key
	case "script-shell":
		return optShell, key
	case "shell":
		if launcher == NPX {
			return optShell, key // npx's --shell is npm's --script-shell
		}
	case "package":
		return optPackage, key
	case "call", "workspace", "workspaces", "include-workspace-root", "usage", "version":
		return optRefused, key
	case "always-spawn", "ignore-existing", "shell-auto-fallback", "npm", "node-arg":
		if launcher == NPX {
			return optRemoved, key
		}
	case "loglevel-info", "loglevel-verbose", "loglevel-silly", "loglevel-warn", "loglevel-silent":
		return optSwitch, key // a shorthand that carries its value
	}
	switch {
	case npmSwitches[key]:
		return optSwitch, key
	case npmValues[key]:
		return optValue, key
	case strings.HasPrefix(key, "no-") && npmSwitches[key[3:]]:
		return optSwitch, key
	}
	return optUnknown, key
}

// npmShorthands are npm 11's option shorthands (@npmcli/config's
// definitions), each as the option it stands for; those that carry a
// log level are named loglevel-<level>.
var npmShorthands = map[string]string{
	"enjoy-by": "before", "d": "loglevel-info", "dd": "loglevel-verbose", "ddd": "loglevel-silly",
	"quiet": "loglevel-warn", "q": "loglevel-warn", "s": "loglevel-silent", "silent": "loglevel-silent",
	"verbose": "loglevel-verbose", "desc": "description", "help": "usage", "local": "no-global",
	"n": "no-yes", "no": "no-yes", "porcelain": "parseable", "readonly": "read-only", "reg": "registry",
	"iwr": "include-workspace-root", "ws": "workspaces", "a": "all", "c": "call", "f": "force",
	"g": "global", "L": "location", "l": "long", "m": "message", "p": "parseable", "C": "prefix",
	"S": "save", "B": "save-bundle", "D": "save-dev", "E": "save-exact", "O": "save-optional",
	"P": "save-prod", "?": "usage", "H": "usage", "h": "usage", "v": "version", "w": "workspace", "y": "yes",
}

// npmSwitches are npm 11's boolean options.
var npmSwitches = set(`all allow-same-version audit bin-links browser bypass-2fa color commit-hooks
dangerously-allow-all-scripts description dev diff-ignore-all-space diff-name-only diff-no-prefix
diff-text dry-run engine-strict expect-results force foreground-scripts format-package-lock fund
git-tag-version global global-style if-present ignore-scripts include-staged include-workspace-root
include-attestations init-private install-links json legacy-bundling legacy-peer-deps link long
offline omit-lockfile-registry-resolved optional package-lock package-lock-only parseable
allow-scripts-pending allow-scripts-pin prefer-dedupe prefer-offline prefer-online production progress
provenance read-only rebuild-bundle save save-bundle save-dev save-exact save-optional save-peer
save-prod packages-all shrinkwrap sign-git-commit sign-git-tag strict-peer-deps strict-allow-scripts
strict-ssl timing unicode update-notifier usage version versions workspaces workspaces-update yes`)

// npmValues are npm 11's options that take a value.
var npmValues = set(`_auth access allow-directory allow-file allow-git allow-remote allow-scripts also
audit-level auth-type before ca cache cache-max cache-min cafile call cert cidr cpu depth diff
diff-dst-prefix diff-src-prefix diff-unified editor expect-result-count expires fetch-retries
fetch-retry-factor fetch-retry-maxtimeout fetch-retry-mintimeout fetch-timeout git globalconfig
heading https-proxy include init-author-email init-author-name init-author-url init-license
init-module init-type init-version key libc local-address location lockfile-version loglevel logs-dir
logs-max name maxsockets message min-release-age min-release-age-exclude node-gyp node-options noproxy
omit only orgs os otp package pack-destination packages prefix preid provenance-file proxy registry
replace-registry-host save-prefix sbom-format sbom-type scope scopes packages-and-scopes-permission
orgs-permission password token-description script-shell searchexclude searchlimit searchopts
searchstaleness shell tag tag-version-prefix umask user-agent userconfig viewer which workspace`)

func set(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}
