package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/oauthclient"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/revision"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// InspectOptions are inspect's.
type InspectOptions struct {
	IO cmdutil.IOStreams
	// Server is the server named (an argument).
	Server string
	API    adminclient.Client
	JSON   bool
	// Now is the time the ages are counted to.
	Now func() time.Time
}

// NewCmdInspect is inspect: its flags fill an InspectOptions, run by runF
// (nil: RunInspect).
func NewCmdInspect(streams cmdutil.IOStreams, runF func(context.Context, *InspectOptions) error) *cobra.Command {
	o := &InspectOptions{IO: streams, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show one server of a running mcpvisor serve in detail",
		Long: "Shows one server of a running mcpvisor serve: its state and counters as ps shows them, " +
			"how it is launched (secrets redacted; env and header values never shown), its sharing, " +
			"configured protocol and the era it last spoke, and how many tools, prompts and resources it has " +
			"as cached (a sleeping server is not woken); the containment layers its processes run under (mcpvisor doctor " +
			"explains each); and, for a per-session server, its instances: the shared one that learns its lists and " +
			"one per client session, labelled by a fingerprint of the session id (never the id).",
		Args: cobra.ExactArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Server = args[0]
			return nil
		}, runF, RunInspect),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the raw JSON")
	return cmd
}

// RunInspect prints one server of the serve o.API reaches in detail (or
// the API's JSON).
func RunInspect(ctx context.Context, o *InspectOptions) error {
	return cmdutil.Show(ctx, &o.API, o.IO.Out, "/api/servers/"+url.PathEscape(o.Server), o.JSON,
		func(w io.Writer, d admin.Detail) error { return printDetail(w, d, o.Now()) })
}

// loginText says a remote server's OAuth state: who is logged in, until
// when, or why a login is needed and how.
func loginText(name string, a oauthclient.Info, now time.Time) string {
	switch a.State {
	case oauthclient.StateLoggedIn:
		t := "logged in"
		if a.Subject != "" {
			t += " as " + a.Subject
		}
		if a.Issuer != "" {
			t += " at " + a.Issuer
		}
		if !a.Expiry.IsZero() {
			if a.Expiry.After(now) {
				t += ", token valid for " + age(a.Expiry.Sub(now))
			} else {
				t += ", token expired"
			}
			if a.Refreshable {
				t += " (refreshed before it expires)"
			}
		}
		if len(a.Scopes) > 0 {
			t += "; scopes " + strings.Join(a.Scopes, " ")
		}
		return t
	case oauthclient.StateNeedsLogin:
		t := "needed"
		if a.Reason != "" {
			t += " (" + a.Reason + ")"
		}
		return t + ": run mcpvisor login " + name
	case oauthclient.StateClientCredentials:
		return "client credentials (no user login)"
	}
	return "none yet (a login is asked for when the server answers 401)"
}

func printDetail(w io.Writer, d admin.Detail, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	line("Name", d.Name)
	line("State", stateText(d.State))
	if d.PID != 0 {
		line("PID", fmt.Sprint(d.PID))
	}
	if d.MemoryBytes != 0 {
		line("Memory", memoryText(d))
	}
	if d.CPUSeconds != 0 {
		line("CPU", fmt.Sprintf("%.2f s", d.CPUSeconds))
	}
	if !d.StartedAt.IsZero() {
		line("Uptime", age(now.Sub(d.StartedAt)))
	}
	if !d.DormantSince.IsZero() {
		line("Dormant for", age(now.Sub(d.DormantSince)))
	}
	if !d.LastActivity.IsZero() {
		line("Idle", age(now.Sub(d.LastActivity)))
	}
	line("In flight", fmt.Sprint(d.InFlight))
	line("Held calls", fmt.Sprint(d.HeldCalls))
	line("Restarts", fmt.Sprint(d.Restarts))
	line("Spawns", fmt.Sprint(d.Spawns))
	if d.Sessions != 0 {
		line("Sessions", fmt.Sprintf("%d, an instance each", d.Sessions))
	}
	line("Last error", d.LastError)
	line("Kind", d.Kind)
	line("Launch", d.Launch)
	if ls := d.Status.Launcher; ls != nil {
		launchLines(line, d.Status, ls, now)
	}
	line("Env", strings.Join(d.EnvNames, ", "))
	line("Headers", strings.Join(d.HeaderNames, ", "))
	for i, r := range d.References {
		k := ""
		if i == 0 {
			k = "References"
		}
		if k == "" {
			fmt.Fprintf(tw, "\t%s\n", r)
		} else {
			line(k, r)
		}
	}
	if a := d.Status.OAuth; a != nil {
		line("Login", loginText(d.Name, *a, now))
	}
	line("Secrets kept in", d.SecretStore)
	line("Sharing", d.Sharing)
	line("Protocol", d.Protocol+", speaks "+eraText(d.Era))
	if d.Declares != nil { // an older serve does not say
		line("Declares", declaresText(d))
	}
	if d.ServerInfo != nil {
		name, _ := rpc.StringMember(d.ServerInfo, "name")
		version, _ := rpc.StringMember(d.ServerInfo, "version")
		line("Server", strings.TrimSpace(name+" "+version))
	}
	line("Lists", listsText(d))
	line("Containment", containment(d))
	if l := d.Limits; l != nil {
		line("Limits", limitsText(l))
		for _, n := range l.NotEnforced {
			line("Not enforced", n+" — it runs without this limit")
		}
	}
	if d.OOMKills > 0 {
		line("OOM kills", fmt.Sprintf("%d (trees its memory limit killed: exit kind oom)", d.OOMKills))
	}
	if d.PIDsLimitHits > 0 {
		line("Pids limit hits", fmt.Sprintf("%d fork(s) refused", d.PIDsLimitHits))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printClients(w, d.Clients, now); err != nil {
		return err
	}
	if len(d.Instances) > 1 || d.Sharing == config.SharingPerSession || d.Sharing == config.SharingPerIdentity {
		if err := printInstances(w, d.Instances, now); err != nil {
			return err
		}
	}
	printHistory(w, d)
	if len(d.Stderr) > 0 {
		fmt.Fprintln(w, "\nLast stderr lines (mcpvisor logs "+d.Name+"):")
		for _, e := range d.Stderr {
			fmt.Fprintf(w, "  %s  %s\n", e.Time.Local().Format("15:04:05.000"), e.Line)
		}
	}
	return nil
}

// memoryText is the Memory line of a detail: "12.0 MiB resident, peak
// 20.1 MiB".
func memoryText(d admin.Detail) string {
	mem := proc.FormatMemory(d.MemoryBytes) + " resident"
	if d.MemoryPeakBytes > d.MemoryBytes {
		mem += ", peak " + proc.FormatMemory(d.MemoryPeakBytes)
	}
	return mem
}

// listsText is the Lists line of a detail: "3 tools, 1 prompts", or "not
// learned yet".
func listsText(d admin.Detail) string {
	var lists []string
	for _, k := range []string{"tools", "prompts", "resources", "resourceTemplates"} {
		if n, ok := d.Lists[k]; ok {
			lists = append(lists, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(lists) == 0 {
		return "not learned yet"
	}
	return strings.Join(lists, ", ")
}

// printHistory prints the server's last five ends, each with how it
// ended and its last stderr lines.
func printHistory(w io.Writer, d admin.Detail) {
	n := len(d.History)
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nLast ends (newest last):")
	for _, e := range d.History[max(0, n-5):] {
		how := ""
		if e.Kind == "oom" {
			how = " oom"
		}
		if e.Code != nil {
			how += fmt.Sprintf(" exit %d", *e.Code)
		}
		if e.Signal != "" {
			how += " " + e.Signal
		}
		fmt.Fprintf(w, "  %s  %s%s: %s\n", e.Time.Local().Format(time.DateTime), e.Stage, how, e.Error)
		for _, l := range e.Stderr {
			fmt.Fprintf(w, "      | %s\n", l)
		}
	}
}

// limitsText is the Limits line of a detail: "memory 64 MiB, pids 32,
// cpu 0.5; asleep early when idle above 32 MiB".
func limitsText(l *fleet.LimitsStatus) string {
	var parts []string
	if l.MemoryBytes > 0 {
		m := "memory " + proc.FormatBytes(l.MemoryBytes)
		if l.ChargedBytes > 0 {
			// What the limit counts: not the resident memory shown above.
			m += " (" + proc.FormatMemory(l.ChargedBytes) + " counted against it now)"
		}
		parts = append(parts, m)
	}
	if l.PIDs > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.PIDs))
	}
	if l.CPU > 0 {
		parts = append(parts, "cpu "+strconv.FormatFloat(l.CPU, 'g', -1, 64))
	}
	text := strings.Join(parts, ", ")
	if l.MaxIdleMemoryBytes > 0 {
		if text != "" {
			text += "; "
		}
		text += "asleep early when idle above " + proc.FormatBytes(l.MaxIdleMemoryBytes)
	}
	return text
}

// containment is the Containment line of a detail: the layers on, then
// those off; for an http server, that there is no local process.
func containment(d admin.Detail) string {
	if d.NoLocalProcess != "" {
		return d.NoLocalProcess
	}
	var on, off []string
	for _, l := range d.Containment {
		if l.Active {
			on = append(on, l.Name)
		} else {
			off = append(off, l.Name)
		}
	}
	if len(on) == 0 && len(off) == 0 {
		return "" // not reported
	}
	text := "none"
	if len(on) > 0 {
		text = strings.Join(on, ", ")
	}
	if len(off) > 0 {
		text += " (off: " + strings.Join(off, ", ") + ")"
	}
	return text
}

// printClients lists the clients whose requests reached the server: name,
// version, requests, and how long ago the last ended.
func printClients(w io.Writer, cs []clientbook.Use, now time.Time) error {
	if len(cs) == 0 {
		_, err := fmt.Fprintln(w, "\nClients: none yet")
		return err
	}
	fmt.Fprintln(w, "\nClients:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CLIENT\tVERSION\tREQUESTS\tLAST USED")
	for _, c := range cs {
		version := c.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s ago\n", c.Name, version, c.Requests, age(now.Sub(c.LastUsed)))
	}
	return tw.Flush()
}

// printInstances prints a server's instances as a table, the shared one
// first.
func printInstances(w io.Writer, ins []fleet.InstanceStatus, now time.Time) error {
	fmt.Fprintln(w, "\nInstances:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  INSTANCE\tSTATE\tPID\tUPTIME\tIDLE\tIN-FLIGHT\tRESTARTS\tSPAWNS\tLAST ERROR")
	for _, in := range ins {
		name := "session " + in.Session
		switch {
		case in.Shared:
			name = "shared"
		case in.IdentityName != "":
			name = "identity " + in.IdentityName
		case in.Identity != "":
			name = "identity " + in.Identity
		}
		pid, up, idle := processCells(in.PID, in.StartedAt, in.LastActivity, now)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", name, in.State, pid, up, idle, in.InFlight, in.Restarts, in.Spawns, cmdutil.OneLine(in.LastError, 60))
	}
	return tw.Flush()
}

// launchLines are the lines of inspect about a server run through a
// package launcher: what its next start runs, and why not flattened.
func launchLines(line func(k, v string), st fleet.Status, ls *launch.Status, now time.Time) {
	if ls.Flattened {
		line("Runs as", ls.Runs+" (flattened: the launcher's program runs directly)")
		line("Runs", strings.Join(ls.Command, " ")+" (then the server's arguments)")
		if ls.NodePath != "" {
			line("NODE_PATH", ls.NodePath+" (as "+ls.Name+"'s bin sets it: its own, then the server's)")
		}
		resolved := ls.Package + "@" + ls.Version
		if ls.Spec != "" && ls.Spec != resolved {
			resolved += " (from " + ls.Spec + ")"
		}
		if !ls.ResolvedAt.IsZero() {
			resolved += ", " + age(now.Sub(ls.ResolvedAt)) + " ago (mcpvisor refresh " + st.Name + " resolves it again)"
		}
		line("Resolved", resolved)
		switch {
		case ls.CompileCache != "":
			line("Compile cache", ls.CompileCache+" (node 22.1 and later keep the server's compiled modules there)")
		case ls.CompileCacheSetBy != "":
			line("Compile cache", "as the server's environment says ("+ls.CompileCacheSetBy+" is set)")
		}
	} else {
		line("Runs as", ls.Name+" as written: "+ls.Reason)
	}
	if st.PID != 0 && ls.Last != "" && (ls.Last == "flattened") != ls.Flattened {
		line("Running", "started "+ls.Last+"; the above applies from its next start")
	}
}

// eraText says which protocol versions a server speaks, from its status's
// era: one version, or a dual-era server's legacy one and the modern one
// joined by "+" (catalog.Catalog.Era).
func eraText(era string) string {
	legacy, modern, dual := strings.Cut(era, "+")
	switch {
	case era == "":
		return "unknown"
	case dual:
		return legacy + " and " + modern + " (dual-era: legacy clients are served by its initialized process, " + modern + " clients by a second one)"
	}
	return era
}

// declaresText says what mcpvisor declares to the server as its client:
// to whom, and which of the capabilities it carries.
func declaresText(d admin.Detail) string {
	var caps map[string]json.RawMessage
	_ = json.Unmarshal(d.Declares, &caps)
	var names []string
	for _, name := range config.CarriedCapabilities {
		if _, ok := caps[name]; ok {
			names = append(names, name)
		}
	}
	list := strings.Join(names, ", ")
	if len(names) == 0 {
		return "nothing (clientCapabilities: []): a request of the server for roots, sampling or elicitation gets Method not found"
	}
	switch {
	case d.Era == revision.ModernVersion:
		return "in each request, what its client declared, of " + list
	case d.Sharing == config.SharingPerSession:
		return "to each session's process, what its client declared, of " + list
	}
	return list + ", to the process every client shares: a request for one its client did not declare gets Method not found"
}
