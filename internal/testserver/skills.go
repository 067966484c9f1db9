package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
)

// The skills extension (SEP-2640), which -skills serves.
const (
	skillsExtension = "io.modelcontextprotocol/skills"
	directoryMIME   = "inode/directory"
)

// skill is one skill -skills serves: its skill path (skill://<path>) and
// its files by their path inside it.
type skill struct {
	path        string
	name        string // the last segment of path: the frontmatter name
	description string
	files       map[string]string // "SKILL.md", "references/FORMS.md", ...
}

// root is the skill's directory, skill://<path>.
func (k *skill) root() string { return "skill://" + k.path }

// skillMD is the uri of the skill's SKILL.md.
func (k *skill) skillMD() string { return k.root() + "/SKILL.md" }

// skillsOf are the skills a -skills list names (comma-separated skill
// paths; the last segment of each is the skill's name). Each has the
// layout of a typical skill, a SKILL.md and a file in each of two
// subdirectories, whose text names FIXTURE_TAG: two servers' skills of
// one path differ, and so do their digests.
func skillsOf(list string) []*skill {
	tag := tagWord(os.Getenv("FIXTURE_TAG"))
	var out []*skill
	for _, p := range strings.Split(list, ",") {
		p = strings.Trim(strings.TrimSpace(p), "/")
		if p == "" {
			continue
		}
		name := path.Base(p)
		desc := "Extracts text and fills forms in PDF documents, served by " + tag
		out = append(out, &skill{path: p, name: name, description: desc, files: map[string]string{
			"SKILL.md": "---\nname: " + name + "\ndescription: " + desc + "\n---\n\n# " + name + "\n\n" +
				"Skill body of " + tag + ". Fill a form as [FORMS.md](references/FORMS.md) says; extract text with scripts/extract.py.\n",
			"references/FORMS.md": "# Forms\n\nHow to fill a form, from " + tag + ".\n",
			"scripts/extract.py":  "print(\"extract, from " + tag + "\")\n",
		}})
	}
	return out
}

// tagWord is tag as a plain YAML scalar can carry it: letters, digits,
// '-', '_' and '.' kept, anything else a '-'; "mcp-fixture" when empty.
func tagWord(tag string) string {
	if tag == "" {
		return ServerName
	}
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, tag)
}

// frontmatter is the skill's SKILL.md frontmatter, as JSON.
func (k *skill) frontmatter() map[string]any {
	return map[string]any{"name": k.name, "description": k.description}
}

// entry is the skill's entry in skills/list and skills/get: every file,
// SKILL.md first, with its digest and size.
func (k *skill) entry() map[string]any {
	names := make([]string, 0, len(k.files))
	for name := range k.files {
		if name != "SKILL.md" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	resources := []any{}
	for _, name := range append([]string{"SKILL.md"}, names...) {
		body := k.files[name]
		sum := sha256.Sum256([]byte(body))
		resources = append(resources, map[string]any{"uri": k.root() + "/" + name, "digest": "sha256:" + hex.EncodeToString(sum[:]), "size": len(body)})
	}
	return map[string]any{"uri": k.skillMD(), "frontmatter": k.frontmatter(), "resources": resources}
}

// skillFile is the skill and file path uri names, if it names a file.
func (s *server) skillFile(uri string) (*skill, string, bool) {
	for _, k := range s.skills {
		if rest, ok := strings.CutPrefix(uri, k.root()+"/"); ok {
			if _, ok := k.files[rest]; ok {
				return k, rest, true
			}
		}
	}
	return nil, "", false
}

// skillDir is the skill uri names a directory of, and the directory's path
// inside it ("" for its root).
func (s *server) skillDir(uri string) (*skill, string, bool) {
	for _, k := range s.skills {
		if uri == k.root() {
			return k, "", true
		}
		rest, ok := strings.CutPrefix(uri, k.root()+"/")
		if !ok || rest == "" {
			continue
		}
		for name := range k.files {
			if strings.HasPrefix(name, rest+"/") {
				return k, rest, true
			}
		}
	}
	return nil, "", false
}

// mimeOf is the mimeType of a skill file.
func mimeOf(name string) string {
	switch path.Ext(name) {
	case ".md":
		return "text/markdown"
	case ".py":
		return "text/x-python"
	}
	return "text/plain"
}

// skillsCapability is the extension's settings the fixture declares.
func (s *server) skillsCapability() map[string]any {
	if s.cfg.skillsNoDir {
		return map[string]any{}
	}
	return map[string]any{"directoryRead": true}
}

// skillResources is resources/list with -skills: each skill's SKILL.md,
// named and described by its frontmatter.
func (s *server) skillResources() []any {
	out := []any{}
	for _, k := range s.skills {
		out = append(out, map[string]any{"uri": k.skillMD(), "name": k.name, "description": k.description, "mimeType": "text/markdown"})
	}
	return out
}

// skillsCached adds the caching members of the modern era to a skills
// result of a -modern-only fixture (SEP-2640: ListSkillsResult,
// GetSkillResult and ReadResourceDirectoryResult extend CacheableResult);
// a 2025 fixture sends none, as servers of the extension's first drafts
// do.
func (s *server) skillsCached(result map[string]any) any {
	if s.cfg.modernOnly {
		result["ttlMs"] = skillsTTL
		result["cacheScope"] = "public"
	}
	return s.modernResult("", result)
}

// skillsTTL is the ttlMs of a -modern-only fixture's skills results.
const skillsTTL = 30000

// skillsRequest answers a method of the skills extension, or reports
// false when method is none.
func (s *server) skillsRequest(m incoming) bool {
	switch m.Method {
	case "skills/list":
		s.skillsList(m)
	case "skills/get":
		uri, ok := uriParam(m.Params)
		if !ok {
			s.sendError(m.ID, codeInvalidParams, "Invalid params: skills/get takes {uri}")
			return true
		}
		for _, k := range s.skills {
			if k.skillMD() == uri {
				s.reply(m.ID, s.skillsCached(map[string]any{"skill": k.entry()}))
				return true
			}
		}
		s.sendError(m.ID, codeInvalidParams, "Unknown skill: "+uri)
	case "resources/directory/read":
		if s.cfg.skillsNoDir {
			return false
		}
		s.directoryRead(m)
	default:
		return false
	}
	return true
}

// skillsPageCursor names the page of skills/list that starts at skill i:
// one skill a page, so that a client (mcpvisor) has to follow the pages.
func skillsPageCursor(i int) string { return "skills-page-" + strconv.Itoa(i) }

func (s *server) skillsList(m incoming) {
	var p struct {
		Cursor *string `json:"cursor"`
	}
	if json.Unmarshal(orEmpty(m.Params), &p) != nil {
		s.sendError(m.ID, codeInvalidParams, "Invalid params: skills/list takes {cursor?}")
		return
	}
	from := 0
	if p.Cursor != nil {
		n, err := strconv.Atoi(strings.TrimPrefix(*p.Cursor, "skills-page-"))
		if err != nil || skillsPageCursor(n) != *p.Cursor || n < 1 || n >= len(s.skills) {
			s.sendError(m.ID, codeInvalidParams, "Invalid params: unknown cursor "+strconv.Quote(*p.Cursor))
			return
		}
		from = n
	}
	page := []any{}
	res := map[string]any{"skills": page}
	if from < len(s.skills) {
		res["skills"] = append(page, s.skills[from].entry())
		if from+1 < len(s.skills) {
			res["nextCursor"] = skillsPageCursor(from + 1)
		}
	}
	s.reply(m.ID, s.skillsCached(res))
}

// directoryRead answers resources/directory/read: the direct children of
// a skill directory, subdirectories with mimeType inode/directory; a file
// or an unknown uri is -32602.
func (s *server) directoryRead(m incoming) {
	var p struct {
		URI    *string `json:"uri"`
		Cursor *string `json:"cursor"`
	}
	if json.Unmarshal(orEmpty(m.Params), &p) != nil || p.URI == nil {
		s.sendError(m.ID, codeInvalidParams, "Invalid params: resources/directory/read takes {uri, cursor?}")
		return
	}
	if p.Cursor != nil {
		s.sendError(m.ID, codeInvalidParams, "Invalid params: unknown cursor "+strconv.Quote(*p.Cursor))
		return
	}
	k, dir, ok := s.skillDir(*p.URI)
	if !ok {
		s.sendError(m.ID, codeInvalidParams, "Not a directory: "+*p.URI)
		return
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	seen := map[string]bool{}
	var names []string
	for name := range k.files {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		child, _, sub := strings.Cut(rest, "/")
		if sub {
			child += "/"
		}
		if !seen[child] {
			seen[child] = true
			names = append(names, child)
		}
	}
	sort.Strings(names)
	children := []any{}
	for _, child := range names {
		if d, ok := strings.CutSuffix(child, "/"); ok {
			children = append(children, map[string]any{"uri": k.root() + "/" + prefix + d, "name": d, "mimeType": directoryMIME})
			continue
		}
		children = append(children, map[string]any{"uri": k.root() + "/" + prefix + child, "name": child, "mimeType": mimeOf(child)})
	}
	s.reply(m.ID, s.skillsCached(map[string]any{"resources": children}))
}

// readSkillFile answers resources/read of a skill file, or reports false
// when uri names none.
func (s *server) readSkillFile(m incoming, uri string) bool {
	k, name, ok := s.skillFile(uri)
	if !ok {
		return false
	}
	s.reply(m.ID, s.modernResult("resources/read", map[string]any{"contents": []any{
		map[string]any{"uri": uri, "mimeType": mimeOf(name), "text": k.files[name]},
	}}))
	return true
}

// uriParam is params' uri, when params is an object with a string uri.
func uriParam(params json.RawMessage) (string, bool) {
	var p struct {
		URI *string `json:"uri"`
	}
	if json.Unmarshal(orEmpty(params), &p) != nil || p.URI == nil {
		return "", false
	}
	return *p.URI, true
}

// addSkillsCaps declares, with -skills, resources (skill files are read
// with resources/read) and the extension.
func (s *server) addSkillsCaps(caps map[string]any) {
	if len(s.skills) == 0 {
		return
	}
	caps["resources"] = struct{}{}
	caps["extensions"] = map[string]any{skillsExtension: s.skillsCapability()}
}
