package clientcfg

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpvisor/mcpvisor/internal/jsonc"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares got with testdata/name, or writes it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n%s", name, Diff(want, got, "want", "got"))
	}
}

// dump writes what was read, one server a paragraph.
func dump(f *File) []byte {
	var b bytes.Buffer
	for _, p := range f.Problems {
		fmt.Fprintf(&b, "problem %s\n", p)
	}
	for _, s := range f.Servers {
		fmt.Fprintf(&b, "%s at %s: %s", s.Name, s.At, s.Transport)
		if s.Disabled {
			b.WriteString(" disabled")
		}
		b.WriteString("\n")
		if s.Command != "" {
			fmt.Fprintf(&b, "  command %q (%s)\n  args %q (%s)\n", s.Command, s.FieldPath("command"), s.Args, s.FieldPath("args"))
		}
		for _, kv := range s.Env {
			fmt.Fprintf(&b, "  env %s=%q\n", kv.Key, kv.Value)
		}
		if s.Cwd != "" {
			fmt.Fprintf(&b, "  cwd %q\n", s.Cwd)
		}
		if s.URL != "" {
			fmt.Fprintf(&b, "  url %q (%s)\n", s.URL, s.FieldPath("url"))
		}
		for _, kv := range s.Headers {
			fmt.Fprintf(&b, "  header %s=%q (%s)\n", kv.Key, kv.Value, s.FieldPath("headers"))
		}
		if s.OAuth != nil {
			fmt.Fprintf(&b, "  oauth %s\n", mustJSON(s.OAuth.entry()))
		}
		if s.Login {
			b.WriteString("  signs in\n")
		}
		if s.Tools != nil {
			fmt.Fprintf(&b, "  tools %s\n", s.Tools)
		}
		if s.InitTimeout != "" || s.RequestTimeout != "" {
			fmt.Fprintf(&b, "  initTimeout %q requestTimeout %q\n", s.InitTimeout, s.RequestTimeout)
		}
		for _, n := range s.Unsupported {
			fmt.Fprintf(&b, "  unsupported %s\n", n)
		}
		for _, n := range s.ClientOnly {
			fmt.Fprintf(&b, "  left to the client: %s\n", n)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "  note %s\n", n)
		}
		if s.Blocked != "" {
			fmt.Fprintf(&b, "  blocked: %s\n", s.Blocked)
		}
	}
	return b.Bytes()
}

func mustJSON(v any) string {
	b, err := jsonc.Encode(v, "", "")
	if err != nil {
		panic(err)
	}
	return b
}

// testLaunchers stands in for internal/launch.Parse (which imports this
// package through internal/config) in this package's tests: npx with
// -y/--yes, pnpm dlx and bunx, nothing else. internal/cli/clients'
// tests read the same files with the real one.
func testLaunchers(command string, args []string) (*Launch, error) {
	i := 0
	switch {
	case command == "npx":
	case command == "pnpm" && len(args) > 0 && args[0] == "dlx":
		i = 1
	case command == "bunx":
	default:
		return nil, nil
	}
	for ; i < len(args) && (args[i] == "-y" || args[i] == "--yes"); i++ {
	}
	if i >= len(args) || strings.HasPrefix(args[i], "-") {
		return nil, fmt.Errorf("%s command line not understood", command)
	}
	return &Launch{Target: args[i], Args: args[i+1:]}, nil
}

var goldenFiles = []struct {
	client, file string
	format       Format
}{
	{"claude-desktop", "claude-desktop.json", FormatMCPServers},
	{"claude-code", "claude-code.json", FormatClaudeUser},
	{"cursor", "cursor.json", FormatMCPServers},
	{"windsurf", "windsurf.json", FormatMCPServers},
	{"vscode", "vscode.json", FormatVSCode},
	{"zed", "zed.json", FormatZed},
	{"codex", "codex.toml", FormatCodex},
}

// readGolden reads a client's golden file: the client, the file's bytes,
// what was read of it, and the servers mcpvisor can run (the ones
// install-client takes when mcpvisor's config has them all).
func readGolden(t *testing.T, client, file string, format Format) (*Client, []byte, *File, []*Server) {
	t.Helper()
	c := Lookup(client)
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Read(data, format)
	if err != nil {
		t.Fatal(err)
	}
	f.TakeOverMCPRemote(testLaunchers)
	var known []*Server
	for _, s := range f.Servers {
		if s.Blocked == "" {
			known = append(known, s)
		}
	}
	return c, data, f, known
}

// TestGolden reads each client's file into the common form and writes it
// back as install-client does, one entry for all and one per server: the
// results are compared with testdata/*.golden, which show that unrelated
// keys, comments and trailing commas stay, and that the server entries
// change as they should.
func TestGolden(t *testing.T) {
	for _, g := range goldenFiles {
		t.Run(g.client, func(t *testing.T) {
			c, data, f, known := readGolden(t, g.client, g.file, g.format)
			golden(t, g.file+".read.golden", dump(f))
			for _, perServer := range []bool{false, true} {
				opts := InstallOptions{Exe: `/opt/mcp visor/mcpvisor`, Config: "/home/me/.config/mcpvisor/config.json", PerServer: perServer, Known: known, Launchers: testLaunchers}
				plan, err := c.PlanInstall(data, g.format, opts)
				if err != nil {
					t.Fatal(err)
				}
				if len(plan.Missing) > 0 {
					t.Fatalf("missing %v", plan.Missing)
				}
				name := g.file + ".installed.golden"
				if perServer {
					name = g.file + ".per-server.golden"
				}
				golden(t, name, plan.Data)
				// What was written reads back: the taken entries launch connect.
				back, err := c.Read(plan.Data, g.format)
				if err != nil {
					t.Fatalf("the written file does not read back: %v", err)
				}
				for _, s := range back.Servers {
					if strings.HasPrefix(s.At, "projects") {
						continue
					}
					taken := s.IsConnect()
					if s.Blocked != "" && taken {
						t.Errorf("%s was taken over", s.At)
					}
					if s.Remote() && len(s.ClientOnly) == 0 {
						t.Errorf("%s: a remote entry mcpvisor can run was not taken over", s.At)
					}
				}
				if !perServer && back.Server(EntryName) == nil {
					t.Errorf("no %q entry written", EntryName)
				}
				// A second plan on the written file changes nothing.
				again, err := c.PlanInstall(plan.Data, g.format, opts)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Data, plan.Data) {
					t.Errorf("installing twice changed the file again:\n%s", Diff(plan.Data, again.Data, "once", "twice"))
				}
			}
		})
	}
}

// TestRefuseUnparseable refuses a file that does not parse, with its
// line and column.
func TestRefuseUnparseable(t *testing.T) {
	for _, tc := range []struct {
		client, data, want string
		format             Format
	}{
		{"cursor", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n  \n", "5:1:", FormatMCPServers},
		{"vscode", "{\n  \"servers\": { /* open", "2:16: unterminated /* comment", FormatVSCode},
		{"codex", "[mcp_servers.a]\ncommand = \n", "2:", FormatCodex},
	} {
		_, err := Lookup(tc.client).PlanInstall([]byte(tc.data), tc.format, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.client, err, tc.want)
		}
	}
}

// TestMissingServersRefused: a client server mcpvisor's config lacks is
// listed, and nothing is planned.
func TestMissingServersRefused(t *testing.T) {
	data := []byte(`{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}`)
	known := []*Server{{Name: "other-name", Command: "x", Transport: TransportStdio}}
	plan, err := Lookup("cursor").PlanInstall(data, FormatMCPServers, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json", Known: known})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Missing) != 1 || plan.Missing[0].Name != "b" || plan.Data != nil {
		t.Fatalf("missing %v, data %q; want b only and no data", plan.Missing, plan.Data)
	}
}

func TestSameLaunch(t *testing.T) {
	a := &Server{Command: "npx", Args: []string{"-y", "p"}, Env: []KV{{"A", "1"}, {"B", "2"}}}
	for _, tc := range []struct {
		b    *Server
		same bool
	}{
		{&Server{Name: "other", Command: "npx", Args: []string{"-y", "p"}, Env: []KV{{"B", "2"}, {"A", "1"}}, Disabled: true}, true},
		{&Server{Command: "npx", Args: []string{"-y", "p"}, Env: []KV{{"A", "1"}}}, false},
		{&Server{Command: "npx", Args: []string{"p", "-y"}, Env: []KV{{"A", "1"}, {"B", "2"}}}, false},
		{&Server{Command: "npx", Args: []string{"-y", "p"}, Env: []KV{{"A", "1"}, {"B", "2"}}, Cwd: "/x"}, false},
		{&Server{URL: "https://x"}, false},
	} {
		if got := SameLaunch(a, tc.b); got != tc.same {
			t.Errorf("SameLaunch(%+v) = %v, want %v", tc.b, got, tc.same)
		}
	}
	r := &Server{URL: "https://x", Transport: TransportHTTP, Headers: []KV{{"A", "1"}}}
	if !SameLaunch(r, &Server{URL: "https://x", Transport: TransportHTTP, Headers: []KV{{"A", "1"}}}) ||
		SameLaunch(r, &Server{URL: "https://x", Transport: TransportSSE, Headers: []KV{{"A", "1"}}}) ||
		SameLaunch(r, &Server{URL: "https://x", Transport: TransportHTTP}) {
		t.Error("remote launches compared wrongly")
	}
}

// FuzzSplice edits the golden files and random documents: whatever
// parses stays parseable after SetMember and RemoveMember, the member set
// is there with its value, the removed one is gone, and the other
// members keep their values.
func FuzzSplice(f *testing.F) {
	for _, g := range goldenFiles {
		if g.format == FormatCodex {
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", g.file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, g.format.serversKey(), "new")
	}
	f.Add([]byte(`{"a":1,}`), "a", "b")
	f.Add([]byte("{\n  \"a\": 1 // c\n}"), "a", "a")
	f.Fuzz(func(t *testing.T, data []byte, key, member string) {
		root, err := jsonc.Parse(data)
		if err != nil || root.Kind != jsonc.Object || !utf8.ValidString(key) || !utf8.ValidString(member) {
			// keys are what a parsed file or a user names: valid UTF-8
			return
		}
		others := func(doc []byte, skip string) map[string]string {
			r, err := jsonc.Parse(doc)
			if err != nil {
				t.Fatalf("%v in\n%s", err, doc)
			}
			m := map[string]string{}
			for _, mem := range r.Members {
				if mem.Key != skip {
					m[mem.Key] = string(jsonc.Standardize(doc[mem.Value.Start:mem.Value.End]))
				}
			}
			return m
		}
		before := others(data, key)
		out, err := jsonc.SetMember(data, nil, key, jsonc.Ordered{{Key: member, Value: []string{"x", "y"}}})
		if err != nil {
			t.Fatalf("SetMember: %v", err)
		}
		r, _ := jsonc.Parse(out)
		v := r.Get(key)
		if v == nil || v.Get(member) == nil || len(v.Get(member).Elems) != 2 {
			t.Fatalf("SetMember did not set %q.%q:\n%s", key, member, out)
		}
		after := others(out, key)
		for k, want := range before {
			if !equalJSON(after[k], want) {
				t.Fatalf("member %q changed from %s to %s", k, want, after[k])
			}
		}
		out2, err := jsonc.RemoveMember(out, nil, key)
		if err != nil {
			t.Fatalf("RemoveMember: %v\n%s", err, out)
		}
		if r, _ := jsonc.Parse(out2); r.Get(key) != nil {
			t.Fatalf("RemoveMember left %q", key)
		}
		for k, want := range before {
			if got := others(out2, key)[k]; !equalJSON(got, want) {
				t.Fatalf("member %q changed from %s to %s by the removal", k, want, got)
			}
		}
	})
}

// equalJSON compares two JSON texts as values' bytes without blanks.
func equalJSON(a, b string) bool {
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), "") }
	return squeeze(a) == squeeze(b)
}

// The connect entry names the daemon's state directory when it is given
// one (a client's environment may not say where it is), and only then.
func TestInstallPassesTheStateDir(t *testing.T) {
	data := []byte(`{"mcpServers": {"a": {"command": "x"}}}`)
	known := []*Server{{Name: "a", Command: "x", Transport: TransportStdio}}
	for _, stateDir := range []string{"/home/me/.local/state/mcpvisor", ""} {
		plan, err := Lookup("cursor").PlanInstall(data, FormatMCPServers, InstallOptions{Exe: "/bin/mcpvisor", Config: "/c.json", StateDir: stateDir, Known: known})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Read(plan.Data, FormatMCPServers)
		if err != nil {
			t.Fatal(err)
		}
		e := s.Server(EntryName)
		got := fmt.Sprintf("%q", e.Args)
		want := `["connect" "--config" "/c.json"]`
		if stateDir != "" {
			want = `["connect" "--config" "/c.json" "--state-dir" "` + stateDir + `"]`
		}
		if got != want {
			t.Errorf("state dir %q: connect args %s, want %s", stateDir, got, want)
		}
	}
}

// TestCodexWrongTypes: each key of a Codex server of the wrong type is a
// problem named by its path, and the first one blocks the server; a
// server with only right types beside it is read.
func TestCodexWrongTypes(t *testing.T) {
	data := []byte(`[mcp_servers.ok]
command = "npx"
args = ["-y", "$p"]

[mcp_servers.bad]
command = 1
args = ["a", 2]
env = "X=1"
enabled = "yes"
startup_timeout_sec = -1
enabled_tools = "all"

[mcp_servers.worse]
http_headers = { A = 1 }
url = "https://x"

[mcp_servers.none]
enabled = true
`)
	f, err := Lookup("codex").Read(data, FormatCodex)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, p := range f.Problems {
		problems = append(problems, p.At+": "+p.Msg)
	}
	want := []string{
		"mcp_servers.bad.args[1]: must be a string",
		"mcp_servers.bad.command: must be a string",
		"mcp_servers.bad.enabled: must be a boolean",
		"mcp_servers.bad.enabled_tools: must be an array of strings",
		"mcp_servers.bad.env: must be a table of strings",
		"mcp_servers.bad.startup_timeout_sec: must be a number, 0 or more",
		"mcp_servers.none: has neither command nor url",
		"mcp_servers.worse.http_headers.A: must be a string",
	}
	slices.Sort(problems)
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	blocked := map[string]string{}
	for _, s := range f.Servers {
		blocked[s.Name] = s.Blocked
	}
	if blocked["ok"] != "" || blocked["bad"] != "invalid: mcp_servers.bad.args[1]: must be a string" ||
		blocked["worse"] != "invalid: mcp_servers.worse.http_headers.A: must be a string" ||
		blocked["none"] != "invalid: has neither command nor url" {
		t.Errorf("blocked: %q", blocked)
	}
	if s := f.Servers[slices.IndexFunc(f.Servers, func(s *Server) bool { return s.Name == "ok" })]; s.Args[1] != "$$p" {
		t.Errorf("ok's args %q: a Codex $ must stay literal", s.Args)
	}
}
