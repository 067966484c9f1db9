package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/proc"
)

func newDoctorCmd() *cobra.Command {
	var stateDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show which process-containment layers work on this machine, and why others do not",
		Long: `doctor opens mcpvisor's process runtime exactly as serve does and reports each
containment layer: process group, pidfd, parent-death signal, child subreaper,
pid namespace, cgroup v2, and the start-up sweep of trees that a killed
mcpvisor left behind (which it runs, as serve would).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			rt, err := proc.Open(proc.Options{StateDir: stateDir, Logger: log})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			defer rt.Close(ctx)
			rep := rt.Report()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return printDoctor(cmd.OutOrStdout(), rep, stateDir)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", defaultStateDir(), "state directory (ledger of running instances, caches)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printDoctor(w io.Writer, rep proc.Report, stateDir string) error {
	fmt.Fprintln(w, versionString())
	fmt.Fprintf(w, "uid %d, state directory %s\n\n", os.Getuid(), stateDir)
	fmt.Fprint(w, rep.String())
	fmt.Fprintln(w)
	if layer := rep.SurvivesSIGKILL(); layer != "" {
		fmt.Fprintf(w, "If mcpvisor is SIGKILLed, the %s layer removes every server process at once.\n", layer)
	} else {
		fmt.Fprintln(w, "If mcpvisor is SIGKILLed, direct children die (where pdeathsig works) but their")
		fmt.Fprintln(w, "descendants may survive until the next mcpvisor start sweeps them.")
	}
	return nil
}
