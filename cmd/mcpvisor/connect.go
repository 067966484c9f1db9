package main

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
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/bridge"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/watchdog"
)

// connect's defaults.
const (
	defaultConnectIdleExit     = 10 * time.Minute
	defaultConnectStartTimeout = 30 * time.Second
	// connectHandshakeTimeout bounds the preface exchange with a daemon
	// that answers the socket.
	connectHandshakeTimeout = 10 * time.Second
	// connectGCPercent and connectMemoryLimit keep connect's heap, two
	// 64 KiB buffers and little else, from growing before a collection.
	connectGCPercent   = 50
	connectMemoryLimit = 4 << 20
)

// connectOptions are connect's flags, resolved.
type connectOptions struct {
	server, configFile, stateDir, socket, start string
	idleExit, startTimeout                      time.Duration
}

// errParentGone ends connect when the client that started it has exited.
var errParentGone = errors.New("the client that started mcpvisor connect exited")

func newConnectCmd() *cobra.Command {
	var o connectOptions
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

If no daemon answers and --start=auto (the default), connect starts one from
--config (default $XDG_CONFIG_HOME/mcpvisor/config.json), detached from the
client, with stdout and stderr appended to daemon.log in the state directory,
and waits up to --start-timeout for it. Two connects starting at once start
one daemon (a lock in the state directory). A daemon started so exits by
itself once it has had no client for --idle-exit, stopping its servers; one
started by the user or a service manager stays.

connect exits with its client: at stdin EOF (after up to 2s for answers under
way), when the process that started it exits, or on SIGINT/SIGTERM (exit 0).
It exits 1, saying why on stderr, if the daemon closes the connection, refuses
it (no such server) or cannot be started. It never stops the daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.start != "auto" && o.start != "never" {
				return usageError{fmt.Errorf("--start: %q is not auto or never", o.start)}
			}
			// connect holds two copy buffers and not much else: a small
			// heap goal keeps its RSS small.
			debug.SetGCPercent(connectGCPercent)
			debug.SetMemoryLimit(connectMemoryLimit)
			return runConnect(cmd.Context(), o, cmd.ErrOrStderr())
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
func runConnect(ctx context.Context, o connectOptions, stderr io.Writer) error {
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
	c, err := dialDaemon(o.socket)
	if err != nil {
		if o.start == "never" {
			return fmt.Errorf("no mcpvisor daemon answers on %s (--start=never): %w", o.socket, err)
		}
		if c, err = startDaemon(ctx, o); err != nil {
			return err
		}
	}
	down, err := bridge.Handshake(c, bridge.Hello{Version: bridge.Version, Server: o.server, Client: clientName()}, connectHandshakeTimeout)
	if err != nil {
		_ = c.Close()
		if re := (*bridge.RefusedError)(nil); errors.As(err, &re) {
			return fmt.Errorf("the mcpvisor daemon on %s refused the connection: %s", o.socket, re.Reason)
		}
		return fmt.Errorf("the mcpvisor daemon on %s: %w", o.socket, err)
	}
	in, restoreIn := interruptibleStdin()
	defer restoreIn()
	out, restoreOut := interruptibleStdout()
	defer restoreOut()
	dropExecutablePages()
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
func (o *connectOptions) resolve(stderr io.Writer) error {
	if o.configFile == "" {
		o.configFile = defaultConfigFile()
	}
	if o.stateDir == "" {
		if data, err := config.ReadFile(o.configFile); err == nil {
			if cfg, err := config.Parse(data, o.configFile, config.LoadOptions{}); err == nil {
				o.stateDir = cfg.StateDir
			}
		}
	}
	if o.stateDir == "" {
		o.stateDir = defaultStateDir()
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

// dialDaemon connects to the daemon's socket.
func dialDaemon(path string) (*net.UnixConn, error) {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// daemonLogName is the daemon's log in the state directory, when connect
// started it.
const daemonLogName = "daemon.log"

// startDaemon starts mcpvisor serve for o, detached, and returns a
// connection to it once its socket answers. It holds the state
// directory's daemon.lock meanwhile and dials again once it has it, so
// that of connects starting at once only the first starts a daemon. The
// whole start, the wait for the lock included, is bounded by
// o.startTimeout.
func startDaemon(ctx context.Context, o connectOptions) (*net.UnixConn, error) {
	if _, err := os.Stat(o.configFile); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no mcpvisor daemon answers on %s, and there is no config to start one from: %s does not exist. Create it with `mcpvisor import` (it gathers the servers your MCP clients are configured with), or pass --config FILE", o.socket, o.configFile)
	}
	if err := os.MkdirAll(o.stateDir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.startTimeout, fmt.Errorf("--start-timeout %v passed", o.startTimeout))
	defer cancel()
	lock, err := bridge.Lock(ctx, filepath.Join(o.stateDir, "daemon.lock"))
	if err != nil {
		return nil, fmt.Errorf("starting the mcpvisor daemon: %w", err)
	}
	defer lock.Close()
	if c, err := dialDaemon(o.socket); err == nil {
		return c, nil // another connect started it meanwhile
	}
	logPath := filepath.Join(o.stateDir, daemonLogName)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	from, _ := logf.Seek(0, io.SeekEnd)
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "serve", "--config", o.configFile, "--state-dir", o.stateDir, "--socket", o.socket, "--exit-when-unused", o.idleExit.String())
	cmd.Stdout, cmd.Stderr = logf, logf // stdin: /dev/null
	cmd.SysProcAttr = detachedProcess()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the mcpvisor daemon: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	fail := func(why string) error {
		return fmt.Errorf("the mcpvisor daemon (%s) %s; the end of %s:\n%s", exe+" serve", why, logPath, logTail(logPath, from))
	}
	// Polled: nothing tells when a socket begins to answer.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if c, err := dialDaemon(o.socket); err == nil {
			return c, nil
		}
		if code, exited := reapIfExited(pid); exited {
			return nil, fail(fmt.Sprintf("exited (%s) before it answered on %s", code, o.socket))
		}
		select {
		case <-ctx.Done():
			return nil, fail(fmt.Sprintf("did not answer on %s: %v (pid %d may still come up; it exits by itself after %v without a client)", o.socket, context.Cause(ctx), pid, o.idleExit))
		case <-t.C:
		}
	}
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
