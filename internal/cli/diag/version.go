package diag

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
)

// NewCmdVersion is version.
func NewCmdVersion(streams cmdutil.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the mcpvisor version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(streams.Or(cmd).Out, cmdutil.Version())
			return err
		},
	}
}
