package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// act has serve do action to server and returns its answer: the result
// (done or refused, res.OK says) and its body; an error when serve could
// not be asked or did not answer as the API does.
func act(ctx context.Context, api *adminclient.Client, server, action string, timeout time.Duration) (res admin.ActionResult, body []byte, err error) {
	code, body, err := api.Act(ctx, "/api/servers/"+url.PathEscape(server)+"/"+action, timeout)
	if err != nil {
		return res, nil, err
	}
	if json.Unmarshal(body, &res) != nil || res.Action == "" {
		return res, body, adminclient.AnswerError(code, body)
	}
	return res, body, nil
}

// millis is a duration the API gives in milliseconds, to print.
func millis(ms float64) time.Duration {
	return (time.Duration(ms*1000) * time.Microsecond).Round(time.Millisecond)
}

// Options are the options of an action on one server (restart, stop,
// start, sleep) and of reload.
type Options struct {
	IO cmdutil.IOStreams
	// Action is restart, stop, start or sleep (reload: "reload").
	Action string
	// Server is the server named (an argument; none for reload).
	Server  string
	API     adminclient.Client
	JSON    bool
	Timeout time.Duration
	// All lists unchanged servers too (reload).
	All bool
}

// newActionCmd is restart, stop, start or sleep of one server: its flags
// fill an Options, run by runF (nil: RunAction).
func newActionCmd(action, short, long string, streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{IO: streams, Action: action}
	cmd := &cobra.Command{
		Use:   action + " NAME",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Server = args[0]
			return nil
		}, runF, RunAction),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the raw JSON")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", admin.DefaultActionTimeout, "how long to wait for it to be done")
	return cmd
}

// RunAction has the serve o.API reaches do o.Action to o.Server, and says
// what was done; a refusal is an error that says why.
func RunAction(ctx context.Context, o *Options) error {
	if o.Timeout <= 0 {
		return shutdown.UsageError{Err: errors.New("--timeout must be positive")}
	}
	res, body, err := act(ctx, &o.API, o.Server, o.Action, o.Timeout)
	if err != nil {
		return err
	}
	if o.JSON {
		_, _ = o.IO.Out.Write(body)
	} else {
		printAction(o.IO.Out, res)
	}
	if !res.OK {
		return fmt.Errorf("%s %s: %s", o.Action, res.Server, res.Error)
	}
	return nil
}

func printAction(w io.Writer, r admin.ActionResult) {
	if !r.OK {
		return // the error says it
	}
	var parts []string
	switch r.Action {
	case "stop":
		parts = append(parts, "stopped "+r.Server+"; it refuses requests until mcpvisor start "+r.Server)
	case "start":
		parts = append(parts, "started "+r.Server)
	case "restart":
		parts = append(parts, "restarted "+r.Server)
	case "sleep":
		parts = append(parts, "put "+r.Server+" to sleep; its next request starts it again")
	}
	if r.Status.PID != 0 {
		parts = append(parts, fmt.Sprintf("pid %d", r.Status.PID))
	}
	if d := r.Drained; d != nil && d.Cut > 0 {
		parts = append(parts, fmt.Sprintf("%d instance(s) stopped with calls still in flight after the drain bound", d.Cut))
	}
	parts = append(parts, fmt.Sprintf("in %s", millis(r.TookMs)))
	fmt.Fprintln(w, strings.Join(parts, ", "))
}

// NewCmdRestart is restart NAME.
func NewCmdRestart(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	return newActionCmd("restart", "Restart one server of a running mcpvisor serve",
		"Drains the server (calls in flight finish, within its request timeout), stops it, starts it again "+
			"and waits until it is ready. A stopped server is started.", streams, runF)
}

// NewCmdStop is stop NAME.
func NewCmdStop(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	return newActionCmd("stop", "Stop one server of a running mcpvisor serve until it is started again",
		"Drains the server (calls in flight finish, within its request timeout) and stops it. Unlike a "+
			"dormant server, a stopped one is not started on demand: every request gets an error that says "+
			"it was stopped, until mcpvisor start.", streams, runF)
}

// NewCmdStart is start NAME.
func NewCmdStart(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	return newActionCmd("start", "Start one server of a running mcpvisor serve",
		"Serves a stopped server again and starts it now, waiting until it is ready (a per-session "+
			"server starts with each client session instead).", streams, runF)
}

// NewCmdSleep is sleep NAME.
func NewCmdSleep(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	return newActionCmd("sleep", "Put one server of a running mcpvisor serve to sleep now",
		"Stops the server's process tree now, as its idle timeout would: its lists stay, and its next "+
			"request starts it again. Refused (exit 1, saying why) while requests are in flight or a client "+
			"is subscribed to its resources, and for a server that is not running, was stopped, or runs one "+
			"process per client session.", streams, runF)
}

// NewCmdReload is reload: its flags fill an Options, run by runF (nil:
// RunReload).
func NewCmdReload(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{IO: streams, Action: "reload"}
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Reload the configuration of a running mcpvisor serve",
		Long: "Has a running mcpvisor serve read its config file again. A file with errors changes nothing: " +
			"each error is printed with its JSON path, and the exit code is 1. A valid file is applied server " +
			"by server — unchanged servers untouched, settings applied in place, a changed launch drained and " +
			"started again, removed servers drained and stopped, added servers learned — and the table says " +
			"what was done to each. SIGHUP and saving the file do the same.",
		Args: cobra.NoArgs,
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, _ []string) error {
			o.IO = streams.Or(cmd)
			return nil
		}, runF, RunReload),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the raw JSON")
	cmd.Flags().BoolVar(&o.All, "all", false, "list unchanged servers too")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", admin.DefaultActionTimeout, "how long to wait for removed and changed servers to drain")
	return cmd
}

// RunReload has the serve o.API reaches read its config again, and prints
// what the reload did; a rejected file is an error that lists its
// problems.
func RunReload(ctx context.Context, o *Options) error {
	if o.Timeout <= 0 {
		return shutdown.UsageError{Err: errors.New("--timeout must be positive")}
	}
	code, body, err := o.API.Act(ctx, "/api/reload", o.Timeout)
	if err != nil {
		return err
	}
	var rep admin.ReloadReport
	if json.Unmarshal(body, &rep) != nil || rep.Trigger == "" {
		return adminclient.AnswerError(code, body)
	}
	if o.JSON {
		_, _ = o.IO.Out.Write(body)
	} else {
		printReload(o.IO.Out, rep, o.All)
	}
	if !rep.Applied {
		msg := rep.Error
		for _, p := range rep.Problems {
			msg += "\n  " + p.String()
		}
		return errors.New(msg)
	}
	return nil
}

// printReload prints what a reload did as a table: one row per server it
// changed (every server with all), then what was left unchanged and the
// settings that need a restart.
func printReload(w io.Writer, rep admin.ReloadReport, all bool) {
	if !rep.Applied || rep.Result == nil {
		return // the error says it
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tCHANGE\tFIELDS\tDRAINED")
	unchanged := 0
	for _, s := range rep.Result.Servers {
		if s.Action == config.ActionUnchanged && !all {
			unchanged++
			continue
		}
		drained := ""
		switch d := s.Drained; {
		case d == nil:
		case d.Pending:
			drained = "draining" // the caller stopped waiting; the drain goes on
		default:
			drained = fmt.Sprintf("%d stopped", d.Stopped)
			if d.Cut > 0 {
				drained += fmt.Sprintf(", %d cut", d.Cut)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Action, strings.Join(s.Fields, ", "), drained)
	}
	_ = tw.Flush()
	if unchanged > 0 {
		fmt.Fprintf(w, "%d server(s) unchanged\n", unchanged)
	}
	if len(rep.Result.Settings) > 0 {
		fmt.Fprintf(w, "applied: %s\n", strings.Join(rep.Result.Settings, ", "))
	}
	if len(rep.Result.NeedsRestart) > 0 {
		fmt.Fprintf(w, "needs restart: %s (changed in the file; mcpvisor keeps the old value until it restarts)\n", strings.Join(rep.Result.NeedsRestart, ", "))
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	fmt.Fprintf(w, "reloaded in %s\n", millis(rep.Result.TookMs))
}
