package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// eraClient sends requests to an endpoint in one era: on a legacy
// session, or as 2026-07-28 requests with their _meta.
type eraClient struct {
	t   *testing.T
	ep  Endpoint
	s   *Session // nil: modern
	era string
}

// eraClients are a legacy and a modern client of ep.
func eraClients(t *testing.T, ep Endpoint) []eraClient {
	s := openDeclaring(t, ep, newRecorder(), `{}`)
	t.Cleanup(func() { ep.Close(s) })
	return []eraClient{{t, ep, s, "2025-11-25"}, {t, ep, nil, "2026-07-28"}}
}

// call sends method with params (a JSON object, or any JSON for a legacy
// client) and returns the answer.
func (c eraClient) call(method, params string) *rpc.Message {
	c.t.Helper()
	if c.s != nil {
		return c.ep.Handle(c.t.Context(), c.s, &rpc.Message{ID: json.RawMessage(`7`), Method: method, Params: json.RawMessage(params)}, newRecorder())
	}
	p := strings.TrimSuffix(strings.TrimSpace(params), "}")
	if strings.TrimSpace(p) != "{" {
		p += ","
	}
	p += modernMeta(`{}`) + "}"
	m := &rpc.Message{ID: json.RawMessage(`7`), Method: method, Params: json.RawMessage(p)}
	return c.ep.Stateless(c.t.Context(), m, mustModern(c.t, p), newRecorder())
}

// result decodes a successful answer into v.
func (c eraClient) result(resp *rpc.Message, v any) {
	c.t.Helper()
	if resp == nil || resp.Error != nil || json.Unmarshal(resp.Result, v) != nil {
		c.t.Fatalf("%s: %s, want a result", c.era, resp.Encode())
	}
}

// refused checks resp is the error code saying words.
func (c eraClient) refused(what string, resp *rpc.Message, code int, words string) {
	c.t.Helper()
	if resp == nil || resp.Error == nil || resp.Error.Code != code || !strings.Contains(resp.Error.Message, words) {
		c.t.Errorf("%s, %s: %s, want error %d saying %q", c.era, what, resp.Encode(), code, words)
	}
}

// skillsPage is a skills/list result.
type skillsPage struct {
	Skills []struct {
		URI         string
		Frontmatter map[string]string
		Resources   []struct{ URI, Digest string }
	}
	NextCursor string
	ResultType string
	TTLMs      *int `json:"ttlMs"`
	CacheScope string
}

// uris are the page's skills' uris, each with the server whose text its
// description names ("uri@tag").
func (p skillsPage) uris() []string {
	var out []string
	for _, s := range p.Skills {
		desc := s.Frontmatter["description"]
		out = append(out, s.URI+"@"+desc[strings.LastIndex(desc, " ")+1:])
	}
	return out
}

// extensionOf is the skills extension's settings in a result's
// capabilities, or "" when it has none.
func extensionOf(t *testing.T, result json.RawMessage) string {
	t.Helper()
	var r struct {
		Capabilities struct {
			Extensions map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(result, &r); err != nil {
		t.Fatal(err)
	}
	return string(r.Capabilities.Extensions[skillsExtension])
}

// capsOn are the skills extension's settings /mcp declares at initialize
// and in server/discover ("" for none).
func capsOn(t *testing.T, w *world) (legacy, modern string) {
	ep := w.gw.Aggregate()
	s := ep.Open(newRecorder())
	defer ep.Close(s)
	init := ep.Handle(t.Context(), s, request(1, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}), newRecorder())
	p := "{" + modernMeta(`{}`) + "}"
	disc := ep.Stateless(t.Context(), &rpc.Message{ID: json.RawMessage(`2`), Method: "server/discover", Params: json.RawMessage(p)}, mustModern(t, p), newRecorder())
	return extensionOf(t, init.Result), extensionOf(t, disc.Result)
}

// methodsOf is what a fixture's -method-log recorded.
func methodsOf(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// The skills of several servers through /mcp, in both eras: the
// capability is declared; skills/list has every server's skills (each
// server's pages followed), a skill two servers serve once, the first
// server's (in name order, as resources/list has its SKILL.md), warned of
// once; skills/get, resources/read of a file no list names and
// resources/directory/read reach the server that serves the skill — found
// before any skills/list, and after; the skill two serve is read from the
// one that lists it. A server that does not declare the extension is
// never sent skills/list, and the per-server endpoint serves each
// server's own skill.
func TestSkillsThroughTheAggregate(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	var logs testserver.Buffer
	dir := t.TempDir()
	plain := filepath.Join(dir, "c")
	w := newWorldLog(t, fmt.Sprintf(`{
		"a":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"a","FIXTURE_SKILLS":"pdf-processing,shared"}},
		"b":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"b","FIXTURE_SKILLS":"acme/refunds,shared"}},
		"c":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"c","FIXTURE_METHOD_LOG":%q}}}`, plain), "", "",
		slog.New(slog.NewTextHandler(&logs, nil)))
	for i, c := range eraClients(t, w.gw.Aggregate()) {
		read := func(uri string) string {
			t.Helper()
			var r struct{ Contents []struct{ URI, Text string } }
			c.result(c.call("resources/read", `{"uri":"`+uri+`"}`), &r)
			if len(r.Contents) != 1 || r.Contents[0].URI != uri {
				t.Fatalf("%s: read %s: %+v", c.era, uri, r)
			}
			return r.Contents[0].Text
		}
		// Before any skills/list (the first era): found by mcpvisor's
		// own listing.
		if got := read("skill://acme/refunds/references/FORMS.md"); !strings.Contains(got, "from b") {
			t.Errorf("%s: b's FORMS.md read %q", c.era, got)
		}
		if got := read("skill://shared/scripts/extract.py"); !strings.Contains(got, "from a") {
			t.Errorf("%s: the shared skill's script read %q, want a's", c.era, got)
		}
		if got := read("skill://acme/refunds/SKILL.md"); !strings.Contains(got, "name: refunds") {
			t.Errorf("%s: b's SKILL.md read %q", c.era, got)
		}
		for range 2 {
			var page skillsPage
			c.result(c.call("skills/list", `{}`), &page)
			if want := []string{"skill://pdf-processing/SKILL.md@a", "skill://shared/SKILL.md@a", "skill://acme/refunds/SKILL.md@b"}; !slices.Equal(page.uris(), want) {
				t.Errorf("%s: skills/list %v, want %v", c.era, page.uris(), want)
			}
			if page.NextCursor != "" || len(page.Skills) > 0 && len(page.Skills[0].Resources) != 3 {
				t.Errorf("%s: skills/list %+v", c.era, page)
			}
			// The servers give no caching hints (2025 servers): nothing
			// may be kept; the prefixes make the listing this
			// configuration's.
			if page.TTLMs == nil || *page.TTLMs != 0 || page.CacheScope != "private" || (c.s == nil) != (page.ResultType == "complete") {
				t.Errorf("%s: skills/list caching: %+v", c.era, page)
			}
		}
		var got struct {
			Skill struct {
				URI         string
				Frontmatter map[string]string
			}
			ResultType string
			TTLMs      *int `json:"ttlMs"`
			CacheScope string
		}
		c.result(c.call("skills/get", `{"uri":"skill://acme/refunds/SKILL.md"}`), &got)
		if got.Skill.URI != "skill://acme/refunds/SKILL.md" || !strings.HasSuffix(got.Skill.Frontmatter["description"], " b") {
			t.Errorf("%s: skills/get of b's skill: %+v", c.era, got)
		}
		if c.s == nil && (got.ResultType != "complete" || got.TTLMs == nil || got.CacheScope == "") {
			t.Errorf("%s: skills/get of a 2025 server's skill lacks what 2026-07-28 caches by: %+v", c.era, got)
		}
		c.result(c.call("skills/get", `{"uri":"skill://shared/SKILL.md"}`), &got)
		if !strings.HasSuffix(got.Skill.Frontmatter["description"], " a") {
			t.Errorf("%s: skills/get of the shared skill: %+v, want a's", c.era, got)
		}
		var dir struct {
			Resources []struct{ URI, MimeType string }
		}
		c.result(c.call("resources/directory/read", `{"uri":"skill://acme/refunds"}`), &dir)
		if len(dir.Resources) != 3 || dir.Resources[2].URI != "skill://acme/refunds/scripts" || dir.Resources[2].MimeType != "inode/directory" {
			t.Errorf("%s: directory of b's skill: %+v", c.era, dir)
		}
		c.result(c.call("resources/directory/read", `{"uri":"skill://pdf-processing/references"}`), &dir)
		if len(dir.Resources) != 1 || dir.Resources[0].URI != "skill://pdf-processing/references/FORMS.md" {
			t.Errorf("%s: a subdirectory of a's skill: %+v", c.era, dir)
		}
		if got := read("skill://pdf-processing/references/FORMS.md"); !strings.Contains(got, "from a") {
			t.Errorf("%s: a's FORMS.md read %q", c.era, got)
		}
		// What no server serves: nobody's on /mcp, whose servers each
		// might serve a skill they do not list.
		c.refused("skills/get of no server's skill", c.call("skills/get", `{"uri":"skill://nope/SKILL.md"}`), rpc.InvalidParams, "is in no skill of the servers of /mcp")
		c.refused("a directory read of no server's skill", c.call("resources/directory/read", `{"uri":"skill://nope"}`), rpc.InvalidParams, "is in no skill of the servers of /mcp")
		c.refused("a file of no server's skill", c.call("resources/read", `{"uri":"skill://nope/references/FORMS.md"}`), -32002, "Resource not found")
		// A file of a served skill that its server does not have: the
		// server says so.
		c.refused("a file b's skill lacks", c.call("resources/read", `{"uri":"skill://acme/refunds/nothing.md"}`), -32002, "Resource not found")
		c.refused("a directory read of b's SKILL.md", c.call("resources/directory/read", `{"uri":"skill://acme/refunds/SKILL.md"}`), rpc.InvalidParams, "Not a directory")
		if i == 0 {
			if got := w.gw.Collisions(); !slices.ContainsFunc(got, func(s string) bool {
				return strings.HasPrefix(s, `skills "skill://shared"`) && strings.Contains(s, "served by a")
			}) {
				t.Errorf("collisions %v, want the shared skill's", got)
			}
		}
	}
	if n := strings.Count(logs.String(), "skill two servers serve"); n != 1 {
		t.Errorf("%d warnings of the shared skill, want 1:\n%s", n, logs.String())
	}
	got := methodsOf(t, plain)
	if !slices.Contains(got, "initialize") || slices.Contains(got, "skills/list") {
		t.Errorf("the server without skills was sent %v", got)
	}
	for server, tag := range map[string]string{"a": "a", "b": "b"} {
		own := eraClients(t, w.gw.Single(server))[0]
		var r struct {
			Skill struct{ Frontmatter map[string]string }
		}
		own.result(own.call("skills/get", `{"uri":"skill://shared/SKILL.md"}`), &r)
		if !strings.HasSuffix(r.Skill.Frontmatter["description"], " "+tag) {
			t.Errorf("/servers/%s/mcp: the shared skill is %+v", server, r)
		}
	}
}

// Requests /mcp cannot serve get a JSON-RPC error that says why: params
// that are not an object, a cursor that is not a string or not one of
// mcpvisor's, a skills/get or a directory read that names no uri. With a
// page size, skills/list pages its whole listing with cursors of its own.
func TestSkillsListRefusesAndPages(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, `{
		"a":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"a","FIXTURE_SKILLS":"pdf-processing,one,two"}},
		"b":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"b","FIXTURE_SKILLS":"acme/refunds"}}}`)
	for _, c := range eraClients(t, w.gw.Aggregate()) {
		if c.s != nil {
			c.refused("params [1]", c.call("skills/list", `[1]`), rpc.InvalidParams, "params must be an object")
			c.refused("params \"x\"", c.call("skills/list", `"x"`), rpc.InvalidParams, "params must be an object")
			c.refused("skills/get params \"x\"", c.call("skills/get", `"x"`), rpc.InvalidParams, "params.uri (a string) is required")
		}
		c.refused("cursor 5", c.call("skills/list", `{"cursor":5}`), rpc.InvalidParams, "cursor must be a string")
		c.refused("a cursor of the server's", c.call("skills/list", `{"cursor":"skills-page-1"}`), rpc.InvalidParams, "invalid cursor")
		c.refused("skills/get {}", c.call("skills/get", `{}`), rpc.InvalidParams, "params.uri (a string) is required")
		c.refused("skills/get uri 5", c.call("skills/get", `{"uri":5}`), rpc.InvalidParams, "params.uri (a string) is required")
		c.refused("directory read {}", c.call("resources/directory/read", `{}`), rpc.InvalidParams, "params.uri (a string) is required")
		// null params are none.
		if c.s != nil {
			var page skillsPage
			c.result(c.call("skills/list", `null`), &page)
			if len(page.Skills) != 4 {
				t.Errorf("skills/list with null params: %v", page.uris())
			}
		}
	}
	w.gw.SetPageSize(3)
	for _, c := range eraClients(t, w.gw.Aggregate()) {
		var all []string
		cursor := ""
		for range 5 {
			params := `{}`
			if cursor != "" {
				params = `{"cursor":"` + cursor + `"}`
			}
			var page skillsPage
			c.result(c.call("skills/list", params), &page)
			all = append(all, page.uris()...)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		want := []string{"skill://pdf-processing/SKILL.md@a", "skill://one/SKILL.md@a", "skill://two/SKILL.md@a", "skill://acme/refunds/SKILL.md@b"}
		if !slices.Equal(all, want) {
			t.Errorf("%s: pages %v, want %v", c.era, all, want)
		}
		c.refused("a cursor not mcpvisor's", c.call("skills/list", `{"cursor":"skills-page-1"}`), rpc.InvalidParams, "invalid cursor")
	}
}

// One server declares the extension: a skill it does not list, and one it
// does not have, are still its to answer for (skills/get serves unlisted
// skills; its error is the extension's -32602). Its 2026-07-28 caching
// hints come through: skills/list's (the only server's) and skills/get's
// as it sent them. The capability follows the servers': directoryRead
// when a server of the extension declares it (a directory read of
// another's skill is refused on /mcp, and never reaches it); none without
// one.
func TestSkillsOfOneServer(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, `{
		"x":{"command":"$FIXTURE","prefix":"","args":["-modern-only"],"env":{"FIXTURE_TAG":"x","FIXTURE_SKILLS":"pdf-processing"}},
		"p":{"command":"$FIXTURE","prefix":""}}`)
	if l, m := capsOn(t, w); l != `{"directoryRead":true}` || m != l {
		t.Errorf("capability %s / %s, want directoryRead", l, m)
	}
	for _, c := range eraClients(t, w.gw.Aggregate()) {
		c.refused("skills/get of a skill x does not have", c.call("skills/get", `{"uri":"skill://mcp-conformance-nonexistent-skill-9f3a2b/SKILL.md"}`), rpc.InvalidParams, "Unknown skill")
		var page skillsPage
		c.result(c.call("skills/list", `{}`), &page)
		if len(page.Skills) != 1 || page.TTLMs == nil || *page.TTLMs != 30000 || page.CacheScope != "public" {
			t.Errorf("%s: skills/list %+v, want x's skill and caching", c.era, page)
		}
		var got struct {
			TTLMs      *int `json:"ttlMs"`
			CacheScope string
		}
		c.result(c.call("skills/get", `{"uri":"skill://pdf-processing/SKILL.md"}`), &got)
		if got.TTLMs == nil || *got.TTLMs != 30000 || got.CacheScope != "public" {
			t.Errorf("%s: skills/get %+v, want x's caching", c.era, got)
		}
	}

	mixed := newWorld(t, `{
		"a":{"command":"$FIXTURE","env":{"FIXTURE_SKILLS":"pdf-processing"}},
		"n":{"command":"$FIXTURE","env":{"FIXTURE_SKILLS":"other","FIXTURE_SKILLS_NO_DIRECTORY":"1"}}}`)
	if l, m := capsOn(t, mixed); l != `{"directoryRead":true}` || m != l {
		t.Errorf("capability of a server with directoryRead and one without: %s / %s, want directoryRead", l, m)
	}
	for _, c := range eraClients(t, mixed.gw.Aggregate()) {
		var listed skillsPage
		c.result(c.call("skills/list", `{}`), &listed)
		c.refused("a directory read of n's skill", c.call("resources/directory/read", `{"uri":"skill://other"}`), rpc.InvalidParams, "server n, whose skill skill://other is, does not offer directory reads")
		var dir struct{ Resources []struct{ URI string } }
		c.result(c.call("resources/directory/read", `{"uri":"skill://pdf-processing"}`), &dir)
		if len(dir.Resources) == 0 {
			t.Errorf("%s: a directory read of a's skill: %+v", c.era, dir)
		}
	}
	none := newWorld(t, `{"p":{"command":"$FIXTURE","env":{"FIXTURE_UI_URI":"ui://p/view.html"}}}`)
	if l, m := capsOn(t, none); l != "" || m != "" {
		t.Errorf("capability with no server of the extension: %s / %s, want none", l, m)
	}
	c := eraClients(t, none.gw.Aggregate())[0]
	c.refused("skills/list with no server of the extension", c.call("skills/list", `{}`), rpc.MethodNotFound, "declares the skills extension")
}

// A server that times out or is down when skills/list fans out is left
// out, the others answered, within the slow one's request timeout; with
// every server failing, the client is told why. The skills of a server
// that answers stay readable.
func TestSkillsListLeavesOutFailingServers(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, `{
		"a":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"a","FIXTURE_SKILLS":"pdf-processing"}},
		"d":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"d","FIXTURE_SKILLS":"down"}},
		"s":{"command":"$FIXTURE","requestTimeout":"700ms","env":{"FIXTURE_TAG":"s","FIXTURE_SKILLS":"slow"}}}`)
	clients := eraClients(t, w.gw.Aggregate())
	var page skillsPage
	clients[0].result(clients[0].call("skills/list", `{}`), &page)
	if len(page.Skills) != 3 {
		t.Fatalf("skills/list %v, want three servers' skills", page.uris())
	}
	// s stops reading its input; d is stopped.
	s := eraClients(t, w.gw.Single("s"))[0]
	s.result(s.call("tools/call", `{"name":"wedge","arguments":{}}`), &struct{}{})
	s.call("tools/call", `{"name":"echo","arguments":{"text":"the line it may still read"}}`)
	if _, err := w.fleet.Get("d").Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		start := time.Now()
		var page skillsPage
		c.result(c.call("skills/list", `{}`), &page)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: skills/list took %v", c.era, took)
		}
		if !slices.Equal(page.uris(), []string{"skill://pdf-processing/SKILL.md@a"}) {
			t.Errorf("%s: skills/list %v, want a's alone", c.era, page.uris())
		}
		var r struct{ Contents []struct{ Text string } }
		c.result(c.call("resources/read", `{"uri":"skill://pdf-processing/scripts/extract.py"}`), &r)
		if len(r.Contents) != 1 || !strings.Contains(r.Contents[0].Text, "from a") {
			t.Errorf("%s: a's script: %+v", c.era, r)
		}
	}
	if _, err := w.fleet.Get("a").Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c := clients[0]
	resp := w.gw.Aggregate().Handle(ctx, c.s, request(9, "skills/list", map[string]any{}), newRecorder())
	c.refused("skills/list with every server failing", resp, rpc.BackendUnavailable, "no server answered skills/list")
}

// A skill two servers list is the first one's in skills/list; when that
// server fails, the other's copy is listed, not neither.
func TestSharedSkillOfAFailedServerIsTheOthers(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, `{
		"a":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"a","FIXTURE_SKILLS":"shared"}},
		"b":{"command":"$FIXTURE","env":{"FIXTURE_TAG":"b","FIXTURE_SKILLS":"shared,bonly"}}}`)
	c := eraClients(t, w.gw.Aggregate())[1]
	var page skillsPage
	c.result(c.call("skills/list", `{}`), &page)
	if got := page.uris(); !slices.Equal(got, []string{"skill://shared/SKILL.md@a", "skill://bonly/SKILL.md@b"}) {
		t.Fatalf("skills/list: %v", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := w.fleet.Get("a").Stop(ctx); err != nil {
		t.Fatal(err)
	}
	page = skillsPage{}
	c.result(c.call("skills/list", `{}`), &page)
	if got := page.uris(); !slices.Equal(got, []string{"skill://bonly/SKILL.md@b", "skill://shared/SKILL.md@b"}) && !slices.Equal(got, []string{"skill://shared/SKILL.md@b", "skill://bonly/SKILL.md@b"}) {
		t.Errorf("skills/list with a stopped: %v, want b's two", got)
	}
}
