package policy

import (
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

func TestVisible(t *testing.T) {
	bob := (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "bob", Groups: []string{"dev"}}).Finish()
	p := mustCompile(t,
		allow("ops", `"ops" in identity.groups`),
		allow("dev-read", `"dev" in identity.groups && tool.startsWith("read_")`),
		allow("dev-gh", `"dev" in identity.groups && server == "github" && tool == "create_issue" && arguments.repo.startsWith("team-b/")`),
		allow("pub", `resource.startsWith("file:///pub/")`),
		allow("prompt", `prompt == "hello"`),
		deny("no-drop", `tool == "drop_db"`),
		deny("no-force", `tool == "push" && has(arguments.force) && arguments.force`),
		deny("broken", `server == "broken" && identity.claims.nope == 1`),
		deny("no-tmpl", `server == "notmpl" && method == "resources/read" && resource.startsWith("s3:")`),
	)
	cases := []struct {
		id                 *identity.Identity
		server, kind, name string
		want               bool
	}{
		{alice(), "github", KindTool, "anything", true},
		{alice(), "db", KindTool, "drop_db", false},        // deny is certain
		{alice(), "git", KindTool, "push", true},           // deny depends on arguments
		{alice(), "broken", KindTool, "x", false},          // deny fails whatever the arguments
		{bob, "github", KindTool, "read_file", true},       //
		{bob, "github", KindTool, "write_file", false},     // no allow rule can match
		{bob, "github", KindTool, "create_issue", true},    // an allow depends on arguments
		{bob, "gitlab", KindTool, "create_issue", false},   // not on that server
		{bob, "fs", KindResource, "file:///pub/a", true},   //
		{bob, "fs", KindResource, "file:///priv/a", false}, //
		{bob, "fs", KindTemplate, "file:///{path}", true},  // some URI could be allowed
		{alice(), "notmpl", KindTemplate, "s3://{key}", true},
		{bob, "fs", KindPrompt, "hello", true},
		{bob, "fs", KindPrompt, "bye", false},
		{nil, "github", KindTool, "read_file", false},
		{alice(), "github", "widget", "x", false},
	}
	for _, c := range cases {
		if got := p.Visible(c.id, c.server, c.kind, c.name); got != c.want {
			t.Errorf("%s on %s, %s %q: visible %v, want %v", c.id.Name(), c.server, c.kind, c.name, got, c.want)
		}
		// The second answer comes from the cache and agrees.
		if got := p.Visible(c.id, c.server, c.kind, c.name); got != c.want {
			t.Errorf("%s on %s, %s %q: cached visible %v, want %v", c.id.Name(), c.server, c.kind, c.name, got, c.want)
		}
	}
	// A deny that hides every resource of a server hides its templates.
	q := mustCompile(t, deny("d", `server == "x" && method == "resources/read"`))
	if q.Visible(alice(), "x", KindTemplate, "a://{b}") || !q.Visible(alice(), "y", KindTemplate, "a://{b}") {
		t.Error("templates and a deny on resources/read")
	}
}

// TestVisibleAnswersNotShared: a reloaded Policy starts with no cached
// answers, and answers are per identity.
func TestVisibleAnswersNotShared(t *testing.T) {
	open := mustCompile(t, allow("a", `true`))
	closed := mustCompile(t, allow("a", `false`))
	if !open.Visible(alice(), "s", KindTool, "t") || closed.Visible(alice(), "s", KindTool, "t") {
		t.Error("a new policy answered from another's cache")
	}
	p := mustCompile(t, allow("a", `identity.sub == "alice"`))
	if !p.Visible(alice(), "s", KindTool, "t") || p.Visible(nil, "s", KindTool, "t") {
		t.Error("answers shared between identities")
	}
}

// MayUse: whether some request of a server could be allowed, whatever
// it names and carries.
func TestMayUse(t *testing.T) {
	p := mustCompile(t,
		allow("a", `server == "a"`),
		allow("b", `server == "b" && tool == "t" && arguments.x == 1`),
		allow("ops", `"ops" in identity.groups && method == "prompts/get"`),
		deny("no c", `server == "c"`),
		deny("no d for bob", `server == "d" && identity.sub == "bob"`),
		deny("no e writes", `server == "e" && tool.startsWith("write_")`),
	)
	ops := (&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: "olga", Groups: []string{"ops"}}).Finish()
	bob := (&identity.Identity{Kind: identity.Token, Issuer: "i", Subject: "bob"}).Finish()
	for _, c := range []struct {
		who    *identity.Identity
		server string
		want   bool
	}{
		{bob, "a", true}, {bob, "b", true}, {bob, "c", false}, {bob, "e", false}, {bob, "z", false},
		{ops, "z", true}, {ops, "c", false}, {ops, "d", true}, {bob, "d", false}, {ops, "e", true}, {nil, "a", true},
	} {
		for range 2 { // the second answer from the cache
			if got := p.MayUse(c.who, c.server); got != c.want {
				t.Errorf("%s on %s: %v, want %v", c.who.Name(), c.server, got, c.want)
			}
		}
	}
	if !(*Policy)(nil).MayUse(bob, "c") {
		t.Error("no policy: may not use")
	}
}
