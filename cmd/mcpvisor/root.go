package main

import (
	"github.com/spf13/cobra"
)

// usageError is a mistake in the command line.
type usageError struct{ error }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "mcpvisor",
		Short:         "Process supervisor and gateway for MCP servers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newVersionCmd(), newDoctorCmd(), newValidateCmd(), newServeCmd(), newStdioCmd(), newPsCmd(), newInspectCmd(), newToolsCmd(), newCallCmd(), newWaitCmd(), newEventsCmd(), newLogsCmd(), newReloadCmd(), newRestartCmd(), newStopCmd(), newStartCmd(), newSleepCmd())
	return root
}
