package status

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// waitPoll is how often wait asks serve again.
const waitPoll = 100 * time.Millisecond

// WaitOptions are wait's.
type WaitOptions struct {
	IO cmdutil.IOStreams
	// Servers are the servers named (none: all of them).
	Servers []string
	API     adminclient.Client
	Timeout time.Duration
}

// NewCmdWait is wait: its flags fill a WaitOptions, run by runF (nil:
// RunWait).
func NewCmdWait(streams cmdutil.IOStreams, runF func(context.Context, *WaitOptions) error) *cobra.Command {
	o := &WaitOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "wait [NAME...] [--timeout 60s]",
		Short: "Wait until servers of a running mcpvisor serve are ready (all of them by default)",
		Long: "Waits until a running mcpvisor serve answers and each named server (every server by default) is ready: " +
			"its tools are known (learned at its start, or from an earlier run) and it has started and runs or sleeps, " +
			"or it never started in this serve and no start of it failed (it starts on demand). A server that came back " +
			"listing no tools where it had some is not ready (its warning says so). A server that was never learned " +
			"(serve --no-learn) is not ready until its tools are listed. For scripts and container readiness checks. " +
			"Exit 0 when all are ready; 1 when " +
			"the timeout passes first (naming each server not ready, its state and last error), when a named server " +
			"does not exist, or when serve refuses the token.",
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, names []string) error {
			o.IO = streams.Or(cmd)
			o.Servers = names
			return nil
		}, runF, RunWait),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().DurationVar(&o.Timeout, "timeout", time.Minute, "give up after this long")
	return cmd
}

// RunWait asks the serve o.API reaches every waitPoll until the servers
// are ready, one has failed for good, serve refuses the token, or
// o.Timeout passes (an error naming what is not ready).
func RunWait(parent context.Context, o *WaitOptions) error {
	ctx, cancel := context.WithTimeout(parent, o.Timeout)
	defer cancel()
	var last error
	for {
		var st admin.Servers
		err := o.API.GetJSON(ctx, "/api/servers", &st)
		if err != nil && ctx.Err() != nil {
			// Cut by the timeout: the attempt before says why it
			// is not ready, if there was one.
			if last != nil {
				err = last
			} else {
				err = fmt.Errorf("is mcpvisor serve running at %s? it did not answer: %w", o.API.Addr, err)
			}
		}
		if se := (*adminclient.StatusError)(nil); errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden) {
			return err // waiting will not mend a refusal
		}
		if err == nil {
			var done bool
			done, err = waitDone(st.Servers, o.Servers)
			if done {
				return err
			}
		}
		last = err
		select {
		case <-ctx.Done():
			if parent.Err() == nil {
				return fmt.Errorf("not ready after %v: %w", o.Timeout, last)
			}
			return ctx.Err()
		case <-time.After(waitPoll):
		}
	}
}

// waitDone reports whether the wait is over for the named servers (all
// when names is empty): with a nil error when every one is ready, with
// an error when one has failed for good or is not configured. When it is
// not over, the error says what is not ready yet.
func waitDone(servers []fleet.Status, names []string) (bool, error) {
	byName := map[string]fleet.Status{}
	var all []string
	for _, s := range servers {
		byName[s.Name] = s
		all = append(all, s.Name)
	}
	if len(names) == 0 {
		names = all
	}
	var waiting []string
	for _, n := range names {
		s, ok := byName[n]
		switch {
		case !ok:
			return true, fmt.Errorf("no server named %q; configured: %s", n, strings.Join(all, ", "))
		case s.Ready: // fleet's rule: handshake done, tools known, no warning
			continue
		}
		w := n + " (" + s.State
		if !s.Learned {
			w += ", tools not known yet"
		}
		if s.Warning != "" {
			w += ", " + s.Warning
		}
		if s.LastError != "" {
			w += ", last error: " + s.LastError
		}
		waiting = append(waiting, w+")")
	}
	if len(waiting) == 0 {
		return true, nil
	}
	slices.Sort(waiting)
	return false, errors.New("waiting for " + strings.Join(waiting, "; "))
}
