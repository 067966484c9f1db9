package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
)

// Runner runs one command of the service manager and returns what it
// printed (stdout and stderr together). ExecRunner runs it; tests record
// the argv instead.
type Runner interface {
	Run(ctx context.Context, argv ...string) ([]byte, error)
}

// DefaultRunTimeout bounds each command ExecRunner runs (systemctl and
// launchctl answer in well under a second; one that hangs — a manager
// that does not answer on its bus — must not hold install, or connect,
// forever).
const DefaultRunTimeout = 30 * time.Second

// runWaitDelay is how long Run still waits for the command's output once
// it exited (or was killed): a grandchild it left holding the output
// pipe does not hold Run.
const runWaitDelay = time.Second

// ExecRunner runs commands as processes, found in PATH; each is bounded
// by ctx and by Timeout.
type ExecRunner struct {
	// Timeout bounds each command (0: DefaultRunTimeout); one still
	// running then is killed, and Run returns an error.
	Timeout time.Duration
}

// Run runs argv and returns its combined output. Once the command has
// exited, what it left running with the output pipe open (a forked
// grandchild) holds Run for at most a second, and is no error.
func (r ExecRunner) Run(ctx context.Context, argv ...string) ([]byte, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultRunTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%s did not finish within %v", argv[0], timeout))
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = runWaitDelay
	out, err := cmd.CombinedOutput()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // exited successfully; a grandchild kept the pipe open
	}
	if err != nil && context.Cause(ctx) != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	return out, err
}

// Host is where the service is installed: the user, the service
// manager's commands, and where output goes.
type Host struct {
	GOOS          string
	Home          string
	XDGConfigHome string // "" means Home/.config
	UID           int    // launchd's gui/UID domain
	User          string // for the lingering hint
	// LingerDir is where systemd-logind marks the users it keeps a
	// manager for without a login (/var/lib/systemd/linger, one file per
	// user); "" skips the lingering hint.
	LingerDir string
	Runner    Runner
	Out       io.Writer // what was done, and what would be
}

// Options are the choices of install and uninstall.
type Options struct {
	// DryRun prints what would be written and run, and does neither.
	DryRun bool
	// Force replaces a definition that differs from the one install
	// would write (its difference is shown), and lets uninstall remove
	// one this package did not write.
	Force bool
}

// ErrExists: a different definition is there, and Options.Force was not
// given.
var ErrExists = errors.New("a different service definition is installed")

// ErrNotOurs: the definition uninstall would remove was not written by
// mcpvisor service install, and Options.Force was not given.
var ErrNotOurs = errors.New("the service definition was not written by mcpvisor service install")

// Install writes the definition of spec where h's service manager reads
// it and has the manager start it now and at every login. A definition
// there already is left as it is when it is the same (nothing is run),
// and replaced — the manager then restarts the service — only with
// opts.Force, after its difference is shown (ErrExists otherwise). A
// command that fails ends Install with an error naming it and quoting its
// output; the file written stays (uninstall removes it).
func Install(ctx context.Context, h Host, spec Spec, opts Options) error {
	spec.GOOS = h.GOOS
	path, err := Location(h.GOOS, h.Home, h.XDGConfigHome)
	if err != nil {
		return err
	}
	def, err := Definition(spec)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading the installed definition: %w", err)
	}
	if exists && bytes.Equal(old, def) {
		fmt.Fprintf(h.Out, "%s is installed as it would be written: nothing to do.\n", path)
		return nil
	}
	if exists {
		fmt.Fprintf(h.Out, "%s differs from what install would write:\n%s", path, clientcfg.Diff(old, def, path+" (installed)", path+" (install)"))
		if !opts.Force {
			return fmt.Errorf("%w at %s (its difference is above): --force replaces it", ErrExists, path)
		}
	}
	steps := installSteps(h, path, exists)
	if opts.DryRun {
		fmt.Fprintf(h.Out, "would write %s:\n%s", path, def)
		printSteps(h, steps)
		return nil
	}
	if h.GOOS == "darwin" && spec.LogDir != "" {
		// launchd opens the log there as it starts the job, and makes
		// no directory for it.
		if err := os.MkdirAll(spec.LogDir, 0o700); err != nil {
			return fmt.Errorf("the log directory: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := clientcfg.WriteFileAtomic(path, def, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(h.Out, "wrote %s\n", path)
	if err := runSteps(ctx, h, steps); err != nil {
		return fmt.Errorf("%w\n(%s is written; mcpvisor service uninstall removes it)", err, path)
	}
	afterInstall(h)
	return nil
}

// step is one command of an install or uninstall; mayFail: its failure
// is said and the rest goes on (launchctl bootout of an agent that is not
// loaded — it failed to start, or was booted out by hand — fails).
type step struct {
	argv    []string
	mayFail bool
}

func printSteps(h Host, steps []step) {
	for _, st := range steps {
		fmt.Fprintf(h.Out, "would run: %s\n", shellLine(st.argv))
	}
}

func runSteps(ctx context.Context, h Host, steps []step) error {
	for _, st := range steps {
		if err := run(ctx, h, st.argv); err != nil {
			if !st.mayFail {
				return err
			}
			fmt.Fprintf(h.Out, "(%v: going on)\n", err)
		}
	}
	return nil
}

// installSteps are the commands that load and start the definition at
// path (replacing one loaded before when replace is set).
func installSteps(h Host, path string, replace bool) []step {
	if h.GOOS == "darwin" {
		var steps []step
		if replace {
			steps = append(steps, step{argv: []string{"launchctl", "bootout", launchdTarget(h)}, mayFail: true})
		}
		return append(steps, step{argv: []string{"launchctl", "bootstrap", launchdDomain(h), path}})
	}
	steps := []step{{argv: []string{"systemctl", "--user", "daemon-reload"}}}
	if replace {
		return append(steps, step{argv: []string{"systemctl", "--user", "enable", Unit}}, step{argv: []string{"systemctl", "--user", "restart", Unit}})
	}
	return append(steps, step{argv: []string{"systemctl", "--user", "enable", "--now", Unit}})
}

func launchdDomain(h Host) string { return "gui/" + strconv.Itoa(h.UID) }
func launchdTarget(h Host) string { return launchdDomain(h) + "/" + Label }

// afterInstall says how to look at the running service, and, for systemd,
// that it runs only during a login unless the user lingers.
func afterInstall(h Host) {
	if h.GOOS == "darwin" {
		fmt.Fprintf(h.Out, "mcpvisor serve runs now, and at every login: launchctl print %s\n", launchdTarget(h))
		return
	}
	fmt.Fprintf(h.Out, "mcpvisor serve runs now, and at every login: systemctl --user status %s; its log: journalctl --user -u %s\n", Unit, Unit)
	if h.LingerDir == "" || h.User == "" {
		return
	}
	if _, err := os.Stat(filepath.Join(h.LingerDir, h.User)); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(h.Out, "It runs only while %s is logged in. To run it from boot, without a login: loginctl enable-linger %s\n", h.User, h.User)
	}
}

// Uninstall stops the service, has the manager forget it and removes its
// definition. Nothing installed is no error (it says so). A definition
// without Marker is not removed unless opts.Force (ErrNotOurs). When the
// service cannot be stopped (systemd), the definition stays.
func Uninstall(ctx context.Context, h Host, opts Options) error {
	path, err := Location(h.GOOS, h.Home, h.XDGConfigHome)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(h.Out, "no service installed at %s: nothing to do.\n", path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the installed definition: %w", err)
	}
	if !bytes.Contains(old, []byte(Marker)) && !opts.Force {
		return fmt.Errorf("%w: %s (--force removes it anyway)", ErrNotOurs, path)
	}
	// systemd: a service that cannot be stopped keeps its definition.
	before := []step{{argv: []string{"systemctl", "--user", "disable", "--now", Unit}}}
	after := []step{{argv: []string{"systemctl", "--user", "daemon-reload"}}}
	if h.GOOS == "darwin" {
		before, after = []step{{argv: []string{"launchctl", "bootout", launchdTarget(h)}, mayFail: true}}, nil
	}
	if opts.DryRun {
		printSteps(h, before)
		fmt.Fprintf(h.Out, "would remove %s\n", path)
		printSteps(h, after)
		return nil
	}
	if err := runSteps(ctx, h, before); err != nil {
		return fmt.Errorf("%w\n(%s is kept)", err, path)
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	fmt.Fprintf(h.Out, "removed %s\n", path)
	return runSteps(ctx, h, after)
}

// run runs argv through h's runner and says so; its failure names the
// command and quotes what it printed.
func run(ctx context.Context, h Host, argv []string) error {
	if err := runQuiet(ctx, h, argv); err != nil {
		return err
	}
	fmt.Fprintf(h.Out, "ran: %s\n", shellLine(argv))
	return nil
}

// runQuiet is run without a word when it succeeds.
func runQuiet(ctx context.Context, h Host, argv []string) error {
	out, err := h.Runner.Run(ctx, argv...)
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg != "" {
			msg = ": " + msg
		}
		return fmt.Errorf("%s failed (%v)%s", shellLine(argv), err, msg)
	}
	return nil
}

// shellLine is argv as one would type it (words with spaces quoted).
func shellLine(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t'\"\\$") {
			a = strconv.Quote(a)
		}
		words[i] = a
	}
	return strings.Join(words, " ")
}
