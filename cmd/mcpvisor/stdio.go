package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/stdfile"
	"github.com/mcpvisor/mcpvisor/watchdog"
)

func newStdioCmd() *cobra.Command {
	var (
		rf       runFlags
		server   string
		idleExit time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stdio --config FILE [--server NAME]",
		Short: "Serve the configured MCP servers to one client over stdin/stdout",
		Long: `Serve every configured server as one MCP server over stdin and stdout, for
desktop clients that launch MCP servers as commands; with --server, serve that
one server alone. Logs go to stderr; stdout carries only the protocol.

mcpvisor exits, stopping every server it runs, when stdin reaches EOF, when
the process that started it exits (a client that reconnected and left this
one behind with its pipe still open), after --idle-exit without a client
request (off by default; a request in flight is never cut), or on
SIGINT/SIGTERM. A second signal, or --shutdown-timeout passing, kills every
server at once (exit 3).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := rf.log.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return usageError{Err: err}
			}
			// A client that is gone must not kill mcpvisor by SIGPIPE
			// before it has stopped its servers: a write error ends the
			// session instead. (Notify, not Ignore: an ignored signal
			// would be inherited by the servers.)
			signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
			tr, err := newTracing(rf.otlpEndpoint)
			if err != nil {
				return err
			}
			sd := shutdown.New()
			a, err := openApp(rf.configFile, rf.stateDir, log)
			if err != nil {
				_ = tr.Shutdown(context.Background()) // nothing exported yet
				return err
			}
			a.setTracing(tr)
			ep := a.gw.Aggregate()
			if server != "" {
				if ep = a.gw.Single(server); ep == nil {
					_ = a.close(context.Background())
					return usageError{Err: fmt.Errorf("--server: no enabled server named %q in %s", server, rf.configFile)}
				}
			}
			var activity watchdog.Tracker
			wd, err := watchdog.Start(sd.Context(), watchdog.Config{
				IdleTimeout: idleExit,
				State:       activity.Snapshot,
				OnTerminate: func(r watchdog.Reason) { sd.Trigger(r.String()) },
				Logger:      log,
			})
			if err != nil {
				_ = a.close(context.Background())
				return err
			}
			defer wd.Stop()
			a.startEager(sd.Context(), !rf.noLearn)

			stdin, restore := stdfile.Stdin()
			defer restore()
			go func() {
				_ = gateway.ServeStdio(sd.Context(), ep, stdin, os.Stdout, log, &activity)
				sd.Trigger("stdin closed")
			}()
			return a.shutdown(sd, rf.shutdownTimeout, func(ctx context.Context) error {
				_ = stdin.Close() // a blocked read must not hold the exit
				return a.close(ctx)
			})
		},
	}
	rf.add(cmd)
	cmd.Flags().StringVar(&server, "server", "", "serve only this server, unprefixed")
	cmd.Flags().DurationVar(&idleExit, "idle-exit", 0, "exit after this long without a client request (0: never)")
	return cmd
}
