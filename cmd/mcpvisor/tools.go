package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

func newToolsCmd() *cobra.Command {
	var api apiClient
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tools [NAME]",
		Short: "List the tools of a running mcpvisor serve's servers, from its cache",
		Long: "Lists the tools of one server of a running mcpvisor serve, or of all of them, as their clients see them " +
			"(tool filters applied) and as mcpvisor has them cached: a sleeping server is not woken, and one that never " +
			"started says so; tools a pinned server holds back are named apart. With --json, one JSON array of " +
			"{server, learned, tools, held} objects. Subcommands: diff NAME (what changed), approve NAME (TOOL@FINGERPRINT... | --all) " +
			"(release the held definitions reviewed), accept-lost NAME (clear a tools_lost warning). A server named diff, approve or accept-lost is listed with mcpvisor tools -- NAME.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			names := args
			if len(names) == 0 {
				var st admin.Servers
				if err := api.GetJSON(cmd.Context(), "/api/servers", &st); err != nil {
					return err
				}
				for _, s := range st.Servers {
					names = append(names, s.Name)
				}
			}
			all, err := fetchTools(cmd.Context(), &api, names)
			if err != nil {
				return err
			}
			if asJSON {
				b, err := json.MarshalIndent(all, "", "  ")
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(append(b, '\n'))
				return err
			}
			return printTools(cmd.OutOrStdout(), all)
		},
	}
	api.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(newToolsDiffCmd(), newToolsApproveCmd(), newToolsAcceptLostCmd())
	return cmd
}

func fetchTools(ctx context.Context, api *apiClient, names []string) ([]admin.Tools, error) {
	all := make([]admin.Tools, 0, len(names))
	for _, name := range names {
		var t admin.Tools
		if err := api.GetJSON(ctx, "/api/servers/"+url.PathEscape(name)+"/tools", &t); err != nil {
			return nil, err
		}
		all = append(all, t)
	}
	return all, nil
}

func printTools(w io.Writer, all []admin.Tools) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tTOOL\tDESCRIPTION")
	for _, t := range all {
		if !t.Learned {
			fmt.Fprintf(tw, "%s\t-\t(not learned yet)\n", t.Server)
			continue
		}
		if len(t.Tools) == 0 && len(t.Held) == 0 {
			fmt.Fprintf(tw, "%s\t-\t(no tools)\n", t.Server)
		}
		for _, tool := range t.Tools {
			name, _ := rpc.StringMember(tool, "name")
			desc, _ := rpc.StringMember(tool, "description")
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Server, name, cmdutil.OneLine(desc, 70))
		}
		for _, name := range t.Held {
			fmt.Fprintf(tw, "%s\t%s\t(held: new or changed; mcpvisor tools diff %s)\n", t.Server, name, t.Server)
		}
	}
	return tw.Flush()
}
