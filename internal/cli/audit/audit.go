// Package audit is `mcpvisor audit`: the audit records of a running
// mcpvisor serve (/api/audit), the last ones and, with -f, each new one.
package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// quiet is how long a followed stream may say nothing — serve sends an
// empty line every 15 s — before it is taken for dead and opened again.
var quiet = 45 * time.Second

// lagPause is the pause before a follower that lagged opens the stream
// again.
const lagPause = 100 * time.Millisecond

// lineMax bounds one line of the stream.
const lineMax = 16 << 20

// Options are audit's.
type Options struct {
	IO     cmdutil.IOStreams
	API    adminclient.Client
	Follow bool
	// Limit is how many of the last records to print (-1: serve's
	// default, 100).
	Limit int
	// Server, Identity and Outcome keep only the records with these
	// values ("": any).
	Server, Identity, Outcome string
	JSON                      bool
}

// NewCmdAudit is audit: its flags fill an Options, run by runF (nil:
// Run).
func NewCmdAudit(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{IO: streams}
	cmd := &cobra.Command{
		Use:   "audit [-f] [--limit N] [--server S] [--identity I] [--outcome O] [--json]",
		Short: "Print the audit records of a running mcpvisor serve (who called what, and what came of it)",
		Long: "Prints the last audit records a running mcpvisor serve keeps in memory, oldest first: time, identity, " +
			"server/tool, outcome, duration and, for a denial, the reason. With -f, then every new one as it is " +
			"written, until interrupted or serve stops. --json prints the records as serve writes them, one JSON " +
			"object a line. serve must have audit configured.",
		Args: cobra.NoArgs,
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, _ []string) error {
			o.IO = streams.Or(cmd)
			if o.Limit < -1 {
				return shutdown.UsageError{Err: fmt.Errorf("--limit %d: want a number ≥ 0", o.Limit)}
			}
			return nil
		}, runF, Run),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "print new records as they are written")
	cmd.Flags().IntVar(&o.Limit, "limit", -1, "print at most the last N records (default 100; 0: none, with -f only new ones)")
	cmd.Flags().StringVar(&o.Server, "server", "", "only the records of this server")
	cmd.Flags().StringVar(&o.Identity, "identity", "", "only the records of this identity (the token's subject)")
	cmd.Flags().StringVar(&o.Outcome, "outcome", "", "only the records of this outcome (ok, error, denied, limited, …)")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the records as JSON lines, as serve writes them")
	return cmd
}

// record is what the human output shows of a line.
type record struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Identity   string    `json:"identity"`
	Client     string    `json:"client"`
	Server     string    `json:"server"`
	Method     string    `json:"method"`
	Target     string    `json:"target"`
	Outcome    string    `json:"outcome"`
	Code       int       `json:"code"`
	Reason     string    `json:"reason"`
	DurationMS float64   `json:"duration_ms"`
	Lagged     bool      `json:"lagged"`
}

// Run prints the records serve keeps, and with Follow every new one.
func Run(ctx context.Context, o *Options) error {
	q := url.Values{}
	if o.Limit >= 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	for k, v := range map[string]string{"server": o.Server, "identity": o.Identity, "outcome": o.Outcome} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !o.Follow {
		body, err := o.API.Get(ctx, "/api/audit?"+q.Encode())
		if err != nil {
			return explain(&o.API, err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			o.print(line)
		}
		return nil
	}
	q.Set("follow", "1")
	for {
		again, err := o.followOnce(ctx, q)
		if err != nil || !again {
			return err
		}
		q.Set("limit", strconv.Itoa(1000)) // what the stream missed, as far as serve keeps it
	}
}

// print prints one line of serve's; it returns the record's seq (0 for
// none, e.g. a keep-alive).
func (o *Options) print(line string) uint64 {
	line = strings.TrimSpace(line)
	if line == "" {
		return 0
	}
	var r record
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		fmt.Fprintf(o.IO.ErrOut, "audit: a line that is not a record: %s\n", cmdutil.OneLine(line, 120))
		return 0
	}
	if o.JSON {
		fmt.Fprintln(o.IO.Out, line)
	} else {
		fmt.Fprintln(o.IO.Out, humanLine(&r))
	}
	return r.Seq
}

// humanLine is a record as a line: time, identity, server/tool, outcome,
// duration, reason.
func humanLine(r *record) string {
	who := r.Identity
	if who == "" {
		who = "-"
	}
	if r.Client != "" {
		who += " (" + r.Client + ")"
	}
	what := r.Server
	switch {
	case r.Target != "":
		what += "/" + r.Target
	case r.Method != "":
		what += " " + r.Method
	}
	if what == "" {
		what = "-"
	}
	outcome := r.Outcome
	if r.Code != 0 {
		outcome += " " + strconv.Itoa(r.Code)
	}
	s := fmt.Sprintf("%s  %-20s  %-30s  %-10s  %8.1fms", r.Time.Local().Format("15:04:05.000"), who, what, outcome, r.DurationMS)
	if r.Reason != "" {
		s += "  " + cmdutil.OneLine(r.Reason, 200)
	}
	return s
}

// followOnce reads one stream; again reports that it should be opened
// again (serve said the follower lagged, or the stream went quiet), with
// q's after set to the last record printed.
func (o *Options) followOnce(ctx context.Context, q url.Values) (again bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errQuiet := fmt.Errorf("no word from %s for %v", o.API.Addr, quiet)
	timer := time.AfterFunc(quiet, func() { cancel(errQuiet) })
	defer timer.Stop()
	resp, err := o.API.Do(ctx, http.MethodGet, "/api/audit?"+q.Encode(), nil, nil)
	if err != nil {
		switch context.Cause(ctx) {
		case context.Canceled:
			return false, nil // interrupted
		case errQuiet:
			return false, errQuiet
		}
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return false, explain(&o.API, adminclient.AnswerError(resp.StatusCode, b))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), lineMax)
	for sc.Scan() {
		timer.Reset(quiet) // a keep-alive is word from serve too
		line := sc.Text()
		if strings.Contains(line, `"lagged"`) {
			var r record
			if json.Unmarshal([]byte(line), &r) == nil && r.Lagged {
				if r.Seq > 0 {
					q.Set("after", strconv.FormatUint(r.Seq, 10))
				}
				select { // not in a tight loop against a serve that keeps saying so
				case <-ctx.Done():
				case <-time.After(lagPause):
				}
				return ctx.Err() == nil, nil
			}
		}
		if seq := o.print(line); seq > 0 {
			q.Set("after", strconv.FormatUint(seq, 10))
		}
	}
	switch cause := context.Cause(ctx); {
	case cause == errQuiet:
		return true, nil
	case ctx.Err() != nil:
		return false, nil // interrupted
	case sc.Err() == nil:
		return false, nil // serve ended the stream (it stops)
	}
	return false, fmt.Errorf("reading the audit of %s: %w", o.API.Addr, sc.Err())
}

// explain says what a 404 means: serve has no audit.
func explain(api *adminclient.Client, err error) error {
	var se *adminclient.StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		return fmt.Errorf("mcpvisor serve at %s has no audit log (%v): configure audit in its configuration", api.Addr, err)
	}
	return err
}
