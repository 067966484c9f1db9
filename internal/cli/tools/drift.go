package tools

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
	"unicode"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/drift"
)

// DiffOptions are tools diff's.
type DiffOptions struct {
	IO cmdutil.IOStreams
	// Server is the server named (an argument).
	Server string
	API    adminclient.Client
	JSON   bool
}

// NewCmdDiff is tools diff: its flags fill a DiffOptions, run by runF
// (nil: RunDiff).
func NewCmdDiff(streams cmdutil.IOStreams, runF func(context.Context, *DiffOptions) error) *cobra.Command {
	o := &DiffOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "diff NAME",
		Short: "Show the last change of a server's tool, prompt and template definitions, and the tools it holds back",
		Long: "Shows what changed the last time mcpvisor saw server NAME's definitions change (tools, prompts and " +
			"resource templates: added, removed, and each changed field with its value before and after), and, for " +
			"a pinned server, the tools it holds back until approved (mcpvisor tools approve). With --json, the body " +
			"of GET /api/servers/NAME/definitions/diff.",
		Args: cobra.ExactArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Server = args[0]
			return nil
		}, runF, RunDiff),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the raw JSON")
	return cmd
}

// RunDiff prints the last change of the server's definitions and what it
// holds back.
func RunDiff(ctx context.Context, o *DiffOptions) error {
	return cmdutil.Show(ctx, &o.API, o.IO.Out, "/api/servers/"+url.PathEscape(o.Server)+"/definitions/diff", o.JSON, printDiff)
}

// ApproveOptions are tools approve's.
type ApproveOptions struct {
	IO cmdutil.IOStreams
	// Server is the server named; Tools the tools after it, each
	// TOOL@FINGERPRINT or a bare TOOL.
	Server string
	Tools  []string
	API    adminclient.Client
	All    bool
}

// NewCmdApprove is tools approve: its flags fill an ApproveOptions, run by
// runF (nil: RunApprove).
func NewCmdApprove(streams cmdutil.IOStreams, runF func(context.Context, *ApproveOptions) error) *cobra.Command {
	o := &ApproveOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "approve NAME (TOOL@FINGERPRINT... | --all)",
		Short: "Approve the definitions of tools a pinned server holds back, as reviewed with tools diff",
		Long: "Approves tools that pinned server NAME holds back, each at one definition: name each as " +
			"`mcpvisor tools diff NAME` prints it, TOOL@FINGERPRINT (the first " + fmt.Sprint(admin.MinFingerprint) +
			" hex digits of the definition's SHA-256, or all 64), and only the definition you reviewed is approved — " +
			"if the server changed the tool since, nothing is approved and the command fails saying so. A bare TOOL " +
			"is approved at the definition pending when the command runs, and the command prints its fingerprint. " +
			"--all approves every tool pending when the command reads them, each at the definition it read. Naming " +
			"no tool without --all is an error. Approved tools are listed and callable at once, and clients are told " +
			"the tool list changed. Approvals are kept in the state store.",
		Args: cobra.MinimumNArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Server, o.Tools = args[0], args[1:]
			return nil
		}, runF, RunApprove),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().BoolVar(&o.All, "all", false, "approve every tool pending now, each at the definition read")
	return cmd
}

// RunApprove approves the tools o names (approveTools).
func RunApprove(ctx context.Context, o *ApproveOptions) error {
	return approveTools(ctx, &o.API, o.IO.Out, o.Server, o.Tools, o.All)
}

// shortFP is how many hex digits of a fingerprint the CLI shows: the
// fewest the API takes.
const shortFP = admin.MinFingerprint

// token is a held tool as tools diff prints it and tools approve takes
// it: TOOL@FINGERPRINT (a prefix of it).
func token(name, fp string) string {
	if len(fp) > shortFP {
		fp = fp[:shortFP]
	}
	return name + "@" + fp
}

// isFingerprint reports whether s can be a fingerprint as tools diff
// prints it: MinFingerprint to 64 hex digits.
func isFingerprint(s string) bool {
	if len(s) < admin.MinFingerprint || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// approveTools approves tools of server name: those named in tools, each
// TOOL@FINGERPRINT (sent as given) or a bare TOOL (at the definition
// pending now, by its fingerprint), or, with all, every tool pending now
// at the definition read.
func approveTools(ctx context.Context, api *adminclient.Client, w io.Writer, name string, tools []string, all bool) error {
	switch {
	case all && len(tools) > 0:
		return fmt.Errorf("--all approves every tool server %s holds back: name tools or pass --all, not both", name)
	case !all && len(tools) == 0:
		return fmt.Errorf("name the tools to approve as `mcpvisor tools diff %s` prints them (TOOL@FINGERPRINT: the definition you reviewed), or pass --all to approve every tool pending now", name)
	}
	var diff admin.DefinitionsDiff
	if err := api.GetJSON(ctx, "/api/servers/"+url.PathEscape(name)+"/definitions/diff", &diff); err != nil {
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
	req := admin.ApproveRequest{Fingerprints: map[string]string{}}
	var bare []string
	notHeld := func(t string) error {
		return fmt.Errorf("server %s holds no tool named %q back; pending: %s", name, t, strings.Join(pendingNames, ", "))
	}
	if all {
		for _, t := range pendingNames {
			req.Names = append(req.Names, t)
			req.Fingerprints[t] = fps[t]
		}
	}
	for _, tok := range tools {
		t, fp := tok, ""
		if _, held := fps[tok]; !held {
			i := strings.LastIndexByte(tok, '@')
			if i < 0 {
				return notHeld(tok)
			}
			t, fp = tok[:i], tok[i+1:]
			if !isFingerprint(fp) {
				return fmt.Errorf("%s: %q is not a fingerprint: want TOOL@FINGERPRINT as `mcpvisor tools diff %s` prints it (at least %d hex digits)", tok, fp, name, admin.MinFingerprint)
			}
			if _, held := fps[t]; !held {
				return notHeld(t)
			}
		}
		if slices.Contains(req.Names, t) {
			return fmt.Errorf("%s is named twice", t)
		}
		if fp == "" {
			fp = fps[t]
			bare = append(bare, t)
		}
		req.Names = append(req.Names, t)
		req.Fingerprints[t] = fp
	}
	body, _ := json.Marshal(req)
	actx, cancel := context.WithTimeout(ctx, adminclient.Timeout)
	defer cancel()
	code, b, err := api.Post(actx, "/api/servers/"+url.PathEscape(name)+"/approve", body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		err := adminclient.AnswerError(code, b)
		if code == http.StatusConflict {
			return fmt.Errorf("nothing approved: %w", err)
		}
		return err
	}
	var res admin.ApproveResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	var approved []string
	for _, t := range res.Approved {
		approved = append(approved, shellWord(token(t, res.Fingerprints[t])))
	}
	fmt.Fprintf(w, "approved %s of server %s\n", strings.Join(approved, ", "), name)
	if len(res.Pending) > 0 {
		fmt.Fprintf(w, "still held: %s\n", strings.Join(res.Pending, ", "))
	}
	for _, t := range bare {
		fmt.Fprintf(w, "%s was named without a fingerprint: approved at the definition pending now (the fingerprint above); name TOOL@FINGERPRINT as `mcpvisor tools diff %s` prints it to approve only what you reviewed\n", safeText(t), name)
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
		printChanges(w, d.Changes, nil, "  ")
	}
	if len(d.Pending) > 0 {
		var tokens []string
		fps := map[string]string{}
		fmt.Fprintf(w, "\nheld back until approved (changes since approved; a new tool whole), each as TOOL@FINGERPRINT:\n")
		for _, p := range d.Pending {
			tokens = append(tokens, shellWord(token(p.Name, p.Fingerprint)))
			fps[p.Name] = p.Fingerprint
		}
		printChanges(w, pendingChanges(d.Pending), fps, "  ")
		fmt.Fprintf(w, "\napprove what you reviewed with: mcpvisor tools approve %s %s\n", d.Server, strings.Join(tokens, " "))
		fmt.Fprintf(w, "or every tool pending now: mcpvisor tools approve %s --all\n", d.Server)
	}
	return nil
}

func pendingChanges(ps []catalog.Pending) []drift.Change {
	out := make([]drift.Change, len(ps))
	for i, p := range ps {
		out[i] = p.Change
	}
	return out
}

// printChanges prints changes, each name with its fingerprint's token
// when fps has one, and each field with its values whole.
func printChanges(w io.Writer, cs []drift.Change, fps map[string]string, indent string) {
	cs = slices.Clone(cs)
	slices.SortStableFunc(cs, func(a, b drift.Change) int { return strings.Compare(string(a.Kind), string(b.Kind)) })
	for _, c := range cs {
		sign := map[string]string{drift.Added: "+", drift.Removed: "-", drift.Changed: "~"}[c.Change]
		name := c.Name
		if fp, ok := fps[c.Name]; ok {
			name = token(name, fp)
		}
		fmt.Fprintf(w, "%s%s %s %s (%s)\n", indent, sign, c.Kind, safeText(name), c.Change)
		for _, f := range c.Fields {
			printField(w, indent+"    ", f, c.Change == drift.Added)
		}
		if c.More > 0 {
			fmt.Fprintf(w, "%s    … and %d more changed fields\n", indent, c.More)
		}
	}
}

// inlineWidth is the longest value printed on its field's line.
const inlineWidth = 72

// printField prints one field: "path: old → new" when both values are
// short and on one line (of a definition added: "path: new"), else the
// path and then each value on lines of its own, indented, "-" before the
// old and "+" before the new.
func printField(w io.Writer, indent string, f drift.Field, added bool) {
	var cut drift.Truncated
	if f.Truncated != nil {
		cut = *f.Truncated
	}
	oldLines, newLines := valueLines(f.Old, cut.Old), valueLines(f.New, cut.New)
	short := func(lines []string) bool { return len(lines) == 1 && len(lines[0]) <= inlineWidth }
	path := safeText(f.Path)
	switch {
	case added && short(newLines):
		fmt.Fprintf(w, "%s%s: %s\n", indent, path, newLines[0])
	case added:
		fmt.Fprintf(w, "%s%s:\n", indent, path)
		for _, l := range newLines {
			fmt.Fprintln(w, strings.TrimRight(indent+"  "+l, " "))
		}
	case short(oldLines) && short(newLines):
		fmt.Fprintf(w, "%s%s: %s → %s\n", indent, path, oldLines[0], newLines[0])
	default:
		fmt.Fprintf(w, "%s%s:\n", indent, path)
		for _, side := range []struct {
			sign  string
			lines []string
		}{{"-", oldLines}, {"+", newLines}} {
			for i, l := range side.lines {
				lead := "  "
				if i == 0 {
					lead = side.sign + " "
				}
				fmt.Fprintln(w, strings.TrimRight(indent+"  "+lead+l, " "))
			}
		}
	}
}

// valueLines is a field value for the terminal, whole: "(absent)"; a
// string with no line break quoted as JSON, one with line breaks as a
// block ("|" and then its lines, indented); anything else as its JSON,
// on one line when short, else indented over several. Characters that
// are not printable (controls, invisible format characters) are escaped
// (\uXXXX), so that what a server sent cannot move the cursor, clear the
// screen or reorder the text shown. whole, when not 0, is the length of
// a value the API cut: said after it.
func valueLines(v json.RawMessage, whole int) []string {
	if v == nil {
		return []string{"(absent)"}
	}
	var lines []string
	var s string
	canon, err := drift.Canonical(v)
	switch {
	case err != nil:
		lines = []string{safeText(string(v))}
	case json.Unmarshal(v, &s) == nil && strings.Contains(s, "\n") && whole == 0:
		lines = []string{"|"}
		for _, l := range strings.Split(s, "\n") {
			lines = append(lines, "  "+safeText(l))
		}
	case len(canon) <= inlineWidth || canon[0] == '"':
		lines = []string{safeText(string(canon))}
	default:
		var b bytes.Buffer
		_ = json.Indent(&b, canon, "", "  ")
		for _, l := range strings.Split(b.String(), "\n") {
			lines = append(lines, safeText(l))
		}
	}
	if whole > 0 {
		lines[len(lines)-1] += fmt.Sprintf(" … (cut: %d bytes in all)", whole)
	}
	return lines
}

// safeText is s with every character that is not printable — controls,
// and invisible format characters such as bidirectional overrides —
// escaped as \uXXXX (tabs included).
func safeText(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == ' ' || unicode.IsGraphic(r) && !unicode.Is(unicode.Cf, r) {
			b.WriteRune(r)
			continue
		}
		if r > 0xFFFF {
			fmt.Fprintf(&b, "\\U%08x", r)
		} else {
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

// shellWord is s as one word a POSIX shell reads back as s: as it is
// when it holds only characters no shell treats specially, else quoted
// ('…', or $'…' with escapes when it holds characters that are not
// printable), so that a command printed to be pasted runs nothing a
// server chose to name its tool.
func shellWord(s string) string {
	plain := s != ""
	printable := true
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', strings.ContainsRune("@%+=:,./_-", r):
		default:
			plain = false
			if !(r == ' ' || unicode.IsGraphic(r) && !unicode.Is(unicode.Cf, r)) {
				printable = false
			}
		}
	}
	switch {
	case plain:
		return s
	case printable:
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for _, r := range s {
		switch {
		case r == '\'' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == ' ' || unicode.IsGraphic(r) && !unicode.Is(unicode.Cf, r):
			b.WriteRune(r)
		case r > 0xFFFF:
			fmt.Fprintf(&b, "\\U%08x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// AcceptLostOptions are tools accept-lost's.
type AcceptLostOptions struct {
	IO cmdutil.IOStreams
	// Server is the server named (an argument).
	Server string
	API    adminclient.Client
}

// NewCmdAcceptLost is tools accept-lost: its flags fill an
// AcceptLostOptions, run by runF (nil: RunAcceptLost).
func NewCmdAcceptLost(streams cmdutil.IOStreams, runF func(context.Context, *AcceptLostOptions) error) *cobra.Command {
	o := &AcceptLostOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "accept-lost NAME",
		Short: "Accept that a server whose tools were lost rightly lists none, clearing its warning",
		Long: "When a server's relearn finds no tools where it had some, mcpvisor warns (tools_lost), serves it as " +
			"listing none and does not report it ready. If the server rightly has no tools now, accept-lost makes " +
			"the empty list its known definitions: the warning clears, the server is ready, and the loss is reported " +
			"as a definitions change that removed its tools. A pinned server keeps its approvals, so a tool that comes " +
			"back as approved is served and a changed one is held. It fails when the server's tools are not lost.",
		Args: cobra.ExactArgs(1),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Server = args[0]
			return nil
		}, runF, RunAcceptLost),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	return cmd
}

// RunAcceptLost makes the server's empty list its known definitions,
// clearing its tools_lost warning.
func RunAcceptLost(ctx context.Context, o *AcceptLostOptions) error {
	name := o.Server
	ctx, cancel := context.WithTimeout(ctx, adminclient.Timeout)
	defer cancel()
	code, b, err := o.API.Post(ctx, "/api/servers/"+url.PathEscape(name)+"/definitions/accept-lost", nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return adminclient.AnswerError(code, b)
	}
	var res admin.AcceptLostResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	fmt.Fprintf(o.IO.Out, "server %s now lists no tools (it had %d); its warning is cleared\n", name, res.Previous)
	return nil
}
