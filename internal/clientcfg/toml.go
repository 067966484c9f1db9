package clientcfg

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/mcpvisor/mcpvisor/internal/jsonc"
)

// Codex's config.toml is edited by splicing whole [mcp_servers.NAME]
// tables (and their sub-tables, [mcp_servers.NAME.env]): no Go TOML
// library edits a document keeping its comments, and go-toml's parser
// gives the byte offsets of table headers, enough to find where each
// table begins and ends. Every byte outside the tables changed is kept.

// span is a byte range [start, end).
type span struct{ start, end int }

// codexLayout is where each server's tables are in a config.toml.
type codexLayout struct {
	tables map[string][]span
	// other names servers written as dotted keys or inline tables, which
	// are not edited.
	other map[string]bool
}

func layoutCodex(data []byte) (*codexLayout, error) {
	type header struct {
		start   int // line start
		keys    []string
		lastKey int // offset of the table's last key line
	}
	var hs []header
	l := &codexLayout{tables: map[string][]span{}, other: map[string]bool{}}
	p := unstable.Parser{KeepComments: true}
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind == unstable.Comment {
			continue
		}
		var keys []string
		first := -1
		for it := e.Key(); it.Next(); {
			k := it.Node()
			if first < 0 {
				first = int(k.Raw.Offset)
			}
			keys = append(keys, string(k.Data))
		}
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			start := bytes.LastIndexByte(data[:first], '\n') + 1
			hs = append(hs, header{start: start, keys: keys, lastKey: start})
		case unstable.KeyValue:
			var table []string
			if len(hs) > 0 {
				hs[len(hs)-1].lastKey = first
				table = hs[len(hs)-1].keys
			}
			full := append(append([]string(nil), table...), keys...)
			if len(full) >= 2 && full[0] == "mcp_servers" && len(table) < 2 {
				l.other[full[1]] = true
			}
		}
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	for i, h := range hs {
		if len(h.keys) < 2 || h.keys[0] != "mcp_servers" {
			continue
		}
		end := len(data)
		if i+1 < len(hs) {
			end = hs[i+1].start
		}
		// Trailing blank and comment lines belong to what follows.
		for end > h.lastKey {
			ls := bytes.LastIndexByte(data[:max(end-1, 0)], '\n') + 1
			line := strings.TrimSpace(string(data[ls:end]))
			if ls <= h.lastKey || line != "" && !strings.HasPrefix(line, "#") {
				break
			}
			end = ls
		}
		l.tables[h.keys[1]] = append(l.tables[h.keys[1]], span{h.start, end})
	}
	return l, nil
}

// codexKey writes a TOML key: bare when it can be, else quoted.
func codexKey(k string) string {
	bare := k != ""
	for _, c := range k {
		if !(c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			bare = false
		}
	}
	if bare {
		return k
	}
	return tomlString(k)
}

// tomlString writes a TOML basic string (JSON's escapes are TOML's,
// but for \u escapes of non-ASCII, which TOML also has).
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// codexTable writes a [mcp_servers.NAME] table, with the client's own
// fields keep.
func codexTable(name, command string, args []string, enabled bool, keep []rawField) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[mcp_servers.%s]\ncommand = %s\nargs = [", codexKey(name), tomlString(command))
	for i, a := range args {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tomlString(a))
	}
	b.WriteString("]\n")
	if !enabled {
		b.WriteString("enabled = false\n")
	}
	for _, r := range keep {
		fmt.Fprintf(&b, "%s = %s\n", codexKey(r.Key), tomlValue(r.TOML))
	}
	return b.String()
}

// tomlValue writes a value go-toml decoded (inline, for tables).
func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case bool, int64:
		return fmt.Sprint(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case []any:
		var l []string
		for _, e := range v {
			l = append(l, tomlValue(e))
		}
		return "[" + strings.Join(l, ", ") + "]"
	case map[string]any:
		var l []string
		for _, k := range sortedKeys(v) {
			l = append(l, codexKey(k)+" = "+tomlValue(v[k]))
		}
		return "{ " + strings.Join(l, ", ") + " }"
	}
	return tomlString(fmt.Sprint(v))
}

// codexReplace replaces the tables of server name with text (appended at
// the end when it has none; removed when text is ""), and checks that the
// result still parses.
func codexReplace(data []byte, name, text string) ([]byte, error) {
	l, err := layoutCodex(data)
	if err != nil {
		return nil, err
	}
	if l.other[name] {
		return nil, fmt.Errorf("mcp_servers.%s is written as dotted keys or an inline table; mcpvisor edits only [mcp_servers.NAME] tables: rewrite it as one, or edit the file by hand", codexKey(name))
	}
	var out []byte
	eol := jsonc.LineEnding(data)
	text = jsonc.WithLineEnding(text, eol)
	blankBefore := func(b []byte) bool { return bytes.HasSuffix(b, []byte("\n\n")) || bytes.HasSuffix(b, []byte("\n\r\n")) }
	spans := l.tables[name]
	if len(spans) == 0 {
		if text == "" {
			return data, nil
		}
		out = bytes.Clone(data)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, eol...)
		}
		if len(out) > 0 {
			out = append(out, eol...)
		}
		out = append(out, text...)
	} else {
		last := 0
		for i, s := range spans {
			start, end := s.start, s.end
			if i > 0 || text == "" {
				// a removed table takes a blank line before it along
				if blankBefore(data[:start]) {
					start -= len(eol)
				} else if start == 0 && bytes.HasPrefix(data[end:], []byte(eol)) {
					end += len(eol)
				}
			}
			out = append(out, data[last:start]...)
			if i == 0 {
				out = append(out, text...)
			}
			last = end
		}
		out = append(out, data[last:]...)
	}
	if _, err := readCodex(out); err != nil {
		return nil, fmt.Errorf("an edit of config.toml produced an invalid file (%v)", err)
	}
	return out, nil
}
