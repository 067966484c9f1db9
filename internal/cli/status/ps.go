package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// PsOptions are ps's.
type PsOptions struct {
	IO   cmdutil.IOStreams
	API  adminclient.Client
	JSON bool
	// Now is the time the ages are counted to.
	Now func() time.Time
}

// NewCmdPs is ps: its flags fill a PsOptions, run by runF (nil: RunPs).
func NewCmdPs(streams cmdutil.IOStreams, runF func(context.Context, *PsOptions) error) *cobra.Command {
	o := &PsOptions{IO: streams, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "ps [--addr 127.0.0.1:7331]",
		Short: "List the servers of a running mcpvisor serve and their state",
		Args:  cobra.NoArgs,
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, _ []string) error {
			o.IO = streams.Or(cmd)
			return nil
		}, runF, RunPs),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the raw JSON")
	return cmd
}

// RunPs prints the servers of the serve o.API reaches, as a table (or
// the API's JSON).
// A replica's ps shows the whole deployment after its own servers:
// each replica, whether it is ready, and the servers it runs.
func RunPs(ctx context.Context, o *PsOptions) error {
	err := cmdutil.Show(ctx, &o.API, o.IO.Out, "/api/servers", o.JSON,
		func(w io.Writer, st admin.Servers) error { return printPs(w, st, o.Now()) })
	if err != nil || o.JSON {
		return err
	}
	var rs admin.Replicas
	if err := o.API.GetJSON(ctx, "/api/replicas", &rs); err != nil {
		var se *adminclient.StatusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound {
			return nil // a serve of before replicas
		}
		return err
	}
	if len(rs.Replicas) == 0 {
		return nil // no replica
	}
	return printReplicas(o.IO.Out, rs)
}

// printReplicas is ps's deployment section.
func printReplicas(w io.Writer, rs admin.Replicas) error {
	fmt.Fprintf(w, "\nreplicas (this is %d):\n", rs.Self)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDINAL\tADDRESS\tREADY\tCONFIG\tKEY\tRUNS\tFORWARDED\tRECEIVED\tGONE")
	for _, r := range rs.Replicas {
		ready := r.Ready
		if !r.Reachable {
			ready = "unreachable: " + cmdutil.OneLine(r.Error, 50)
		}
		var runs []string
		for _, name := range slices.Sorted(maps.Keys(r.Servers)) {
			runs = append(runs, fmt.Sprintf("%s×%d", name, r.Servers[name]))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", r.Ordinal, r.Address, ready, cmp.Or(r.ConfigVersion, "-"),
			cmp.Or(r.Key, "-"), cmp.Or(strings.Join(runs, ","), "-"), r.Forwarded, r.Received, r.Gone)
	}
	return tw.Flush()
}

// processCells are the PID, UPTIME and IDLE cells of a process's row in
// ps and inspect: "-" for what is not known.
func processCells(pid int, started, last time.Time, now time.Time) (p, up, idle string) {
	p, up, idle = "-", "-", "-"
	if pid != 0 {
		p = fmt.Sprint(pid)
	}
	if !started.IsZero() {
		up = age(now.Sub(started))
	}
	if !last.IsZero() {
		idle = age(now.Sub(last))
	}
	return p, up, idle
}

// stateText is a state as ps and inspect print it: "needs-login" in
// words.
func stateText(state string) string {
	if state == "needs-login" {
		return "needs login"
	}
	return state
}

func printPs(w io.Writer, st admin.Servers, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tPID\tMEMORY\tUPTIME\tIDLE\tIN-FLIGHT\tRESTARTS\tSPAWNS\tCLIENTS\tLAST ERROR")
	for _, s := range st.Servers {
		mem := "-"
		if s.MemoryBytes != 0 {
			mem = proc.FormatMemory(s.MemoryBytes)
		}
		pid, up, idle := processCells(s.PID, s.StartedAt, s.LastActivity, now)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", s.Name, stateText(s.State), pid, mem, up, idle, s.InFlight, s.Restarts, s.Spawns, clientsCell(s.Clients), cmdutil.OneLine(s.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var states []string
	for _, k := range sortedStates(st.Totals.ByState) {
		states = append(states, fmt.Sprintf("%s %d", k, st.Totals.ByState[k]))
	}
	memory := ""
	if st.Totals.MemoryBytes != 0 {
		memory = ", " + proc.FormatMemory(st.Totals.MemoryBytes) + " resident"
	}
	if _, err := fmt.Fprintf(w, "\n%d servers: %d active, %d dormant (%s)%s\n", st.Totals.Total, st.Totals.Active, st.Totals.Dormant, strings.Join(states, ", "), memory); err != nil {
		return err
	}
	var notes []string
	for _, s := range st.Servers {
		if s.Warning != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", s.Name, s.Warning))
		}
		if s.State == "needs-login" {
			notes = append(notes, fmt.Sprintf("  %s: needs a login: run mcpvisor login %s", s.Name, s.Name))
		}
		if s.PendingDefinitions > 0 {
			notes = append(notes, fmt.Sprintf("  %s: %d tool(s) held back until approved (mcpvisor tools diff %s)", s.Name, s.PendingDefinitions, s.Name))
		}
		notes = append(notes, limitNotes(s)...)
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nwarnings:\n%s\n", strings.Join(notes, "\n"))
	}
	if err := printLaunches(w, st.Servers); err != nil {
		return err
	}
	if len(st.Collisions) > 0 {
		fmt.Fprintf(w, "\nname collisions on /mcp (the first server in name order serves the name):\n")
		for _, c := range st.Collisions {
			if _, err := fmt.Fprintf(w, "  %s\n", c); err != nil {
				return err
			}
		}
	}
	return nil
}

// clientsCellWidth bounds ps's CLIENTS cell, in characters (as the
// table's columns are aligned): the clients' names, comma separated, when
// they fit, else how many there are.
const clientsCellWidth = 24

// clientsCell is ps's CLIENTS cell: "-" when no client used the server,
// the names of those that did when they fit in clientsCellWidth
// ("claude-ai,cursor"), else their number ("3 clients", "1 client"). The names are
// normalized (clientbook.Use): no space or comma in them.
func clientsCell(cs []clientbook.Use) string {
	if len(cs) == 0 {
		return "-"
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	if text := strings.Join(names, ","); utf8.RuneCountInString(text) <= clientsCellWidth {
		return text
	}
	if len(cs) == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", len(cs))
}

func sortedStates(m map[string]int) []string {
	order := []string{"running", "starting", "restarting", "degraded", "dormant", "new", "failed", "stopped"}
	var out []string
	for _, k := range order {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Minute).String()
	default:
		return d.Round(time.Hour).String()
	}
}

// limitNotes are ps's warnings about s's resource limits: the trees its
// memory limit killed (exit kind oom), the forks its pids limit refused,
// and the limits this machine cannot enforce.
func limitNotes(s fleet.Status) []string {
	var notes []string
	l := s.Limits
	if s.OOMKills > 0 {
		limit := ""
		if l != nil && l.MemoryBytes > 0 {
			limit = " (" + proc.FormatBytes(l.MemoryBytes) + ")"
		}
		notes = append(notes, fmt.Sprintf("  %s: oom: killed %d time(s) by its memory limit%s", s.Name, s.OOMKills, limit))
	}
	if s.PIDsLimitHits > 0 {
		limit := ""
		if l != nil && l.PIDs > 0 {
			limit = fmt.Sprintf(" (%d)", l.PIDs)
		}
		notes = append(notes, fmt.Sprintf("  %s: its pids limit%s refused %d fork(s)", s.Name, limit, s.PIDsLimitHits))
	}
	if l != nil && len(l.NotEnforced) > 0 {
		var kinds []string
		for _, n := range l.NotEnforced {
			kind, _, _ := strings.Cut(n, ":")
			kinds = append(kinds, kind)
		}
		notes = append(notes, fmt.Sprintf("  %s: limits not enforced on this machine, it runs without them: %s (mcpvisor inspect %s, or mcpvisor doctor, says why)", s.Name, strings.Join(kinds, ", "), s.Name))
	}
	return notes
}

// printLaunches lists how each server run through a package launcher
// starts: flattened (npx → node …/server-everything@2026.8.31) or as
// written, and why.
func printLaunches(w io.Writer, servers []fleet.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	n := 0
	for _, s := range servers {
		ls := s.Launcher
		if ls == nil {
			continue
		}
		if n == 0 {
			fmt.Fprintln(w, "\npackage launchers (flattened: the launcher's program runs directly):")
		}
		n++
		how := ls.Runs
		if !ls.Flattened {
			how = ls.Name + " as written: " + cmdutil.OneLine(ls.Reason, 100)
		}
		if s.PID != 0 && ls.Last != "" && (ls.Last == "flattened") != ls.Flattened {
			how += " (the running process was started " + ls.Last + ": this applies from its next start)"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", s.Name, how)
	}
	return tw.Flush()
}
