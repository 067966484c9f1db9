package observe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// LogsOptions are logs'.
type LogsOptions struct {
	IO cmdutil.IOStreams
	// Server is the server named (an argument).
	Server string
	API    adminclient.Client
	Follow bool
	// Since is --since as given ("": none); Tail is --tail, -1 when not
	// given (serve's default: the last 100 lines, or those since Since).
	// A zero Tail asks for no line: a caller of RunLogs sets -1.
	Since string
	Tail  int
	JSON  bool
}

// NewCmdLogs is logs: its flags fill a LogsOptions, run by runF (nil:
// RunLogs).
func NewCmdLogs(streams cmdutil.IOStreams, runF func(context.Context, *LogsOptions) error) *cobra.Command {
	o := &LogsOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "logs NAME [-f] [--since DURATION|TIME] [--tail N] [--json]",
		Short: "Print the stderr of one server of a running mcpvisor serve, kept across its restarts",
		Long: "Prints what one server of a running mcpvisor serve wrote to stderr, as serve keeps it (across the " +
			"server's restarts and sleeps, within a bound): the last 100 lines, or those since --since (a duration " +
			"back from now, such as 10m, or an RFC 3339 time), or the last --tail N of them; with -f, then every new " +
			"line as it is written, until interrupted, serve stops or the server is removed from serve's configuration " +
			"(which is said on stderr). Each line is prefixed by its local time and the " +
			"pid that wrote it; lines serve no longer keeps are counted on stderr. --json prints one JSON object a " +
			"line (and {\"dropped\":N} for lines no longer kept).",
		Args: cobra.ExactArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Server = args[0]
			if o.Since != "" { // checked first, as before the move: its error is the one said
				if _, err := admin.ParseSince(o.Since, time.Now()); err != nil {
					return shutdown.UsageError{Err: fmt.Errorf("--%w", err)}
				}
			}
			if !cmd.Flags().Changed("tail") {
				o.Tail = -1
			} else if o.Tail < 0 {
				return shutdown.UsageError{Err: errors.New("--tail must not be negative")}
			}
			return nil
		}, runF, RunLogs),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "print new lines as they are written")
	cmd.Flags().StringVar(&o.Since, "since", "", "the lines since this long ago (10m) or this RFC 3339 time")
	cmd.Flags().IntVar(&o.Tail, "tail", 0, "the last N lines (default 100 when --since is not given)")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object a line")
	return cmd
}

// RunLogs prints what the server wrote to stderr, as serve keeps it, and
// with Follow every new line until serve ends the stream.
func RunLogs(ctx context.Context, o *LogsOptions) error {
	q := url.Values{}
	if o.Since != "" {
		if _, err := admin.ParseSince(o.Since, time.Now()); err != nil {
			return shutdown.UsageError{Err: fmt.Errorf("--%w", err)}
		}
		q.Set("since", o.Since)
	}
	if o.Tail >= 0 {
		q.Set("tail", strconv.Itoa(o.Tail))
	}
	p := logPrinter{out: o.IO.Out, errOut: o.IO.ErrOut, json: o.JSON}
	path := "/api/servers/" + url.PathEscape(o.Server) + "/logs"
	if !o.Follow {
		var l admin.Logs
		if err := o.API.GetJSON(ctx, path+"?"+q.Encode(), &l); err != nil {
			return err
		}
		p.dropped(l.Dropped)
		for _, e := range l.Lines {
			p.line(e)
		}
		return nil
	}
	q.Set("follow", "1")
	return followStream(ctx, &o.API, path+"?"+q.Encode(), func(event, data string) {
		switch event {
		case "":
			var e logbuf.Entry
			if json.Unmarshal([]byte(data), &e) == nil {
				p.line(e)
			}
		case "dropped":
			var d struct{ Dropped uint64 }
			if json.Unmarshal([]byte(data), &d) == nil {
				p.dropped(d.Dropped)
			}
		case "end": // serve ends the stream next: followStream stops
			var end admin.LogEnd
			_ = json.Unmarshal([]byte(data), &end)
			p.ended(o.Server, end)
		}
	})
}

// logPrinter prints log lines as mcpvisor logs does.
type logPrinter struct {
	out, errOut io.Writer
	json        bool
}

// line prints one line: "2026-11-26T10:00:00.123 [pid 1234] text" (local
// time; a per-session server's line names its session too), or its JSON.
func (p logPrinter) line(e logbuf.Entry) {
	if p.json {
		b, _ := json.Marshal(e)
		fmt.Fprintln(p.out, string(b))
		return
	}
	prefix := e.Time.Local().Format("2006-01-02T15:04:05.000")
	switch {
	case e.PID != 0 && e.Session != "":
		prefix += fmt.Sprintf(" [pid %d session %s]", e.PID, e.Session)
	case e.PID != 0:
		prefix += fmt.Sprintf(" [pid %d]", e.PID)
	case e.Session != "":
		prefix += fmt.Sprintf(" [session %s]", e.Session)
	}
	fmt.Fprintln(p.out, prefix, e.Line)
}

// ended says, on stderr, why serve ended the stream of the server name.
func (p logPrinter) ended(name string, end admin.LogEnd) {
	switch {
	case end.Reason == "removed":
		fmt.Fprintf(p.errOut, "mcpvisor: server %s was removed from the configuration\n", name)
	case end.Message != "":
		fmt.Fprintf(p.errOut, "mcpvisor: %s\n", end.Message)
	default:
		fmt.Fprintf(p.errOut, "mcpvisor: serve ended the logs of server %s\n", name)
	}
}

// dropped says that n lines are no longer kept: on stderr, or as
// {"dropped":n} among the JSON lines.
func (p logPrinter) dropped(n uint64) {
	switch {
	case n == 0:
	case p.json:
		fmt.Fprintf(p.out, "{\"dropped\":%d}\n", n)
	case n == 1:
		fmt.Fprintln(p.errOut, "mcpvisor: 1 line no longer kept")
	default:
		fmt.Fprintf(p.errOut, "mcpvisor: %d lines no longer kept\n", n)
	}
}
