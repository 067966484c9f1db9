package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

func newRefreshCmd() *cobra.Command {
	var api apiClient
	var asJSON bool
	var timeout time.Duration
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
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageError{Err: errors.New("--timeout must be positive")}
			}
			ctx, w := cmd.Context(), cmd.OutOrStdout()
			names := args
			if len(names) == 0 {
				var st admin.Servers
				if err := api.GetJSON(ctx, "/api/servers", &st); err != nil {
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
				res, body, err := refresh(ctx, &api, name, timeout)
				if err != nil {
					if len(args) > 0 {
						return err
					}
					failed = append(failed, name)
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", name, err)
					continue
				}
				switch {
				case asJSON && len(args) > 0:
					_, _ = w.Write(body)
				case asJSON:
					bodies = append(bodies, json.RawMessage(body))
				default:
					printRefresh(w, res)
				}
			}
			if asJSON && len(args) == 0 {
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
		},
	}
	api.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", admin.DefaultActionTimeout, "how long to wait for each resolution")
	return cmd
}

// asWrittenSetting is launch.Status.Reason of a server configured to run
// its launcher as written.
const asWrittenSetting = `"launch": "as-written"`

// refresh asks serve to refresh one server's launcher.
func refresh(ctx context.Context, api *apiClient, name string, timeout time.Duration) (admin.ActionResult, []byte, error) {
	code, body, err := api.Act(ctx, "/api/servers/"+url.PathEscape(name)+"/refresh", timeout)
	if err != nil {
		return admin.ActionResult{}, nil, err
	}
	var res admin.ActionResult
	if json.Unmarshal(body, &res) != nil || res.Action == "" {
		return res, body, answerError(code, body)
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
