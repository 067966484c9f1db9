package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
)

func newServeCmd() *cobra.Command {
	var (
		configFile, listen, tokenFile, stateDir string
		shutdown                                time.Duration
		noLearn                                 bool
		lf                                      logFlags
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--listen 127.0.0.1:7331]",
		Short: "Serve the configured MCP servers over Streamable HTTP",
		Long: `Serve every configured server as one MCP endpoint at /mcp (tools and prompts
named {server}__{name}), and each server alone at /servers/{name}/mcp, over
Streamable HTTP. Servers start on first use. The bearer token, if any, comes
from --token-file or the MCPVISOR_TOKEN environment variable.

The first SIGINT or SIGTERM stops every server in parallel within
--shutdown-timeout; a second one kills them at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := lf.newLogger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			token := os.Getenv("MCPVISOR_TOKEN")
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					return fmt.Errorf("--token-file %s is empty", tokenFile)
				}
			}
			a, err := openApp(configFile, stateDir, log)
			if err != nil {
				return err
			}
			if listen == "" {
				listen = a.cfg.Listen
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				_ = a.close(context.Background())
				return err
			}
			if token == "" && !isLoopback(ln.Addr()) {
				log.Warn("listening beyond loopback without a bearer token: anyone who can reach this address can use every server", "listen", ln.Addr().String())
			}
			opts := gateway.HTTPOptions{Token: token, Logger: log}
			mux := http.NewServeMux()
			handlers := []*gateway.StreamableHandler{gateway.NewStreamableHandler(a.gw.Aggregate(), opts)}
			mux.Handle("/mcp", handlers[0])
			for _, s := range a.fleet.Servers() {
				h := gateway.NewStreamableHandler(a.gw.Single(s.Name()), opts)
				handlers = append(handlers, h)
				mux.Handle("/servers/"+s.Name()+"/mcp", h)
			}
			mux.Handle("/api/", admin.New(a.fleet, a.events, admin.Options{Token: token}))
			mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a.startEager(ctx, !noLearn)
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			fmt.Fprintf(cmd.ErrOrStderr(), "mcpvisor: serving %d servers at http://%s/mcp\n", len(a.fleet.Servers()), ln.Addr())

			select {
			case err = <-errc:
			case <-ctx.Done():
			}
			stop()
			return shutdownGracefully(a, shutdown, func(ctx context.Context) {
				for _, h := range handlers {
					h.Close()
				}
				_ = srv.Shutdown(ctx)
			}, err)
		},
	}
	cmd.Flags().StringVarP(&configFile, "config", "c", "", "configuration file (JSON)")
	cmd.Flags().StringVar(&listen, "listen", "", "listen address (default from the config, else 127.0.0.1:7331)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token clients must send")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "state directory (default from the config, else $XDG_STATE_HOME/mcpvisor)")
	cmd.Flags().BoolVar(&noLearn, "no-learn", false, "do not start servers whose tools are not cached just to learn them")
	cmd.Flags().DurationVar(&shutdown, "shutdown-timeout", 10*time.Second, "bound on a graceful shutdown")
	cmd.Flags().StringVar(&lf.level, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&lf.format, "log-format", "auto", "auto (text on a terminal, else JSON), text or json")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// shutdownGracefully stops the front, then every server in parallel, all
// under one deadline. A second SIGINT/SIGTERM meanwhile cuts the deadline
// short: every remaining process group is killed at once.
func shutdownGracefully(a *app, timeout time.Duration, front func(context.Context), cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			a.log.Warn("second signal: killing every server now")
			cancel()
		case <-ctx.Done():
		}
	}()
	front(ctx)
	if err := a.close(ctx); err != nil {
		a.log.Warn("shutdown", "err", err)
	}
	if cause != nil && !errors.Is(cause, http.ErrServerClosed) {
		return cause
	}
	return nil
}
