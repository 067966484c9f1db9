package gateway

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// An MCP Apps round trip through /mcp with the go-sdk's client: a tool's
// definition and its result name a ui:// view that no resources/list
// shows; reading it through /mcp reaches the server whose tool named it,
// and the HTML comes back intact. A view that tools of two servers name
// is read through neither's name on /mcp, only on each server's own
// endpoint, which passes it through untouched.
func TestViewNamedByAToolIsReadThroughTheAggregate(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	var logs testserver.Buffer
	w := newWorldLog(t, `{
		"a":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"a","FIXTURE_UI_URI":"ui://weather/view.html"}},
		"b":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"b","FIXTURE_UI_URI":"ui://other/view.html"}},
		"c":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"c","FIXTURE_UI_URI":"ui://shared/view.html"}},
		"d":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"d","FIXTURE_UI_URI":"ui://shared/view.html"}}}`, "", "",
		slog.New(slog.NewTextHandler(&logs, nil)))
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	named := ""
	for _, tool := range tools.Tools {
		if tool.Name == "a__view" {
			ui, _ := tool.Meta["ui"].(map[string]any)
			named, _ = ui["resourceUri"].(string)
		}
	}
	if named != "ui://weather/view.html" {
		t.Fatalf("a__view's definition names %q", named)
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__view", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("a__view: %v %v", res, err)
	}
	if ui, _ := res.Meta["ui"].(map[string]any); ui["resourceUri"] != "ui://weather/view.html" {
		t.Fatalf("the result's _meta: %v", res.Meta)
	}
	want := func(tag string) string {
		return "<!doctype html><html><body><h1>view of " + tag + "</h1><script>/* \u2028 é */</script></body></html>"
	}
	for uri, tag := range map[string]string{"ui://weather/view.html": "a", "ui://other/view.html": "b"} {
		read, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil || len(read.Contents) != 1 {
			t.Fatalf("read %s: %v %v", uri, read, err)
		}
		if c := read.Contents[0]; c.URI != uri || c.MIMEType != "text/html;profile=mcp-app" || c.Text != want(tag) {
			t.Errorf("read %s: %+v, want %s's view intact", uri, c, tag)
		}
	}
	for _, uri := range []string{"ui://shared/view.html", "ui://nobody/view.html", "ui://shared/view.html"} {
		if _, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("read %s through /mcp: %v, want not found", uri, err)
		}
	}
	// A client reading the shared view again and again is warned of
	// once: it cannot flood the log.
	if n := strings.Count(logs.String(), "named by tools of two servers"); n != 1 {
		t.Errorf("%d warnings of the shared view, want 1:\n%s", n, logs.String())
	}
	for _, server := range []string{"c", "d"} {
		own := w.stdioClient(w.gw.Single(server), nil)
		read, err := own.ReadResource(ctx, &mcp.ReadResourceParams{URI: "ui://shared/view.html"})
		if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != want(server) {
			t.Errorf("read the shared view on /servers/%s/mcp: %v %v", server, read, err)
		}
	}
}

// A server that names its view only in its tools' results (not in their
// definitions) has it read through /mcp once a result named it, from
// that server; a view the results of two servers name is neither's.
func TestViewNamedOnlyInAResultIsReadThroughTheAggregate(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, `{
		"e":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"e","FIXTURE_UI_URI":"ui://result/view.html","FIXTURE_UI_IN_RESULT":"1"}},
		"f":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"f","FIXTURE_UI_URI":"ui://both/view.html","FIXTURE_UI_IN_RESULT":"1"}},
		"g":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"g","FIXTURE_UI_URI":"ui://both/view.html","FIXTURE_UI_IN_RESULT":"1"}}}`)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	ctx := t.Context()
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "e__view" && tool.Meta != nil {
			t.Fatalf("e__view's definition names a view: %v", tool.Meta)
		}
	}
	if _, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "ui://result/view.html"}); err == nil {
		t.Fatal("a view no definition and no result named yet was read")
	}
	for _, name := range []string{"e__view", "f__view", "g__view"} {
		if res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}}); err != nil || res.IsError {
			t.Fatalf("%s: %v %v", name, res, err)
		}
	}
	read, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "ui://result/view.html"})
	if err != nil || len(read.Contents) != 1 || !strings.Contains(read.Contents[0].Text, "view of e") {
		t.Fatalf("the view e's result named: %v %v", read, err)
	}
	if _, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "ui://both/view.html"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a view the results of two servers named: %v, want not found", err)
	}
}
