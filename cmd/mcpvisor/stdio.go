package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/daemon"
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
			return daemon.Stdio(cmd.Context(), daemon.StdioOptions{Options: rf.options(log, cmd.ErrOrStderr()), Server: server, IdleExit: idleExit})
		},
	}
	rf.add(cmd)
	cmd.Flags().StringVar(&server, "server", "", "serve only this server, unprefixed")
	cmd.Flags().DurationVar(&idleExit, "idle-exit", 0, "exit after this long without a client request (0: never)")
	return cmd
}
