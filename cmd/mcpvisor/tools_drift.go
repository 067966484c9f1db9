package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/drift"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

func newToolsDiffCmd() *cobra.Command {
	var api apiClient
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff NAME",
		Short: "Show the last change of a server's tool, prompt and template definitions, and the tools it holds back",
		Long: "Shows what changed the last time mcpvisor saw server NAME's definitions change (tools, prompts and " +
			"resource templates: added, removed, and each changed field with its value before and after), and, for " +
			"a pinned server, the tools it holds back until approved (mcpvisor tools approve). With --json, the body " +
			"of GET /api/servers/NAME/definitions/diff.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return show(cmd.Context(), &api, cmd.OutOrStdout(), "/api/servers/"+url.PathEscape(args[0])+"/definitions/diff", asJSON, printDiff)
		},
	}
	api.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	return cmd
}

func newToolsApproveCmd() *cobra.Command {
	var api apiClient
	cmd := &cobra.Command{
		Use:   "approve NAME [TOOL...]",
		Short: "Approve tools a pinned server holds back (all of them when none is named)",
		Long: "Approves the named tools of pinned server NAME — every tool it holds back when none is named — at the " +
			"definitions `mcpvisor tools diff NAME` shows now: the approval names each definition by its fingerprint, " +
			"so a tool whose definition changes again before the approval lands is not approved (it stays held, and " +
			"the command fails saying so). Approved tools are listed and callable at once, and clients are told the " +
			"tool list changed. Approvals are kept in the state store.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return approveTools(cmd.Context(), &api, cmd.OutOrStdout(), args[0], args[1:])
		},
	}
	api.flags(cmd)
	return cmd
}

// approveTools approves tools of server name at the definitions pending
// now (all pending when tools is empty), by fingerprint.
func approveTools(ctx context.Context, api *apiClient, w io.Writer, name string, tools []string) error {
	var diff admin.DefinitionsDiff
	if err := api.getJSON(ctx, "/api/servers/"+url.PathEscape(name)+"/definitions/diff", &diff); err != nil {
		return err
	}
	var pendingNames []string
	fps := map[string]string{}
	for _, p := range diff.Pending {
		pendingNames = append(pendingNames, p.Name)
		fps[p.Name] = p.Fingerprint
	}
	if len(diff.Pending) == 0 {
		if !diff.Pin {
			return fmt.Errorf("server %s is not pinned: it holds nothing back (set \"pin\": true to hold new and changed tools until approved)", name)
		}
		if len(tools) > 0 {
			return fmt.Errorf("server %s holds no tool back; nothing to approve", name)
		}
		_, err := fmt.Fprintf(w, "server %s holds no tool back\n", name)
		return err
	}
	if len(tools) == 0 {
		tools = pendingNames
	}
	req := admin.ApproveRequest{Names: tools, Fingerprints: map[string]string{}}
	for _, t := range tools {
		fp, ok := fps[t]
		if !ok {
			return fmt.Errorf("server %s holds no tool named %q back; pending: %s", name, t, strings.Join(pendingNames, ", "))
		}
		req.Fingerprints[t] = fp
	}
	body, _ := json.Marshal(req)
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	resp, err := api.do(actx, http.MethodPost, "/api/servers/"+url.PathEscape(name)+"/approve", http.Header{"Content-Type": {"application/json"}}, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return answerError(resp.StatusCode, b)
	}
	var res admin.ApproveResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	fmt.Fprintf(w, "approved %s of server %s\n", strings.Join(res.Approved, ", "), name)
	if len(res.Pending) > 0 {
		fmt.Fprintf(w, "still held: %s\n", strings.Join(res.Pending, ", "))
	}
	return nil
}

func printDiff(w io.Writer, d admin.DefinitionsDiff) error {
	pin := "not pinned"
	if d.Pin {
		pin = "pinned"
	}
	if d.Since == nil {
		fmt.Fprintf(w, "server %s (%s): no change of its definitions seen\n", d.Server, pin)
	} else {
		fmt.Fprintf(w, "server %s (%s): definitions last changed %s\n", d.Server, pin, d.Since.Local().Format(time.RFC3339))
		printChanges(w, d.Changes, "  ")
	}
	if len(d.Pending) > 0 {
		var names []string
		fmt.Fprintf(w, "\nheld back until approved (changes since approved):\n")
		for _, p := range d.Pending {
			names = append(names, p.Name)
		}
		printChanges(w, pendingChanges(d.Pending), "  ")
		fmt.Fprintf(w, "\napprove with: mcpvisor tools approve %s %s\n", d.Server, strings.Join(names, " "))
	}
	return nil
}

func pendingChanges(ps []fleet.Pending) []drift.Change {
	out := make([]drift.Change, len(ps))
	for i, p := range ps {
		out[i] = p.Change
	}
	return out
}

func printChanges(w io.Writer, cs []drift.Change, indent string) {
	cs = slices.Clone(cs)
	slices.SortStableFunc(cs, func(a, b drift.Change) int { return strings.Compare(string(a.Kind), string(b.Kind)) })
	for _, c := range cs {
		sign := map[string]string{drift.Added: "+", drift.Removed: "-", drift.Changed: "~"}[c.Change]
		fmt.Fprintf(w, "%s%s %s %s (%s)\n", indent, sign, c.Kind, c.Name, c.Change)
		for _, f := range c.Fields {
			fmt.Fprintf(w, "%s    %s: %s → %s\n", indent, f.Path, shown(f.Old), shown(f.New))
		}
		if c.More > 0 {
			fmt.Fprintf(w, "%s    … and %d more changed fields\n", indent, c.More)
		}
	}
}

// shown is a field value for the terminal: its JSON on one line, or
// "(absent)".
func shown(v json.RawMessage) string {
	if v == nil {
		return "(absent)"
	}
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}
