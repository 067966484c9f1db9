package diag

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/config"
)

// NewCmdValidate is validate.
func NewCmdValidate(streams cmdutil.IOStreams) *cobra.Command {
	var (
		file   string
		strict bool
	)
	cmd := &cobra.Command{
		Use:   "validate --config FILE [--strict]",
		Short: "Check a configuration file and list its servers",
		Long: `Check a configuration file and list its servers.

Prints one line per server (name, kind, enabled or disabled, and the command
line or URL with secrets redacted) and any warnings, such as unknown
fields. An invalid file gives every problem found, each with its JSON path,
and a non-zero exit. --strict treats warnings as errors.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true, // as on the root; a bad config is not a usage error
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			io := streams.Or(cmd)
			cfg, err := config.Load(file, config.LoadOptions{Strict: strict})
			if err != nil {
				var cerr *config.Error
				if errors.As(err, &cerr) {
					printWarnings(io.ErrOut, cerr.Warnings)
				}
				return err
			}
			if err := printSummary(io.Out, cfg); err != nil {
				return err
			}
			printWarnings(io.ErrOut, cfg.Warnings)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (JSON; or a client's own: VS Code mcp.json, Zed settings.json, Codex config.toml)")
	cmd.Flags().BoolVar(&strict, "strict", false, "treat warnings (such as unknown fields) as errors")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func printSummary(w io.Writer, cfg *config.Config) error {
	disabled := 0
	for _, s := range cfg.Servers {
		if s.Disabled {
			disabled++
		}
	}
	servers := fmt.Sprintf("%d servers", len(cfg.Servers))
	if len(cfg.Servers) == 1 {
		servers = "1 server"
	}
	if disabled > 0 {
		servers += fmt.Sprintf(" (%d disabled)", disabled)
	}
	if _, err := fmt.Fprintf(w, "%s: valid, %s, listen %s\n", cfg.File, servers, cfg.Listen); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range cfg.Servers {
		kind := s.Kind
		if s.Transport == config.TransportSSE {
			kind += " (sse)"
		}
		state := "enabled"
		if s.Disabled {
			state = "disabled"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", s.Name, kind, state, s.Redacted())
	}
	return tw.Flush()
}

func printWarnings(w io.Writer, warnings []string) {
	for _, m := range warnings {
		fmt.Fprintln(w, "warning:", m)
	}
}
