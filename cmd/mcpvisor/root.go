package main

import (
	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/actions"
	"github.com/mcpvisor/mcpvisor/internal/cli/audit"
	"github.com/mcpvisor/mcpvisor/internal/cli/call"
	"github.com/mcpvisor/mcpvisor/internal/cli/clients"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/cli/connect"
	"github.com/mcpvisor/mcpvisor/internal/cli/diag"
	"github.com/mcpvisor/mcpvisor/internal/cli/login"
	"github.com/mcpvisor/mcpvisor/internal/cli/observe"
	"github.com/mcpvisor/mcpvisor/internal/cli/secret"
	"github.com/mcpvisor/mcpvisor/internal/cli/status"
	"github.com/mcpvisor/mcpvisor/internal/cli/svc"
	"github.com/mcpvisor/mcpvisor/internal/cli/tools"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// usageError is a mistake in the command line.
type usageError = shutdown.UsageError

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "mcpvisor",
		Short:         "Process supervisor and gateway for MCP servers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{Err: err} })
	root.AddCommand(diag.NewCmdVersion(cmdutil.IOStreams{}), diag.NewCmdDoctor(cmdutil.IOStreams{}), diag.NewCmdValidate(cmdutil.IOStreams{}), newServeCmd(), newStdioCmd(), connect.NewCmdConnect(cmdutil.IOStreams{}, nil), status.NewCmdPs(cmdutil.IOStreams{}, nil), status.NewCmdInspect(cmdutil.IOStreams{}, nil), tools.NewCmdTools(cmdutil.IOStreams{}, nil), call.NewCmdCall(cmdutil.IOStreams{}, nil), status.NewCmdWait(cmdutil.IOStreams{}, nil), observe.NewCmdEvents(cmdutil.IOStreams{}, nil), observe.NewCmdLogs(cmdutil.IOStreams{}, nil), audit.NewCmdAudit(cmdutil.IOStreams{}, nil), actions.NewCmdReload(cmdutil.IOStreams{}, nil), actions.NewCmdRestart(cmdutil.IOStreams{}, nil), actions.NewCmdStop(cmdutil.IOStreams{}, nil), actions.NewCmdStart(cmdutil.IOStreams{}, nil), actions.NewCmdSleep(cmdutil.IOStreams{}, nil), actions.NewCmdRefresh(cmdutil.IOStreams{}, nil), clients.NewCmdImport(cmdutil.IOStreams{}, nil), clients.NewCmdInstall(cmdutil.IOStreams{}, nil), clients.NewCmdUninstall(cmdutil.IOStreams{}, nil), svc.NewCmdService(cmdutil.IOStreams{}, nil), secret.NewCmdSecret(cmdutil.IOStreams{}, nil), login.NewCmdLogin(cmdutil.IOStreams{}, nil), login.NewCmdLogout(cmdutil.IOStreams{}, nil))
	usageArgs(root)
	return root
}

// usageArgs makes every positional-argument error of cmd and the commands
// under it a usage error, whatever check cobra or the command runs.
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{Err: err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}
