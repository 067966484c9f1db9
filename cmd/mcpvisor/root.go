package main

import (
	"github.com/spf13/cobra"
)

// Exit codes of the mcpvisor command.
const (
	exitOK    = 0
	exitUsage = 2
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "mcpvisor",
		Short:         "Process supervisor and gateway for MCP servers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newDoctorCmd(), newValidateCmd(), newServeCmd(), newStdioCmd(), newPsCmd())
	return root
}
