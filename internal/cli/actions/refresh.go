package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// RefreshOptions are refresh's.
type RefreshOptions struct {
	IO cmdutil.IOStreams
	// Servers are the servers named (none: every one run through a
	// package launcher).
	Servers []string
	API     adminclient.Client
	JSON    bool
	Timeout time.Duration
}

// NewCmdRefresh is refresh: its flags fill a RefreshOptions, run by runF
// (nil: RunRefresh).
func NewCmdRefresh(streams cmdutil.IOStreams, runF func(context.Context, *RefreshOptions) error) *cobra.Command {
	o := &RefreshOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "refresh [NAME]",
		Short: "Resolve again the package launcher (npx, npm exec) of a server of a running mcpvisor serve",
		Long: "A server configured as a package launcher's command line (npx -y @scope/server, npm exec …) runs as " +
			"the program the launcher would run — node and the package's bin, found with your own npm, which " +
			"installs nothing for it — instead of through the launcher. refresh forgets that resolution and " +
			"resolves again now: a newer version of a package named by its name alone, a range or a tag is taken " +
			"if npm has it installed; if it is not, the next start runs the command as written (npm installs it) " +
			"and the resolution follows. What refresh finds applies from the server's next start: a running " +
			"process is left as it is (mcpvisor restart NAME starts it again now). Without NAME, every server " +
			"run through a package launcher is refreshed (--json: an array of the answers). The exit code is 1 when a refresh failed.",
		Args: cobra.MaximumNArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Servers = args
			return nil
		}, runF, RunRefresh),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the raw JSON")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", admin.DefaultActionTimeout, "how long to wait for each resolution")
	return cmd
}

// RunRefresh has the serve o.API reaches resolve again the launcher of
// each server named (or of every server run through one), and says what
// each found; the exit is 1 when one failed.
func RunRefresh(ctx context.Context, o *RefreshOptions) error {
	if o.Timeout <= 0 {
		return shutdown.UsageError{Err: errors.New("--timeout must be positive")}
	}
	w := o.IO.Out
	names := o.Servers
	if len(names) == 0 {
		var st admin.Servers
		if err := o.API.GetJSON(ctx, "/api/servers", &st); err != nil {
			return err
		}
		for _, s := range st.Servers {
			if s.Launcher != nil && s.Launcher.Reason != asWrittenSetting {
				names = append(names, s.Name)
			}
		}
		if len(names) == 0 {
			fmt.Fprintln(w, "no server runs through a package launcher (npx, npm exec, pnpm dlx, bunx, yarn dlx) to refresh")
			return nil
		}
	}
	var failed []string
	var bodies []json.RawMessage
	for _, name := range names {
		res, body, err := refresh(ctx, &o.API, name, o.Timeout)
		if err != nil {
			if len(o.Servers) > 0 {
				return err
			}
			failed = append(failed, name)
			fmt.Fprintf(o.IO.ErrOut, "%s: %v\n", name, err)
			continue
		}
		switch {
		case o.JSON && len(o.Servers) > 0:
			_, _ = w.Write(body)
		case o.JSON:
			bodies = append(bodies, json.RawMessage(body))
		default:
			printRefresh(w, res)
		}
	}
	if o.JSON && len(o.Servers) == 0 {
		b, err := json.MarshalIndent(bodies, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
	}
	if len(failed) > 0 {
		return fmt.Errorf("refresh failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

// asWrittenSetting is launch.Status.Reason of a server configured to run
// its launcher as written.
const asWrittenSetting = `"launch": "as-written"`

// refresh asks serve to refresh one server's launcher.
func refresh(ctx context.Context, api *adminclient.Client, name string, timeout time.Duration) (admin.ActionResult, []byte, error) {
	res, body, err := act(ctx, api, name, "refresh", timeout)
	if err != nil {
		return res, body, err
	}
	if !res.OK {
		return res, body, errors.New(res.Error)
	}
	return res, body, nil
}

// printRefresh says what a refresh found, and that it applies from the
// next start.
func printRefresh(w io.Writer, r admin.ActionResult) {
	ls := r.Status.Launcher
	if ls == nil {
		fmt.Fprintf(w, "%s: refreshed\n", r.Server)
		return
	}
	took := fmt.Sprintf("in %s", millis(r.TookMs))
	if !ls.Flattened {
		fmt.Fprintf(w, "%s: %s as written: %s (%s)\n", r.Server, ls.Name, ls.Reason, took)
	} else {
		fmt.Fprintf(w, "%s: %s (resolved %s)\n", r.Server, ls.Runs, took)
	}
	if now := runningAs(r.Status); now != "" {
		fmt.Fprintf(w, "  %s; this applies from its next start (mcpvisor restart %s to start it again now)\n", now, r.Server)
	}
}

// runningAs says how a running server's process was started, when it
// runs.
func runningAs(st fleet.Status) string {
	if st.PID == 0 || st.Launcher == nil || st.Launcher.Last == "" {
		return ""
	}
	return fmt.Sprintf("running now (pid %d), started %s", st.PID, st.Launcher.Last)
}
