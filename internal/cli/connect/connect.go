package connect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/bridge"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/mempolicy"
	"github.com/mcpvisor/mcpvisor/internal/peercred"
	"github.com/mcpvisor/mcpvisor/internal/service"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/stdfile"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
	"github.com/mcpvisor/mcpvisor/watchdog"
)

// connect's defaults.
const (
	defaultConnectIdleExit     = 10 * time.Minute
	defaultConnectStartTimeout = 30 * time.Second
	// connectHandshakeTimeout bounds the preface exchange with a daemon
	// that answers the socket.
	connectHandshakeTimeout = 10 * time.Second
)

// Options are connect's flags, resolved.
type Options struct {
	server, configFile, stateDir, socket, start string
	idleExit, startTimeout                      time.Duration
}

// errParentGone ends connect when the client that started it has exited.
var errParentGone = errors.New("the client that started mcpvisor connect exited")

// NewCmdConnect is connect: its flags fill an Options, run by runF (nil:
// runConnect) with the command's stderr.
func NewCmdConnect(streams cmdutil.IOStreams, runF func(context.Context, Options, io.Writer) error) *cobra.Command {
	var o Options
	cmd := &cobra.Command{
		Use:   "connect [--server NAME]",
		Short: "Bridge a client's stdio to the shared mcpvisor daemon (what a desktop client launches)",
		Long: `Connect this process's stdin and stdout to the mcpvisor serve daemon of the
state directory, so that every MCP client on the machine shares one supervised
fleet: one process per server, however many clients. Configure a client to
launch "mcpvisor connect" (every server, aggregated as /mcp) or
"mcpvisor connect --server NAME" (that server alone) instead of the servers.

connect relays bytes over the daemon's unix socket (mcpvisor.sock in the state
directory): the client's lines reach the daemon's stdio front unchanged, in
either protocol era, with no HTTP session, SSE stream or header to translate,
and a unix socket is the cheapest hop between two local processes. Logs go to
stderr; stdout carries only the protocol.

If no daemon answers and --start=auto (the default), connect has one started
and waits up to --start-timeout for it: if "mcpvisor service install"
installed the user service, its manager starts it (systemctl --user start, or
launchctl kickstart), within half that time; else, or if that fails (said on
stderr), connect starts one from --config (default
$XDG_CONFIG_HOME/mcpvisor/config.json), detached from the client, in the home
directory, with stdout and stderr appended to daemon.log in the state
directory. Two connects starting at once start one daemon (a lock in the
state directory). A daemon connect starts exits by itself once it has had no
client for --idle-exit, stopping its servers; one started by the user or a
service manager stays. It inherits the environment of the client that
happened to start it (its PATH finds the servers' commands): for a daemon
with the login environment, use mcpvisor service install. A daemon that
closes the connection before answering (it is exiting) is waited for, and
another started.

connect exits with its client: at stdin EOF (after up to 2s for answers under
way), when the process that started it exits, or on SIGINT/SIGTERM (exit 0).
It exits 1, saying why on stderr, if the daemon closes the connection, refuses
it (no such server) or cannot be started. It never stops the daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.start != "auto" && o.start != "never" {
				return shutdown.UsageError{Err: fmt.Errorf("--start: %q is not auto or never", o.start)}
			}
			if runF != nil {
				return runF(cmd.Context(), o, streams.Or(cmd).ErrOut)
			}
			mempolicy.Relay()
			return runConnect(cmd.Context(), o, streams.Or(cmd).ErrOut)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "serve only this server, unprefixed (default: every server, aggregated)")
	f.StringVarP(&o.configFile, "config", "c", "", "the daemon's configuration, used to start one (default $XDG_CONFIG_HOME/mcpvisor/config.json)")
	f.StringVar(&o.stateDir, "state-dir", "", "the daemon's state directory (default from the config, else $XDG_STATE_HOME/mcpvisor)")
	f.StringVar(&o.socket, "socket", "", "the daemon's socket (default mcpvisor.sock in the state directory)")
	f.StringVar(&o.start, "start", "auto", "auto: start a daemon if none answers; never: fail instead")
	f.DurationVar(&o.idleExit, "idle-exit", defaultConnectIdleExit, "a daemon this starts exits after this long without a client")
	f.DurationVar(&o.startTimeout, "start-timeout", defaultConnectStartTimeout, "bound on starting a daemon until it answers")
	return cmd
}

// runConnect is connect: dial (or start) the daemon, send the preface,
// relay until the client or the daemon goes.
func runConnect(ctx context.Context, o Options, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A client that is gone must not kill connect by SIGPIPE: a write
	// error ends the relay instead.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd, err := watchdog.Start(ctx, watchdog.Config{OnTerminate: func(watchdog.Reason) { cancel(errParentGone) }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer wd.Stop()

	if err := o.resolve(stderr); err != nil {
		return err
	}
	c, down, err := reachDaemon(ctx, o, stderr)
	if err != nil {
		if ctx.Err() != nil {
			return nil // its client, its parent or a signal ended it while it reached the daemon
		}
		return err
	}
	in, restoreIn := stdfile.Stdin()
	defer restoreIn()
	out, restoreOut := stdfile.Stdout()
	defer restoreOut()
	mempolicy.DropExecutablePages()
	err = bridge.Relay(ctx, c, down, in, out, bridge.RelayOptions{})
	switch {
	case err == nil, errors.Is(err, bridge.ErrClientGone), errors.Is(err, errParentGone), errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, bridge.ErrDaemonClosed):
		return fmt.Errorf("the mcpvisor daemon on %s closed the connection (its log: %s): %w", o.socket, filepath.Join(o.stateDir, daemonLogName), err)
	}
	return err
}

// resolve fills in the defaults: the config file, the state directory
// (the flag, else the config's stateDir, else the default) and the socket.
func (o *Options) resolve(stderr io.Writer) error {
	if o.configFile == "" {
		f, err := userdirs.ConfigFile()
		if err != nil {
			return err
		}
		o.configFile = f
	}
	if o.stateDir == "" {
		if data, err := config.ReadFile(o.configFile); err == nil {
			if cfg, err := config.Parse(data, o.configFile, config.LoadOptions{}); err == nil {
				o.stateDir = cfg.StateDir
			}
		}
	}
	if o.stateDir == "" {
		d, err := userdirs.StateDir()
		if err != nil {
			return err
		}
		o.stateDir = d
	}
	// The daemon may be started from here: absolute paths, so that its
	// log and ps say which files it serves.
	for _, p := range []*string{&o.configFile, &o.stateDir} {
		if abs, err := filepath.Abs(*p); err == nil {
			*p = abs
		}
	}
	if o.socket == "" {
		path, fallback, err := bridge.SocketPath(o.stateDir)
		if err != nil {
			return fmt.Errorf("--socket: %w", err)
		}
		if fallback {
			fmt.Fprintf(stderr, "mcpvisor connect: the state directory's path is too long for a socket; using %s\n", path)
		}
		o.socket = path
	}
	return nil
}

// errNoAnswer: nothing listens on the socket (the dial failed).
type errNoAnswer struct{ err error }

func (e errNoAnswer) Error() string { return e.err.Error() }
func (e errNoAnswer) Unwrap() error { return e.err }

// reachDaemon is a connection to the daemon with its preface answered:
// the daemon that answers the socket; else, with --start=auto, the
// installed user service, started by its manager; else a daemon connect
// starts. A daemon that closes the connection before answering is going
// away (an auto-started one reaching its --exit-when-unused deadline as
// the client dialed): with --start=auto connect says so and goes the
// start path, which waits for it to be gone.
func reachDaemon(ctx context.Context, o Options, stderr io.Writer) (*net.UnixConn, io.Reader, error) {
	c, down, err := answer(ctx, o)
	if err == nil {
		return c, down, nil
	}
	var none errNoAnswer
	switch {
	case errors.As(err, &none) && o.start == "never":
		return nil, nil, fmt.Errorf("no mcpvisor daemon answers on %s (--start=never): %w", o.socket, err)
	case errors.Is(err, bridge.ErrDaemonClosed) && o.start == "auto":
		fmt.Fprintf(stderr, "mcpvisor connect: the daemon on %s closed the connection before answering (it is exiting): starting one\n", o.socket)
	case !errors.As(err, &none):
		return nil, nil, handshakeErr(o, err)
	}
	return startDaemon(ctx, o, stderr)
}

// answer dials the daemon's socket and exchanges the preface: the
// connection and the reader of the daemon's bytes, or an errNoAnswer (the
// dial failed), or the handshake's error (the connection closed). Each
// step has its bound (a second to dial, connectHandshakeTimeout for the
// preface), and the end of ctx cuts both.
func answer(ctx context.Context, o Options) (*net.UnixConn, io.Reader, error) {
	c, err := dialDaemon(ctx, o.socket)
	if errors.As(err, new(foreignSocketError)) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, errNoAnswer{err}
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	down, err := bridge.Handshake(c, bridge.Hello{Version: bridge.Version, Server: o.server, Client: clientName()}, connectHandshakeTimeout)
	cut := !stop()
	if err == nil && cut {
		err = context.Cause(ctx) // ended just as the daemon answered
	}
	if err != nil {
		_ = c.Close()
		if cut {
			return nil, nil, context.Cause(ctx)
		}
		return nil, nil, err
	}
	return c, down, nil
}

// handshakeErr is connect's error for a daemon that answered the socket
// but not the preface.
func handshakeErr(o Options, err error) error {
	if re := (*bridge.RefusedError)(nil); errors.As(err, &re) {
		return fmt.Errorf("the mcpvisor daemon on %s refused the connection: %s", o.socket, re.Reason)
	}
	return fmt.Errorf("the mcpvisor daemon on %s: %w", o.socket, err)
}

// dialDaemon connects to the daemon's socket, and checks that this user
// serves it before anything is sent (peerIsMe).
func dialDaemon(ctx context.Context, path string) (*net.UnixConn, error) {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	if err := peerIsMe(uc, os.Getuid()); err != nil {
		_ = c.Close()
		return nil, foreignSocketError{fmt.Errorf("not connecting to %s: %w", path, err)}
	}
	return uc, nil
}

// foreignSocketError: the socket answers, but another user serves it.
type foreignSocketError struct{ err error }

func (e foreignSocketError) Error() string { return e.err.Error() }
func (e foreignSocketError) Unwrap() error { return e.err }

// peerIsMe refuses a socket served by another user than uid's (a socket
// put in a shared directory, or a path another user may write): a
// client's requests go to its own user's daemon, or nowhere.
func peerIsMe(c *net.UnixConn, uid int) error {
	got, err := peercred.UID(c)
	if err != nil {
		return fmt.Errorf("cannot tell which user serves it: %w", err)
	}
	if got != uid {
		return fmt.Errorf("it is served by uid %d, not by this user (uid %d): nothing is sent to another user's process", got, uid)
	}
	return nil
}

// daemonLogName is the daemon's log in the state directory, when connect
// started it.
const daemonLogName = "daemon.log"

// startPoll is how often connect tries the socket while a daemon comes
// up (or one going away goes): nothing tells when a socket begins to
// answer.
const startPoll = 20 * time.Millisecond

// startDaemon has a daemon started for o and returns a connection to it
// once it answers the preface. It holds the state directory's
// daemon.lock meanwhile and tries the socket again once it has it, so
// that of connects starting at once only the first starts one; a daemon
// that closes the connection unanswered is waited for to go. If
// mcpvisor service install installed the user service, its manager is
// asked to start it (bounded by half of --start-timeout), so that no
// daemon of connect's takes the socket from it; if that fails, or there
// is no service, connect starts mcpvisor serve itself, detached, with
// --exit-when-unused. The whole start, the wait for the lock included,
// is bounded by o.startTimeout, but for a try of the socket under way
// when it passes, which ends within its own bounds (a second's dial,
// connectHandshakeTimeout).
func startDaemon(ctx context.Context, o Options, stderr io.Writer) (*net.UnixConn, io.Reader, error) {
	if err := os.MkdirAll(o.stateDir, 0o700); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.startTimeout, fmt.Errorf("--start-timeout %v passed", o.startTimeout))
	defer cancel()
	lock, err := bridge.Lock(ctx, filepath.Join(o.stateDir, "daemon.lock"))
	if err != nil {
		return nil, nil, fmt.Errorf("starting the mcpvisor daemon: %w", err)
	}
	defer lock.Close()
	// Another connect may have started one meanwhile; one going away is
	// waited for.
	c, down, err := awaitAnswer(ctx, o, func(err error) error {
		if errors.As(err, new(errNoAnswer)) {
			return errNothingListens
		}
		return nil
	}, func() error {
		return fmt.Errorf("the mcpvisor daemon on %s is going away and was not gone within --start-timeout: %w", o.socket, context.Cause(ctx))
	})
	if !errors.Is(err, errNothingListens) {
		return c, down, err
	}
	if h, ok := installedService(); ok {
		c, down, err := startService(ctx, o, h)
		if err == nil {
			return c, down, nil
		}
		if ctx.Err() != nil {
			return nil, nil, err
		}
		fmt.Fprintf(stderr, "mcpvisor connect: %v; starting a daemon of its own instead\n", err)
	}
	return startOwnDaemon(ctx, o)
}

// installedService is this user's service host, if mcpvisor service
// install installed the service (its definition, with the marker, where
// the manager reads it: $XDG_CONFIG_HOME's, else ~/.config's, for a
// client that launches connect without XDG_CONFIG_HOME).
func installedService() (service.Host, bool) {
	home, err := userdirs.Home()
	if err != nil {
		return service.Host{}, false
	}
	for _, xdg := range []string{os.Getenv("XDG_CONFIG_HOME"), ""} {
		h := service.Host{GOOS: runtime.GOOS, Home: home, XDGConfigHome: xdg, UID: os.Getuid(), Runner: service.ExecRunner{}, Out: io.Discard}
		if _, ok := service.Installed(h); ok {
			return h, true
		}
	}
	return service.Host{}, false
}

// startService asks the service manager to start the installed service
// and waits for it to answer on o.socket, bounded by half of what is left
// of ctx (the other half is for a daemon of connect's own).
func startService(ctx context.Context, o Options, h service.Host) (*net.UnixConn, io.Reader, error) {
	bound := o.startTimeout / 2
	if dl, ok := ctx.Deadline(); ok {
		bound = time.Until(dl) / 2
	}
	sctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	what := "the installed mcpvisor service (" + strings.Join(service.StartCommand(h), " ") + ")"
	if err := service.Start(sctx, h); err != nil {
		return nil, nil, fmt.Errorf("could not start %s: %w", what, err)
	}
	return awaitAnswer(sctx, o, nil, func() error {
		return fmt.Errorf("%s started but did not answer on %s within %v (does it serve another state directory? mcpvisor service install --state-dir)", what, o.socket, bound.Round(time.Millisecond))
	})
}

// errNothingListens: no daemon listens on the socket.
var errNothingListens = errors.New("no daemon listens")

// awaitAnswer tries o's socket every startPoll until a daemon answers the
// preface (nothing listening yet, or one closing the connection as it
// goes, is tried again), refuses it, check (if not nil) fails on what the
// try met, or ctx ends: then the error is expired's.
func awaitAnswer(ctx context.Context, o Options, check func(error) error, expired func() error) (*net.UnixConn, io.Reader, error) {
	t := time.NewTicker(startPoll)
	defer t.Stop()
	for {
		c, down, err := answer(ctx, o)
		var none errNoAnswer
		switch {
		case err == nil:
			return c, down, nil
		case ctx.Err() != nil:
			return nil, nil, expired()
		case errors.As(err, &none), errors.Is(err, bridge.ErrDaemonClosed):
		default:
			return nil, nil, handshakeErr(o, err)
		}
		if check != nil {
			if err := check(err); err != nil {
				return nil, nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, expired()
		case <-t.C:
		}
	}
}

// startOwnDaemon starts mcpvisor serve for o, detached, in the user's
// home directory (not the client's working directory), with the client's
// environment, and waits until it answers, bounded by ctx.
func startOwnDaemon(ctx context.Context, o Options) (*net.UnixConn, io.Reader, error) {
	if _, err := os.Stat(o.configFile); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no mcpvisor daemon answers on %s, and there is no config to start one from: %s does not exist. Create it with `mcpvisor import` (it gathers the servers your MCP clients are configured with), or pass --config FILE", o.socket, o.configFile)
	}
	logPath := filepath.Join(o.stateDir, daemonLogName)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	from, _ := logf.Seek(0, io.SeekEnd)
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(exe, "serve", "--config", o.configFile, "--state-dir", o.stateDir, "--socket", o.socket, "--exit-when-unused", o.idleExit.String())
	cmd.Stdout, cmd.Stderr = logf, logf // stdin: /dev/null
	cmd.SysProcAttr = detachedProcess()
	// Not the client's working directory, which the daemon would hold
	// (and its servers inherit) long after the client has gone.
	cmd.Dir = string(filepath.Separator)
	if home, err := userdirs.Home(); err == nil {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			cmd.Dir = home
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the mcpvisor daemon: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	fail := func(why string) error {
		return fmt.Errorf("the mcpvisor daemon (%s) %s; the end of %s:\n%s", exe+" serve", why, logPath, logTail(logPath, from))
	}
	exited := func(error) error {
		if code, exited := reapIfExited(pid); exited {
			return fail(fmt.Sprintf("exited (%s) before it answered on %s", code, o.socket))
		}
		return nil
	}
	return awaitAnswer(ctx, o, exited, func() error {
		return fail(fmt.Sprintf("did not answer on %s: %v (pid %d may still come up; it exits by itself after %v without a client)", o.socket, context.Cause(ctx), pid, o.idleExit))
	})
}

// logTail is the last lines (at most 4 KiB) of what was written to path
// from offset from on.
func logTail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if from < int64(len(b)) {
		b = b[from:]
	} else {
		b = nil
	}
	const most = 4 << 10
	if len(b) > most {
		b = b[len(b)-most:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "(nothing)"
	}
	return string(bytes.TrimRight(b, "\n"))
}
