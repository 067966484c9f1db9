package testserver

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// config is what the flags and FIXTURE_* variables ask of one run.
type config struct {
	slowStart    time.Duration
	crashAtStart bool
	crashAfter   int
	ignoreTerm   bool
	ignoreEOF    bool
	setsidChild  bool
	stdoutChild  bool
	garbage      bool
	hugeLine     int
	neverAnswer  bool
	stderrLines  int
	strictInit   bool
	strictLog    string
	modernOnly   bool
	// toolsVariant picks the tool list (toolsFor); toolsVariantFile, when
	// set, is read at start for it instead.
	toolsVariant     int
	uiURI            string
	uiInResult       bool
	toolsVariantFile string
	holdMB           int
	spin             time.Duration
	growMB           int
	forkBomb         int
	askRoots         bool
	askRootsAtInit   bool
	skills           string // skill paths, comma-separated
	skillsNoDir      bool
	httpAddr         string
	methodLog        string
	flock            string
}

// envBindings ties every flag to the environment variable that sets it when
// the flag is not given on the command line.
var envBindings = []struct{ flag, env string }{
	{"slow-start", "FIXTURE_SLOW_START"},
	{"crash-at-start", "FIXTURE_CRASH_AT_START"},
	{"crash-after", "FIXTURE_CRASH_AFTER"},
	{"ignore-term", "FIXTURE_IGNORE_TERM"},
	{"ignore-eof", "FIXTURE_IGNORE_EOF"},
	{"setsid-child", "FIXTURE_SETSID_CHILD"},
	{"stdout-child", "FIXTURE_STDOUT_CHILD"},
	{"garbage", "FIXTURE_GARBAGE"},
	{"huge-line", "FIXTURE_HUGE_LINE"},
	{"never-answer", "FIXTURE_NEVER_ANSWER"},
	{"stderr-lines", "FIXTURE_STDERR_LINES"},
	{"strict-init", "FIXTURE_STRICT_INIT"},
	{"strict-init-log", "FIXTURE_STRICT_INIT_LOG"},
	{"modern-only", "FIXTURE_MODERN_ONLY"},
	{"tools-variant", "FIXTURE_TOOLS_VARIANT"},
	{"ui-uri", "FIXTURE_UI_URI"},
	{"ui-in-result", "FIXTURE_UI_IN_RESULT"},
	{"tools-variant-file", "FIXTURE_TOOLS_VARIANT_FILE"},
	{"hold-mb", "FIXTURE_HOLD_MB"},
	{"spin", "FIXTURE_SPIN"},
	{"grow-mb", "FIXTURE_GROW_MB"},
	{"fork-bomb", "FIXTURE_FORK_BOMB"},
	{"ask-roots", "FIXTURE_ASK_ROOTS"},
	{"ask-roots-at-init", "FIXTURE_ASK_ROOTS_AT_INIT"},
	{"skills", "FIXTURE_SKILLS"},
	{"skills-no-directory", "FIXTURE_SKILLS_NO_DIRECTORY"},
	{"http", "FIXTURE_HTTP"},
	{"method-log", "FIXTURE_METHOD_LOG"},
	{"flock", "FIXTURE_FLOCK"},
}

const usageHeader = `Usage: mcp-fixture [flags]

mcp-fixture is the MCP server used by mcpvisor's tests and demos. It speaks
newline-delimited JSON-RPC 2.0 on stdin/stdout (or, with -http, JSON
responses to POSTs) and logs to stderr. Tools:
echo {text}, sleep {ms}, progress {steps, intervalMs}, pid, crash {code}, log {text, level, laterMs}, sample {prompt, hangOnRefusal}, wedge, stderr {text}, grow {mb, stepMb, intervalMs}, whoami, and with -ask-roots roots.
When stdin closes it lets calls in flight answer for up to 1s, interrupts the
rest (they answer nothing) and exits 0.

Every flag can also be set by the environment variable in brackets (booleans
take 1/true/0/false); a flag given on the command line wins.

Flags:
`

// parseConfig reads args, then fills every flag that args did not set from
// getenv. Usage and errors are written to out. It returns flag.ErrHelp for
// -h/-help.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("mcp-fixture", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(&c.slowStart, "slow-start", 0, "sleep this long before serving, e.g. 2s [FIXTURE_SLOW_START]")
	fs.BoolVar(&c.crashAtStart, "crash-at-start", false, "write a line to stderr and exit 3 at once [FIXTURE_CRASH_AT_START]")
	fs.IntVar(&c.crashAfter, "crash-after", 0, "exit 3 right after answering the `N`th tools/call [FIXTURE_CRASH_AFTER]")
	fs.BoolVar(&c.ignoreTerm, "ignore-term", false, "ignore SIGTERM, SIGINT and SIGHUP [FIXTURE_IGNORE_TERM]")
	fs.BoolVar(&c.ignoreEOF, "ignore-eof", false, "on stdin EOF do not exit but block until killed [FIXTURE_IGNORE_EOF]")
	fs.BoolVar(&c.setsidChild, "setsid-child", false, "at start, leave a grandchild in a new session that lingers forever [FIXTURE_SETSID_CHILD]")
	fs.BoolVar(&c.stdoutChild, "stdout-child", false, "at start, leave a grandchild in the same process group that holds stdout/stderr open and ignores SIGTERM [FIXTURE_STDOUT_CHILD]")
	fs.BoolVar(&c.garbage, "garbage", false, "write a non-JSON line to stdout before each response [FIXTURE_GARBAGE]")
	fs.IntVar(&c.hugeLine, "huge-line", 0, "at start, write one JSON-RPC notification line of `BYTES` bytes (newline not counted) [FIXTURE_HUGE_LINE]")
	fs.BoolVar(&c.neverAnswer, "never-answer", false, "read and parse every message but answer none [FIXTURE_NEVER_ANSWER]")
	fs.IntVar(&c.stderrLines, "stderr-lines", 0, "at start, write `N` lines \"stderr line 1\"... to stderr [FIXTURE_STDERR_LINES]")
	fs.BoolVar(&c.strictInit, "strict-init", false, "exit 4 on any request but initialize before it, as a strict 2025 server may [FIXTURE_STRICT_INIT]")
	fs.StringVar(&c.strictLog, "strict-init-log", "", "with -strict-init, append the method to `FILE` before exiting; with -modern-only, each initialize and server/discover [FIXTURE_STRICT_INIT_LOG]")
	fs.BoolVar(&c.modernOnly, "modern-only", false, "speak MCP 2026-07-28 only: answer server/discover, refuse initialize with an error naming the version [FIXTURE_MODERN_ONLY]")
	fs.IntVar(&c.toolsVariant, "tools-variant", 0, "serve tool list `N`: 0 the usual; 1 echo with another description and an extra \"upper\" argument, reverse added, meta removed; 2 no tools at all; 3 as 1 with a long description of echo, on several lines, with markup; 4 the usual and ten more of a typical size (20) [FIXTURE_TOOLS_VARIANT]")
	fs.StringVar(&c.uiURI, "ui-uri", "", "serve an MCP Apps view at the ui:// `URI`: a tool \"view\" whose definition and results name it in _meta.ui.resourceUri, and resources/read of it (HTML naming FIXTURE_TAG); resources/list stays empty, as many such servers' is [FIXTURE_UI_URI]")
	fs.BoolVar(&c.uiInResult, "ui-in-result", false, "with -ui-uri, name the view only in the tool's results, not in its definition [FIXTURE_UI_IN_RESULT]")
	fs.StringVar(&c.toolsVariantFile, "tools-variant-file", "", "read the tools variant from `FILE` at start (a missing file means 0): a test changes the server's tools between two starts without changing its command line [FIXTURE_TOOLS_VARIANT_FILE]")
	fs.IntVar(&c.holdMB, "hold-mb", 0, "at start, allocate `N` MiB, touch every page and hold it until exit [FIXTURE_HOLD_MB]")
	fs.DurationVar(&c.spin, "spin", 0, "at start, keep one CPU busy until the process has used this much CPU time, e.g. 300ms [FIXTURE_SPIN]")
	fs.IntVar(&c.growMB, "grow-mb", 0, "at start, allocate `N` MiB step by step, "+strconv.Itoa(growStepMB)+" MiB every "+growInterval.String()+", touching every page, and hold it: past a memory limit the server is killed on the way [FIXTURE_GROW_MB]")
	fs.IntVar(&c.forkBomb, "fork-bomb", 0, "at start, start sleeping children (sleep 3600, in the server's process group, stdio on /dev/null) until a fork fails or `N` run (at most "+strconv.Itoa(maxForkBomb)+"), then serve [FIXTURE_FORK_BOMB]")
	fs.BoolVar(&c.askRoots, "ask-roots", false, "before the first tools/call a process serves, ask the client for roots/list whatever it declared, and answer no call until the client does (as some servers do after each start); adds the tool roots, which returns what the client answered [FIXTURE_ASK_ROOTS]")
	fs.BoolVar(&c.askRootsAtInit, "ask-roots-at-init", false, "with -ask-roots, ask for roots/list as soon as the client sends notifications/initialized, before any call (as playwright, chrome-devtools and server-filesystem do) [FIXTURE_ASK_ROOTS_AT_INIT]")
	fs.StringVar(&c.skills, "skills", "", "serve the skills extension (SEP-2640) with a skill at each of these comma-separated `PATHS` (skill://PATH, named by its last segment, e.g. pdf-processing): SKILL.md (listed by resources/list), references/FORMS.md and scripts/extract.py, whose text names FIXTURE_TAG; skills/list (a skill a page), skills/get, resources/read and resources/directory/read, declared with directoryRead [FIXTURE_SKILLS]")
	fs.BoolVar(&c.skillsNoDir, "skills-no-directory", false, "with -skills, declare the extension without directoryRead and serve no resources/directory/read [FIXTURE_SKILLS_NO_DIRECTORY]")
	fs.StringVar(&c.httpAddr, "http", "", "serve MCP over HTTP at `ADDR` instead of stdio: each POST is one message, answered with a JSON body (a notification with 202); the fixture's own notifications and requests are not sent [FIXTURE_HTTP]")
	fs.StringVar(&c.methodLog, "method-log", "", "append the method of every request received to `FILE`, a line each: a test sees what reached the server [FIXTURE_METHOD_LOG]")
	fs.StringVar(&c.flock, "flock", "", "before serving, take an exclusive flock on `FILE` (created if missing) and hold it until exit; while another process holds it, append \"flock failed pid=P time=T err=E\" to FILE.failures once and try again every 50ms, serving nothing (not even initialize) meanwhile; once locked, append \"locked pid=P time=T\" to FILE.log. Times are RFC 3339 with nanoseconds, UTC. Unix only: a test sees that two servers never ran at once [FIXTURE_FLOCK]")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHeader)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	fail := func(format string, a ...any) (config, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(out, "mcp-fixture: %v\n", err)
		return c, err
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, b := range envBindings {
		if set[b.flag] {
			continue
		}
		v := getenv(b.env)
		if v == "" {
			continue
		}
		if err := fs.Set(b.flag, v); err != nil {
			return fail("invalid %s=%q: %v", b.env, v, err)
		}
	}
	switch {
	case c.slowStart < 0:
		return fail("slow-start must not be negative")
	case c.crashAfter < 0:
		return fail("crash-after must not be negative")
	case c.hugeLine < 0:
		return fail("huge-line must not be negative")
	case c.stderrLines < 0:
		return fail("stderr-lines must not be negative")
	case c.holdMB < 0:
		return fail("hold-mb must not be negative")
	case c.spin < 0:
		return fail("spin must not be negative")
	case c.growMB < 0:
		return fail("grow-mb must not be negative")
	case c.forkBomb < 0 || c.forkBomb > maxForkBomb:
		return fail("fork-bomb must be 0 to %d, not %d", maxForkBomb, c.forkBomb)
	}
	if c.toolsVariantFile != "" {
		b, err := os.ReadFile(c.toolsVariantFile)
		switch {
		case errors.Is(err, iofs.ErrNotExist):
			c.toolsVariant = 0
		case err != nil:
			return fail("tools-variant-file: %v", err)
		default:
			n, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return fail("tools-variant-file %s: %q is not a variant number", c.toolsVariantFile, strings.TrimSpace(string(b)))
			}
			c.toolsVariant = n
		}
	}
	if c.toolsVariant < 0 || c.toolsVariant >= toolVariants {
		return fail("tools-variant must be 0 to %d, not %d", toolVariants-1, c.toolsVariant)
	}
	return c, nil
}

// isHelp reports whether err asks for usage only.
func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }
