package clientcfg

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/redact"
)

// hunkHeaders are a diff's "@@ … @@" lines.
var hunkHeaders = regexp.MustCompile(`(?m)^@@ .* @@$`)

// quoted is v as a JSON (and TOML basic) string in a file.
func quoted(v string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSpace(b.String())
}

// TestDiffRedactedInstall: the diff install-client prints of each
// client's golden file, one entry for all and per server, shows none of
// the env and header values the plain diff shows, has the plain diff's
// hunks (the same line numbers: the lines are the file's), and leaves
// the plan's bytes as they are.
func TestDiffRedactedInstall(t *testing.T) {
	shownPlain := 0
	for _, g := range goldenFiles {
		t.Run(g.client, func(t *testing.T) {
			c, data, f, known := readGolden(t, g.client, g.file, g.format)
			var secrets []string
			for _, s := range f.Servers {
				for _, kv := range append(append([]KV(nil), s.Env...), s.Headers...) {
					v := kv.Value
					if c.vars == varsNone {
						v = strings.ReplaceAll(v, "$$", "$")
					}
					if v != "" && !strings.Contains(v, "${") {
						secrets = append(secrets, quoted(v))
					}
				}
			}
			for _, perServer := range []bool{false, true} {
				plan, err := c.PlanInstall(data, g.format, InstallOptions{Exe: "/usr/bin/mcpvisor", Config: "/c.json", PerServer: perServer, Known: known})
				if err != nil {
					t.Fatal(err)
				}
				written := bytes.Clone(plan.Data)
				plain := Diff(data, plan.Data, "a", "b")
				shown := DiffRedacted(data, plan.Data, g.format, "a", "b")
				if !bytes.Equal(plan.Data, written) {
					t.Fatal("DiffRedacted changed the bytes to write")
				}
				if got, want := hunkHeaders.FindAllString(shown, -1), hunkHeaders.FindAllString(plain, -1); strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("hunks %q, the plain diff's %q", got, want)
				}
				if got, want := strings.Count(shown, "\n"), strings.Count(plain, "\n"); got != want {
					t.Errorf("%d lines, the plain diff has %d:\n%s", got, want, shown)
				}
				for _, s := range secrets {
					if strings.Contains(plain, s) {
						shownPlain++
					}
					if strings.Contains(shown, s) {
						t.Errorf("per-server %v: shows %s:\n%s", perServer, s, shown)
					}
				}
			}
		})
	}
	if shownPlain == 0 {
		t.Error("no plain diff showed a secret: the test proves nothing")
	}
}

// TestDiffRedactedTellsAChange: a secret edited since install (what
// uninstall-client shows when it refuses) shows as changed, on a line of
// its own in the diff, not as a line alike on both sides; a file that does
// not parse is not shown at all.
func TestDiffRedactedTellsAChange(t *testing.T) {
	installed := []byte("[mcp_servers.gh]\ncommand = \"gh-mcp\"\n\n[mcp_servers.gh.env]\nGITHUB_TOKEN = \"ghp_0123456789abcdefghijklmnopqrstuvwx\"\nLOG = \"debug\"\n")
	now := bytes.Replace(installed, []byte("ghp_0123456789abcdefghijklmnopqrstuvwx"), []byte("ghp_zyxwvutsrqponmlkjihgfedcba9876543210"), 1)
	d := DiffRedacted(installed, now, FormatCodex, "installed", "now")
	want := "--- installed\n+++ now\n@@ -2,5 +2,5 @@\n command = \"gh-mcp\"\n \n [mcp_servers.gh.env]\n" +
		"-GITHUB_TOKEN = \"" + redact.Redaction + "\"\n+GITHUB_TOKEN = \"" + redact.RedactionChanged + "\"\n LOG = \"" + redact.Redaction + "\"\n"
	if d != want {
		t.Errorf("diff:\n%s\nwant:\n%s", d, want)
	}
	broken := []byte(`{"mcpServers": {"a": {"env": {"T": "ghp_0123456789abcdefghijklmnopqrstuvwx"}`)
	if d := DiffRedacted([]byte("{}"), broken, FormatMCPServers, "a", "b"); strings.Contains(d, "ghp_") || !strings.Contains(d, "not shown") {
		t.Errorf("a broken file:\n%s", d)
	}
}
