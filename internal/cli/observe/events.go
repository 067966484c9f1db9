package observe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/sse"
)

// eventsQuiet is how long a followed stream (events -f, logs -f) may say
// nothing — serve sends a keepalive every 15 s — before it is taken for
// dead and opened again.
var eventsQuiet = 45 * time.Second

// lagPause is the pause before a follower that lagged opens the stream
// again.
const lagPause = 100 * time.Millisecond

// EventsOptions are events'.
type EventsOptions struct {
	IO     cmdutil.IOStreams
	API    adminclient.Client
	Follow bool
	// Server keeps only its events ("": all).
	Server string
	JSON   bool
}

// NewCmdEvents is events: its flags fill an EventsOptions, run by runF
// (nil: RunEvents).
func NewCmdEvents(streams cmdutil.IOStreams, runF func(context.Context, *EventsOptions) error) *cobra.Command {
	o := &EventsOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "events [-f] [--server NAME] [--json]",
		Short: "Print the lifecycle events of a running mcpvisor serve (starts, sleeps, crashes, restarts)",
		Long: "Prints the lifecycle events a running mcpvisor serve keeps, oldest first; with -f, then every new one " +
			"as it happens, until interrupted or serve stops. A follower that falls behind, or whose connection goes " +
			"quiet, reconnects and resumes after the last event it printed. --json prints one JSON object a line.",
		Args: cobra.NoArgs,
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, _ []string) error {
			o.IO = streams.Or(cmd)
			return nil
		}, runF, RunEvents),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "print new events as they happen")
	cmd.Flags().StringVar(&o.Server, "server", "", "only the events of this server")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object a line")
	return cmd
}

// RunEvents prints the events serve keeps, oldest first, and with Follow
// every new one as it happens.
func RunEvents(ctx context.Context, o *EventsOptions) error {
	out := o.IO.Out
	print := func(e admin.Entry) {
		if o.Server != "" && e.Server != o.Server {
			return
		}
		if o.JSON {
			b, _ := json.Marshal(e)
			fmt.Fprintln(out, string(b))
			return
		}
		fmt.Fprintln(out, eventLine(e))
	}
	if !o.Follow {
		var body struct{ Events []admin.Entry }
		if err := o.API.GetJSON(ctx, "/api/events", &body); err != nil {
			return err
		}
		for _, e := range body.Events {
			print(e)
		}
		return nil
	}
	return followEvents(ctx, &o.API, print)
}

// eventLine is one event as a line: time, server, type, details.
func eventLine(e admin.Entry) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	var details []string
	for _, k := range slices.Sorted(maps.Keys(e.Details)) {
		v, _ := json.Marshal(e.Details[k])
		details = append(details, k+"="+string(v))
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s", e.Time.Local().Format("15:04:05.000"), e.Server, e.Type, strings.Join(details, " "))
	tw.Flush()
	return b.String()
}

// followEvents prints the kept events, then every new one, from serve's
// event stream (followStream).
func followEvents(ctx context.Context, api *adminclient.Client, print func(admin.Entry)) error {
	return followStream(ctx, api, "/api/events?follow", func(_, data string) {
		var e admin.Entry
		if json.Unmarshal([]byte(data), &e) == nil {
			print(e)
		}
	})
}

// followStream reads the Server-Sent Events stream of serve at path, and
// gives each message's event name ("" for none) and data to handle. It
// opens the stream again, with Last-Event-ID the last id it saw, when
// serve says the follower lagged or the stream goes quiet for eventsQuiet;
// it ends when ctx ends (nil) or serve ends the stream (it stops).
func followStream(ctx context.Context, api *adminclient.Client, path string, handle func(event, data string)) error {
	last := ""
	for {
		again, err := followOnce(ctx, api, path, &last, handle)
		if err != nil || !again {
			return err
		}
	}
}

// followOnce reads one stream; again reports that it should be opened
// again.
func followOnce(ctx context.Context, api *adminclient.Client, path string, last *string, handle func(event, data string)) (again bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The same bound covers the connect and the headers: a serve that
	// takes the connection and never answers is given up on.
	errQuiet := fmt.Errorf("no word from %s for %v", api.Addr, eventsQuiet)
	quiet := time.AfterFunc(eventsQuiet, func() { cancel(errQuiet) })
	defer quiet.Stop()
	hdr := http.Header{"Accept": {"text/event-stream"}}
	if *last != "" {
		hdr.Set("Last-Event-ID", *last)
	}
	resp, err := api.Do(ctx, http.MethodGet, path, hdr, nil)
	if err != nil {
		if context.Cause(ctx) == context.Canceled {
			return false, nil // interrupted
		}
		if context.Cause(ctx) == errQuiet {
			return false, errQuiet
		}
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return false, adminclient.AnswerError(resp.StatusCode, b)
	}
	// Any byte from serve is word from it, a keep-alive comment included.
	r := sse.NewReader(readNotify{resp.Body, func() { quiet.Reset(eventsQuiet) }}, eventsMax)
	for {
		ev, err := r.Next()
		if errors.Is(err, sse.ErrEventTooLarge) {
			continue // no event of serve's is near the bound
		}
		if err != nil {
			switch cause := context.Cause(ctx); {
			case cause == errQuiet:
				return true, nil
			case ctx.Err() != nil:
				return false, nil // interrupted
			case err == io.EOF:
				return false, nil // serve ended the stream (it stops)
			}
			return false, err // the connection broke
		}
		if id, _ := r.LastID(); id != "" {
			*last = id
		}
		if ev.Type == "lagged" {
			// Behind: open again after the last event printed (a moment
			// later, so that a serve that keeps saying so is not asked
			// in a tight loop).
			select {
			case <-ctx.Done():
			case <-time.After(lagPause):
			}
			return ctx.Err() == nil, nil
		}
		name := ev.Type
		if name == "message" {
			name = "" // the stream named none
		}
		handle(name, string(ev.Data))
	}
}

// eventsMax bounds one event of a followed stream.
const eventsMax = 16 << 20

// readNotify calls read after each read of r that returned bytes.
type readNotify struct {
	r    io.Reader
	read func()
}

func (n readNotify) Read(b []byte) (int, error) {
	k, err := n.r.Read(b)
	if k > 0 {
		n.read()
	}
	return k, err
}
