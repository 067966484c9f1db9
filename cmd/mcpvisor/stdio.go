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
)

func newStdioCmd() *cobra.Command {
	var (
		configFile, stateDir, server string
		shutdown                     time.Duration
		noLearn                      bool
		lf                           logFlags
	)
	cmd := &cobra.Command{
		Use:   "stdio --config FILE [--server NAME]",
		Short: "Serve the configured MCP servers to one client over stdin/stdout",
		Long: `Serve every configured server as one MCP server over stdin and stdout, for
desktop clients that launch MCP servers as commands; with --server, serve that
one server alone. Logs go to stderr; stdout carries only the protocol. When
stdin closes, mcpvisor stops every server and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := lf.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			a, err := openApp(configFile, stateDir, log)
			if err != nil {
				return err
			}
			ep := a.gw.Aggregate()
			if server != "" {
				if ep = a.gw.Single(server); ep == nil {
					_ = a.close(context.Background())
					return fmt.Errorf("--server: no enabled server named %q in %s", server, configFile)
				}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a.startEager(ctx, !noLearn)
			err = gateway.ServeStdio(ctx, ep, os.Stdin, os.Stdout, log)
			stop()
			_ = err // stdin EOF or a signal: both end the session normally
			return shutdownGracefully(a, shutdown, func(context.Context) {}, nil)
		},
	}
	cmd.Flags().StringVarP(&configFile, "config", "c", "", "configuration file (JSON)")
	cmd.Flags().StringVar(&server, "server", "", "serve only this server, unprefixed")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "state directory (default from the config, else $XDG_STATE_HOME/mcpvisor)")
	cmd.Flags().BoolVar(&noLearn, "no-learn", false, "do not start servers whose tools are not cached just to learn them")
	cmd.Flags().DurationVar(&shutdown, "shutdown-timeout", 10*time.Second, "bound on a graceful shutdown")
	cmd.Flags().StringVar(&lf.level, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&lf.format, "log-format", "auto", "auto (text on a terminal, else JSON), text or json")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
