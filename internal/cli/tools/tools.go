package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Options are tools' (the list).
type Options struct {
	IO cmdutil.IOStreams
	// Servers are the servers named (none: all of them).
	Servers []string
	API     adminclient.Client
	JSON    bool
}

// NewCmdTools is tools, with its subcommands diff, approve and
// accept-lost: its flags fill an Options, run by runF (nil: RunTools).
func NewCmdTools(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{IO: streams}
	cmd := &cobra.Command{
		Use:   "tools [NAME]",
		Short: "List the tools of a running mcpvisor serve's servers, from its cache",
		Long: "Lists the tools of one server of a running mcpvisor serve, or of all of them, as their clients see them " +
			"(tool filters applied) and as mcpvisor has them cached: a sleeping server is not woken, and one that never " +
			"started says so; tools a pinned server holds back are named apart. With --json, one JSON array of " +
			"{server, learned, tools, held} objects. Subcommands: diff NAME (what changed), approve NAME (TOOL@FINGERPRINT... | --all) " +
			"(release the held definitions reviewed), accept-lost NAME (clear a tools_lost warning). A server named diff, approve or accept-lost is listed with mcpvisor tools -- NAME.",
		Args: cobra.MaximumNArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Servers = args
			return nil
		}, runF, RunTools),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	cmd.AddCommand(NewCmdDiff(streams, nil), NewCmdApprove(streams, nil), NewCmdAcceptLost(streams, nil))
	return cmd
}

// RunTools prints the tools of the servers named (all of them when none
// is), from serve's cache.
func RunTools(ctx context.Context, o *Options) error {
	names := o.Servers
	if len(names) == 0 {
		var st admin.Servers
		if err := o.API.GetJSON(ctx, "/api/servers", &st); err != nil {
			return err
		}
		for _, s := range st.Servers {
			names = append(names, s.Name)
		}
	}
	all, err := fetchTools(ctx, &o.API, names)
	if err != nil {
		return err
	}
	if o.JSON {
		b, err := json.MarshalIndent(all, "", "  ")
		if err != nil {
			return err
		}
		_, err = o.IO.Out.Write(append(b, '\n'))
		return err
	}
	return printTools(o.IO.Out, all)
}

func fetchTools(ctx context.Context, api *adminclient.Client, names []string) ([]admin.Tools, error) {
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
