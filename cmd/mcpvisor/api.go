package main

import (
	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
)

// apiClient is how a command reaches the admin API of a running mcpvisor
// serve (adminclient.Client), with the flags that say where.
type apiClient struct{ adminclient.Client }

// flags adds --addr and --token-file to cmd.
func (c *apiClient) flags(cmd *cobra.Command) { cmdutil.AddAPIFlags(cmd, &c.Client) }
