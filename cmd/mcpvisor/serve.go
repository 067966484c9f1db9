package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/daemon"
)

func newServeCmd() *cobra.Command {
	var (
		rf                runFlags
		listen, tokenFile string
		exitWithParent    bool
		noWatch           bool
		socket            string
		exitWhenUnused    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--listen 127.0.0.1:7331]",
		Short: "Serve the configured MCP servers over Streamable HTTP",
		Long: `Serve every configured server as one MCP endpoint at /mcp (tools and prompts
named {server}__{name}), and each server alone at /servers/{name}/mcp, over
Streamable HTTP. Servers start on first use and sleep when idle. The bearer
token, if any, comes from --token-file or the MCPVISOR_TOKEN environment
variable. GET /api/servers reports every server's state (mcpvisor ps); GET /
is a dashboard of them, live.

SIGHUP, a change of the config file (unless --no-watch) and mcpvisor reload
reload the configuration: a file with errors changes nothing; a valid one is
applied server by server, leaving unchanged servers untouched.

The first SIGINT or SIGTERM stops accepting requests, ends client sessions
and stops every server in parallel within --shutdown-timeout (exit 0); a
second signal, or the timeout, kills every server at once (exit 3).

serve also listens on a unix socket (--socket; by default mcpvisor.sock in
the state directory, mode 0600) for mcpvisor connect: each connection is
one client session, served as mcpvisor stdio serves its stdin and stdout.
A socket a live serve holds is never taken; a dead one's is replaced.
--exit-when-unused (which mcpvisor connect sets on a daemon it starts)
shuts serve down once it has had no client for that long: no socket
connection, no HTTP request or session.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := rf.log.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return usageError{Err: err}
			}
			token := os.Getenv("MCPVISOR_TOKEN")
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					return usageError{Err: fmt.Errorf("--token-file %s is empty", tokenFile)}
				}
			}
			return daemon.Serve(cmd.Context(), daemon.ServeOptions{
				Options: rf.options(log, cmd.ErrOrStderr()),
				Listen:  listen, Token: token, ExitWithParent: exitWithParent, NoWatch: noWatch,
				Socket: socket, ExitWhenUnused: exitWhenUnused,
			})
		},
	}
	rf.add(cmd)
	cmd.Flags().StringVar(&listen, "listen", "", "listen address (default from the config, else 127.0.0.1:7331)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token clients must send")
	cmd.Flags().BoolVar(&exitWithParent, "exit-with-parent", false, "shut down when the process that started mcpvisor exits")
	cmd.Flags().BoolVar(&noWatch, "no-watch", false, "do not reload when the config file changes (SIGHUP and mcpvisor reload still do)")
	cmd.Flags().StringVar(&socket, "socket", daemon.SocketAuto, `unix socket for mcpvisor connect ("auto": mcpvisor.sock in the state directory; "" or "none": no socket)`)
	cmd.Flags().DurationVar(&exitWhenUnused, "exit-when-unused", 0, "shut down after this long without a client (0: never; set by mcpvisor connect on a daemon it starts)")
	return cmd
}
