package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/daemon"
)

// logFlags are the logging flags of serve and stdio.
type logFlags struct {
	level  string
	format string
}

// newLogger logs to w (stderr: stdout may belong to the protocol), as text
// on a terminal and JSON otherwise unless format says.
func (f logFlags) newLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	format := f.format
	if format == "" || format == "auto" {
		format = "json"
		if fi, ok := w.(*os.File); ok && isTerminal(fi) {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not one of auto, text, json", f.format)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runFlags are the flags serve and stdio share.
type runFlags struct {
	configFile, stateDir string
	otlpEndpoint         string
	shutdownTimeout      time.Duration
	noLearn              bool
	log                  logFlags
}

func (f *runFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.configFile, "config", "c", "", "configuration file (JSON)")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", "", "state directory (default from the config, else $XDG_STATE_HOME/mcpvisor)")
	cmd.Flags().DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "bound on a graceful shutdown")
	cmd.Flags().BoolVar(&f.noLearn, "no-learn", false, "do not start servers whose tools are not cached just to learn them")
	cmd.Flags().StringVar(&f.log.level, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&f.log.format, "log-format", "auto", "auto (text on a terminal, else JSON), text or json")
	cmd.Flags().StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "export a trace span of each client request to this OTLP/HTTP receiver (e.g. http://127.0.0.1:4318; default from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else off)")
	_ = cmd.MarkFlagRequired("config")
}

// options are the daemon's options of these flags, logging to log.
func (f *runFlags) options(log *slog.Logger, stderr io.Writer) daemon.Options {
	return daemon.Options{ConfigFile: f.configFile, StateDir: f.stateDir, OTLPEndpoint: f.otlpEndpoint, Version: cmdutil.Version(),
		ShutdownTimeout: f.shutdownTimeout, NoLearn: f.noLearn, Log: log, Stderr: stderr}
}
