package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
)

// apiClient is how a command reaches the admin API of a running mcpvisor
// serve (adminclient.Client), with the flags that say where.
type apiClient struct{ adminclient.Client }

// flags adds --addr and --token-file to cmd.
func (c *apiClient) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.Addr, "addr", "127.0.0.1:7331", "address of mcpvisor serve")
	cmd.Flags().StringVar(&c.TokenFile, "token-file", "", "file holding the bearer token (default: $MCPVISOR_TOKEN)")
}

// answerError is adminclient.AnswerError.
func answerError(code int, body []byte) error { return adminclient.AnswerError(code, body) }

// show fetches path and writes it to w: as it came with raw, else decoded
// into a T and given to print.
func show[T any](ctx context.Context, c *apiClient, w io.Writer, path string, raw bool, print func(io.Writer, T) error) error {
	if raw {
		body, err := c.Get(ctx, path)
		if err == nil {
			_, err = w.Write(body)
		}
		return err
	}
	var v T
	if err := c.GetJSON(ctx, path, &v); err != nil {
		return err
	}
	return print(w, v)
}
