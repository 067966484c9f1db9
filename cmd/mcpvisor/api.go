package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
)

// apiClient is how a command reaches the admin API of a running mcpvisor
// serve (adminclient.Client), with the flags that say where.
type apiClient struct{ adminclient.Client }

// flags adds --addr and --token-file to cmd.
func (c *apiClient) flags(cmd *cobra.Command) { cmdutil.AddAPIFlags(cmd, &c.Client) }

// answerError is adminclient.AnswerError.
func answerError(code int, body []byte) error { return adminclient.AnswerError(code, body) }

// show is cmdutil.Show with the command's client.
func show[T any](ctx context.Context, c *apiClient, w io.Writer, path string, raw bool, print func(io.Writer, T) error) error {
	return cmdutil.Show(ctx, &c.Client, w, path, raw, print)
}
