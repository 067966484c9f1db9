package redact

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/mcpvisor/mcpvisor/internal/jsonc"
)

// A client's file, or mcpvisor's config, holds its servers' secrets:
// Files shows it redacted by the rules inspect follows, and only on the
// screen: the files themselves keep every byte. Where a value is decides
// how it is shown:
//
//   - a value of env, headers or Codex's http_headers, and a scalar
//     whose own key names a secret (bearer_token, apiKey, password, …),
//     is secret by its place: Secret hides it whole but for the ${VAR}
//     references in it ("Bearer ${GITHUB_TOKEN}" shows as written);
//   - the elements of args are redacted together as a command line is
//     (Args: --api-key sk-…, --token=ghp_…, -e TOKEN=…);
//   - every other string (url, command, cwd, and whatever else the file
//     holds) as a free-standing value (Value: credentials in URLs, token
//     query parameters, token-like strings);
//   - a comment with a word that names or looks like a secret is shown
//     as "# [REDACTED]" (or // or /* */).
//
// Keys are shown as written.

// RedactionChanged is what a diff shows for a secret whose value differs
// from the one at the same place on its other side, where both would
// show alike: the user sees that it changed, not what it is.
const RedactionChanged = "[REDACTED, changed]"

// shown is a span of a file displayed otherwise than as written.
type shown struct {
	start, end int
	// path is the value's place in the file ("" for a comment), value
	// the value decoded and redacted its display: a secret that changed
	// is told by them.
	path            string
	value, redacted string
	// encode writes a displayed value as the file's syntax would.
	encode func(string) string
}

// Syntax is a configuration file's language.
type Syntax uint8

const (
	JSON Syntax = iota // JSON, or JSONC (comments, trailing commas)
	TOML
)

// Files returns a and b, two versions of a configuration file in syntax,
// as they are to be shown side by side (a diff), redacted as above: a
// secret of b whose value differs from a's at the same place, where both
// would show alike, shows as RedactionChanged. Each has as many lines as
// its version (a value or comment that spans lines keeps them, blank), so
// that lines found to differ in the versions are the ones to show. An
// error is a version that does not parse, which cannot be redacted: show
// neither.
func Files(a, b []byte, syntax Syntax) (ra, rb []byte, err error) {
	sa, err := shownOf(a, syntax)
	if err != nil {
		return nil, nil, err
	}
	sb, err := shownOf(b, syntax)
	if err != nil {
		return nil, nil, err
	}
	markChanged(sa, sb)
	return display(a, sa), display(b, sb), nil
}

// markChanged makes the secrets of b that differ from a's at the same
// place, and would show alike, show as RedactionChanged.
func markChanged(a, b []shown) {
	byPath := map[string]*shown{}
	for i := range a {
		if a[i].path != "" {
			byPath[a[i].path] = &a[i]
		}
	}
	for i := range b {
		s := &b[i]
		if o := byPath[s.path]; o != nil && o.value != s.value && o.redacted == s.redacted {
			s.redacted = strings.ReplaceAll(s.redacted, Redaction, RedactionChanged)
		}
	}
}

// display returns data with each span replaced by its display.
func display(data []byte, spans []shown) []byte {
	slices.SortFunc(spans, func(x, y shown) int { return x.start - y.start })
	var out bytes.Buffer
	last := 0
	for _, s := range spans {
		out.Write(data[last:s.start])
		out.WriteString(s.encode(s.redacted))
		// as many lines as the value took (a TOML multi-line string, a
		// /* */ comment): the lines after it keep their numbers
		out.WriteString(strings.Repeat("\n", bytes.Count(data[s.start:s.end], []byte("\n"))))
		last = s.end
	}
	out.Write(data[last:])
	return out.Bytes()
}

// shownOf returns the spans of data that are shown redacted.
func shownOf(data []byte, syntax Syntax) ([]shown, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	if syntax == TOML {
		return tomlShown(data)
	}
	return jsonShown(data)
}

// Where a value is, for redaction.
type place uint8

const (
	placeFree   place = iota // Value
	placeSecret              // Secret
)

// placeOf tells how the scalar at path (keys, "[i]" for an element) is
// shown: secret under env and headers and under a key that names a
// secret; free elsewhere (args are redacted as a whole: argsAt).
func placeOf(path []string) place {
	key := ""
	for i := len(path) - 1; i >= 0; i-- {
		if !strings.HasPrefix(path[i], "[") {
			key = path[i]
			if i > 0 && i == len(path)-1 {
				switch path[i-1] {
				case "env", "headers", "http_headers":
					return placeSecret
				}
			}
			break
		}
	}
	if key != "" && !strings.ContainsAny(key, `/\`) && SecretName(key) {
		return placeSecret
	}
	return placeFree
}

// argsAt reports whether the array at path is a command's arguments.
func argsAt(path []string) bool {
	return len(path) > 0 && path[len(path)-1] == "args"
}

// redactScalar is how a string (or a number: str is its text) at path
// is shown.
func redactScalar(path []string, str string, isString bool) string {
	if placeOf(path) == placeSecret {
		return Secret(str)
	}
	if !isString {
		return str
	}
	return Value(str)
}

// redactComment returns a comment's text (after its // # or /*) as
// shown: as written, or Redaction when a word of it names a secret or
// looks like one.
func redactComment(text string) string {
	words := strings.Fields(text)
	red := Args(words)
	for i, w := range words {
		if red[i] != w || SecretName(strings.Trim(w, ":=,;.\"'`()[]{}<>")) || Value(strings.Trim(w, ":=,;.\"'`()[]{}<>")) != strings.Trim(w, ":=,;.\"'`()[]{}<>") {
			return " " + Redaction
		}
	}
	return text
}

// jsonString writes a JSON string, which is also a TOML basic string
// (the escapes it writes are TOML's too).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// jsonShown walks a JSON(C) file.
func jsonShown(data []byte) ([]shown, error) {
	root, comments, err := jsonc.ParseComments(data)
	if err != nil {
		return nil, err
	}
	var out []shown
	add := func(v *jsonc.Value, path []string, red string) {
		if red != v.Str {
			out = append(out, shown{start: v.Start, end: v.End, path: strings.Join(path, "\x00"), value: v.Str, redacted: red, encode: jsonString})
		}
	}
	var walk func(v *jsonc.Value, path []string)
	walk = func(v *jsonc.Value, path []string) {
		switch v.Kind {
		case jsonc.Object:
			for _, m := range v.Members {
				walk(m.Value, append(slices.Clip(path), m.Key))
			}
		case jsonc.Array:
			var args []string
			if argsAt(path) {
				for _, e := range v.Elems {
					args = append(args, e.Str) // "" for what is not a string
				}
				args = Args(args)
			}
			for i, e := range v.Elems {
				p := append(slices.Clip(path), "["+strconv.Itoa(i)+"]")
				if args != nil && e.Kind == jsonc.String {
					add(e, p, args[i])
					continue
				}
				walk(e, p)
			}
		case jsonc.String:
			add(v, path, redactScalar(path, v.Str, true))
		case jsonc.Number:
			if red := redactScalar(path, v.Str, false); red != v.Str {
				add(v, path, red)
			}
		}
	}
	walk(root, nil)
	for _, c := range comments {
		start, end := c[0], c[1]
		text := string(data[start:end])
		if strings.HasPrefix(text, "/*") {
			out = appendComment(out, start, end, text[2:len(text)-2], func(s string) string { return "/*" + s + " */" })
			continue
		}
		text = strings.TrimSuffix(text, "\r") // a CRLF line's: kept
		out = appendComment(out, start, start+len(text), text[2:], func(s string) string { return "//" + s })
	}
	return out, nil
}

// appendComment adds the comment data[start:end] whose text is body when
// it is shown redacted.
func appendComment(out []shown, start, end int, body string, encode func(string) string) []shown {
	if red := redactComment(body); red != body {
		out = append(out, shown{start: start, end: end, redacted: red, encode: encode})
	}
	return out
}

// tomlShown walks a TOML file.
func tomlShown(data []byte) ([]shown, error) {
	p := unstable.Parser{KeepComments: true}
	p.Reset(data)
	var out []shown
	// strs are the spans of strings and keys: a # elsewhere starts a
	// comment.
	var strs [][2]int
	span := func(n *unstable.Node) (int, int) {
		return int(n.Raw.Offset), int(n.Raw.Offset + n.Raw.Length)
	}
	keysOf := func(it unstable.Iterator) []string {
		var keys []string
		for it.Next() {
			k := it.Node()
			start, end := span(k)
			strs = append(strs, [2]int{start, end})
			keys = append(keys, string(k.Data))
		}
		return keys
	}
	add := func(n *unstable.Node, path []string, red string) {
		if red != string(n.Data) {
			out = append(out, shown{start: int(n.Raw.Offset), end: int(n.Raw.Offset + n.Raw.Length), path: strings.Join(path, "\x00"), value: string(n.Data), redacted: red, encode: jsonString})
		}
	}
	var walk func(n *unstable.Node, path []string)
	walk = func(n *unstable.Node, path []string) {
		switch n.Kind {
		case unstable.String:
			start, end := span(n)
			strs = append(strs, [2]int{start, end})
			add(n, path, redactScalar(path, string(n.Data), true))
		case unstable.Integer, unstable.Float:
			add(n, path, redactScalar(path, string(n.Data), false))
		case unstable.InlineTable:
			for it := n.Children(); it.Next(); {
				if kv := it.Node(); kv.Kind == unstable.KeyValue {
					walk(kv.Value(), append(slices.Clip(path), keysOf(kv.Key())...))
				}
			}
		case unstable.Array:
			var elems []*unstable.Node
			for it := n.Children(); it.Next(); {
				if it.Node().Kind != unstable.Comment {
					elems = append(elems, it.Node())
				}
			}
			var args []string
			if argsAt(path) {
				for _, e := range elems {
					if e.Kind == unstable.String {
						args = append(args, string(e.Data))
					} else {
						args = append(args, "")
					}
				}
				args = Args(args)
			}
			for i, e := range elems {
				p := append(slices.Clip(path), "["+strconv.Itoa(i)+"]")
				if args != nil && e.Kind == unstable.String {
					start, end := span(e)
					strs = append(strs, [2]int{start, end})
					add(e, p, args[i])
					continue
				}
				walk(e, p)
			}
		}
	}
	var table []string
	arrayTables := map[string]int{}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			table = keysOf(e.Key())
		case unstable.ArrayTable:
			table = keysOf(e.Key())
			k := strings.Join(table, "\x00")
			table = append(table, "["+strconv.Itoa(arrayTables[k])+"]")
			arrayTables[k]++
		case unstable.KeyValue:
			walk(e.Value(), append(slices.Clip(table), keysOf(e.Key())...))
		}
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	// Comments: from a # outside strings and keys to the end of its line.
	slices.SortFunc(strs, func(x, y [2]int) int { return x[0] - y[0] })
	for i, s := 0, 0; i < len(data); i++ {
		for s < len(strs) && strs[s][1] <= i {
			s++
		}
		if s < len(strs) && strs[s][0] <= i {
			i = strs[s][1] - 1
			continue
		}
		if data[i] != '#' {
			continue
		}
		end := i + 1
		for end < len(data) && data[end] != '\n' && data[end] != '\r' {
			end++
		}
		out = appendComment(out, i, end, string(data[i+1:end]), func(s string) string { return "#" + s })
		i = end
	}
	return out, nil
}
