package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// skillEntry is an entry of skills/list and skills/get.
type skillEntry struct {
	URI         string
	Frontmatter map[string]string
	Resources   []struct {
		URI, Digest string
		Size        int
	}
}

// With -skills the fixture declares resources and the skills extension,
// in both eras, and serves its skills: skills/list a skill a page, every
// file listed once with its digest and size, SKILL.md in resources/list
// named by its frontmatter, the files by resources/read, the directories
// by resources/directory/read; what names nothing it serves is -32602.
// FIXTURE_TAG is in the files, and so in the digests.
func TestSkills(t *testing.T) {
	t.Setenv("FIXTURE_TAG", "t1")
	methods := filepath.Join(t.TempDir(), "methods")
	p := startMain(t, "-skills", "pdf-processing, acme/billing/refunds", "-method-log", methods)
	p.send(initReq, "1", "2025-11-25")
	var init struct {
		Capabilities map[string]json.RawMessage
	}
	result(t, p.next(), "1", &init)
	if string(init.Capabilities["resources"]) != "{}" || string(init.Capabilities["extensions"]) != `{"io.modelcontextprotocol/skills":{"directoryRead":true}}` {
		t.Errorf("capabilities %s", mustString(init.Capabilities))
	}

	// Every page, following the cursors.
	var entries []skillEntry
	cursor := ""
	for i := 2; ; i++ {
		params := "{}"
		if cursor != "" {
			params = `{"cursor":"` + cursor + `"}`
		}
		p.send(`{"jsonrpc":"2.0","id":%d,"method":"skills/list","params":%s}`, i, params)
		var page struct {
			Skills     []skillEntry
			NextCursor string
			TTLMs      *int `json:"ttlMs"`
		}
		result(t, p.next(), itoa(i), &page)
		if len(page.Skills) != 1 || page.TTLMs != nil {
			t.Fatalf("page %d: %+v, want one skill and no ttlMs (a 2025 fixture)", i, page)
		}
		entries = append(entries, page.Skills...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(entries) != 2 || entries[0].URI != "skill://pdf-processing/SKILL.md" || entries[1].URI != "skill://acme/billing/refunds/SKILL.md" {
		t.Fatalf("skills %+v", entries)
	}
	e := entries[1]
	if e.Frontmatter["name"] != "refunds" || !strings.Contains(e.Frontmatter["description"], "t1") || len(e.Resources) != 3 || e.Resources[0].URI != e.URI {
		t.Errorf("entry %+v", e)
	}
	read := func(id, uri string) string {
		t.Helper()
		p.send(`{"jsonrpc":"2.0","id":%s,"method":"resources/read","params":{"uri":%q}}`, id, uri)
		var r struct {
			Contents []struct{ URI, MimeType, Text string }
		}
		result(t, p.next(), id, &r)
		if len(r.Contents) != 1 || r.Contents[0].URI != uri {
			t.Fatalf("read %s: %+v", uri, r)
		}
		return r.Contents[0].Text
	}
	for _, res := range e.Resources {
		body := read("10", res.URI)
		sum := sha256.Sum256([]byte(body))
		if res.Digest != "sha256:"+hex.EncodeToString(sum[:]) || res.Size != len(body) || !strings.Contains(body, "t1") {
			t.Errorf("%s: digest %s size %d, read %d bytes %q", res.URI, res.Digest, res.Size, len(body), body)
		}
	}
	if body := read("11", e.URI); !strings.HasPrefix(body, "---\nname: refunds\ndescription: "+e.Frontmatter["description"]+"\n---\n") {
		t.Errorf("SKILL.md %q", body)
	}

	p.send(`{"jsonrpc":"2.0","id":12,"method":"resources/list"}`)
	var list struct{ Resources []map[string]string }
	result(t, p.next(), "12", &list)
	if len(list.Resources) != 2 || list.Resources[1]["uri"] != e.URI || list.Resources[1]["name"] != "refunds" ||
		list.Resources[1]["description"] != e.Frontmatter["description"] || list.Resources[1]["mimeType"] != "text/markdown" {
		t.Errorf("resources/list %+v", list)
	}

	p.send(`{"jsonrpc":"2.0","id":13,"method":"skills/get","params":{"uri":"skill://pdf-processing/SKILL.md"}}`)
	var got struct{ Skill skillEntry }
	result(t, p.next(), "13", &got)
	if got.Skill.URI != entries[0].URI || len(got.Skill.Resources) != 3 {
		t.Errorf("skills/get %+v", got)
	}

	p.send(`{"jsonrpc":"2.0","id":14,"method":"resources/directory/read","params":{"uri":"skill://acme/billing/refunds"}}`)
	var dir struct{ Resources []map[string]string }
	result(t, p.next(), "14", &dir)
	var kids []string
	for _, r := range dir.Resources {
		kids = append(kids, r["uri"]+" "+r["mimeType"])
	}
	if want := []string{"skill://acme/billing/refunds/SKILL.md text/markdown", "skill://acme/billing/refunds/references inode/directory", "skill://acme/billing/refunds/scripts inode/directory"}; !slices.Equal(kids, want) {
		t.Errorf("directory: %v, want %v", kids, want)
	}
	p.send(`{"jsonrpc":"2.0","id":15,"method":"resources/directory/read","params":{"uri":"skill://acme/billing/refunds/scripts"}}`)
	result(t, p.next(), "15", &dir)
	if len(dir.Resources) != 1 || dir.Resources[0]["uri"] != "skill://acme/billing/refunds/scripts/extract.py" {
		t.Errorf("subdirectory: %+v", dir)
	}

	// -method-log has every request so far, a line each.
	if b, err := os.ReadFile(methods); err != nil || !strings.HasPrefix(string(b), "initialize\nskills/list\nskills/list\nresources/read\n") {
		t.Errorf("method log: %q %v", b, err)
	}
	for i, bad := range []string{
		`"skills/get","params":{"uri":"skill://nope/SKILL.md"}`,
		`"skills/get","params":{}`,
		`"skills/get","params":[1]`,
		`"skills/list","params":{"cursor":"skills-page-9"}`,
		`"resources/directory/read","params":{"uri":"skill://pdf-processing/SKILL.md"}`,
		`"resources/directory/read","params":{"uri":"skill://acme"}`,
		`"resources/directory/read","params":{"uri":"skill://pdf-processing/scripts","cursor":"x"}`,
		`"resources/directory/read","params":"x"`,
	} {
		id := itoa(20 + i)
		p.send(`{"jsonrpc":"2.0","id":%s,"method":%s}`, id, bad)
		if code := errorCode(t, p.next(), id); code != codeInvalidParams {
			t.Errorf("%s: code %d, want -32602", bad, code)
		}
	}
}

// Declared without directoryRead, the fixture serves no directory reads;
// -modern-only, it declares the extension in server/discover and its
// skills results carry ttlMs and cacheScope.
func TestSkillsVariants(t *testing.T) {
	t.Parallel()
	p := startMain(t, "-skills", "pdf-processing", "-skills-no-directory")
	p.send(initReq, "1", "2025-11-25")
	var init struct{ Capabilities map[string]json.RawMessage }
	result(t, p.next(), "1", &init)
	if string(init.Capabilities["extensions"]) != `{"io.modelcontextprotocol/skills":{}}` {
		t.Errorf("capabilities %s", mustString(init.Capabilities))
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"resources/directory/read","params":{"uri":"skill://pdf-processing"}}`)
	if code := errorCode(t, p.next(), "2"); code != codeMethodNotFound {
		t.Errorf("directory read without directoryRead: %d", code)
	}

	m := startMain(t, "-skills", "pdf-processing", "-modern-only")
	m.send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}`)
	var disc struct{ Capabilities map[string]json.RawMessage }
	result(t, m.next(), "1", &disc)
	if string(disc.Capabilities["extensions"]) != `{"io.modelcontextprotocol/skills":{"directoryRead":true}}` || disc.Capabilities["resources"] == nil {
		t.Errorf("discover capabilities %s", mustString(disc.Capabilities))
	}
	for i, req := range []string{
		`"skills/list","params":{}`,
		`"skills/get","params":{"uri":"skill://pdf-processing/SKILL.md"}`,
		`"resources/directory/read","params":{"uri":"skill://pdf-processing"}`,
	} {
		id := itoa(2 + i)
		m.send(`{"jsonrpc":"2.0","id":%s,"method":%s}`, id, req)
		var r struct {
			ResultType, CacheScope string
			TTLMs                  int `json:"ttlMs"`
		}
		result(t, m.next(), id, &r)
		if r.ResultType != "complete" || r.TTLMs != skillsTTL || r.CacheScope != "public" {
			t.Errorf("%s: %+v", req, r)
		}
	}
}

// -http serves the fixture over HTTP: a POST's request is answered in its
// body under the client's own id, two clients' same ids apart; a
// notification gets 202, anything but a POST 405.
func TestHTTP(t *testing.T) {
	t.Parallel()
	addr := StartHTTP(t, Build(t), "-skills", "pdf-processing")
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post(`{"jsonrpc":"2.0","id":"x","method":"skills/get","params":{"uri":"skill://pdf-processing/SKILL.md"}}`)
	if code != 200 || !strings.Contains(body, `"id":"x"`) || !strings.Contains(body, `"uri":"skill://pdf-processing/SKILL.md"`) {
		t.Errorf("skills/get: %d %s", code, body)
	}
	done := make(chan string, 2)
	for range 2 {
		go func() {
			_, body := post(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":100}}}`)
			done <- body
		}()
	}
	for range 2 {
		if body := <-done; !strings.Contains(body, `"id":7`) || !strings.Contains(body, `"result"`) {
			t.Errorf("concurrent call: %s", body)
		}
	}
	if code, _ := post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Errorf("notification: %d", code)
	}
	if code, body := post(`not json`); code != 200 || !strings.Contains(body, "-32700") {
		t.Errorf("garbage: %d %s", code, body)
	}
	resp, err := http.Get("http://" + addr + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	// A second fixture cannot take the address: it says so and exits 1.
	cmd := exec.Command(Build(t), "-http", addr)
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "-http") {
		t.Errorf("a taken address: %v %s", err, out)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
	} else {
		t.Errorf("the first fixture stopped listening: %v", err)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func mustString(v any) string { b, _ := json.Marshal(v); return string(b) }
