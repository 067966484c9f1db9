package jsonc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Field is one member of an Ordered object.
type Field struct {
	Key   string
	Value any
}

// Ordered is a JSON object whose members are written in this order.
type Ordered []Field

// MarshalJSON writes the members in order, HTML characters unescaped.
func (o Ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeTo(&b, f.Key); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := encodeTo(&b, f.Value); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func encodeTo(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// Raw is a value's text, written by Encode as it is (a member put back
// as a file had it, comments and layout included).
type Raw string

// Encode writes v as JSON for a document: indented with unit, each line
// after the first prefixed with prefix, or on one line when unit is "".
// HTML characters are not escaped. A Raw value is written as it is.
func Encode(v any, prefix, unit string) (string, error) {
	if r, ok := v.(Raw); ok {
		return string(r), nil
	}
	var b bytes.Buffer
	if err := encodeTo(&b, v); err != nil {
		return "", err
	}
	if unit == "" {
		return spaceCompact(b.Bytes()), nil
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), prefix, unit); err != nil {
		return "", err
	}
	return out.String(), nil
}

// spaceCompact puts a space after each ':' and ',' outside strings, as
// people write JSON on one line.
func spaceCompact(data []byte) string {
	var b strings.Builder
	inStr := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		b.WriteByte(c)
		switch {
		case inStr && c == '\\':
			i++
			b.WriteByte(data[i])
		case c == '"':
			inStr = !inStr
		case !inStr && (c == ':' || c == ','):
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// edit replaces data[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// LineEnding returns the line ending of a document: "\r\n" when its
// first line ends so, else "\n".
func LineEnding(data []byte) string {
	if i := bytes.IndexByte(data, '\n'); i > 0 && data[i-1] == '\r' {
		return "\r\n"
	}
	return "\n"
}

// WithLineEnding returns text with its line ends made eol.
func WithLineEnding(text, eol string) string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	if eol == "\n" {
		return text
	}
	return strings.ReplaceAll(text, "\n", eol)
}

// apply makes non-overlapping edits and checks that the result still
// parses: an edit that broke the document is a bug, reported as an error
// rather than written. Inserted lines end as the document's do (JSON's
// strings hold no raw line ends, so only line ends change).
func apply(data []byte, edits []edit) ([]byte, error) {
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	if eol := LineEnding(data); eol != "\n" {
		for i := range edits {
			edits[i].text = WithLineEnding(edits[i].text, eol)
		}
	}
	var out bytes.Buffer
	last := 0
	for _, e := range edits {
		if e.start < last {
			return nil, fmt.Errorf("jsonc: overlapping edits")
		}
		out.Write(data[last:e.start])
		out.WriteString(e.text)
		last = e.end
	}
	out.Write(data[last:])
	if _, err := Parse(out.Bytes()); err != nil {
		return nil, fmt.Errorf("jsonc: an edit produced an invalid document (%v)", err)
	}
	return out.Bytes(), nil
}

// lineStart returns the offset where off's line starts, and whether only
// spaces and tabs come before off on it.
func lineStart(data []byte, off int) (int, bool) {
	s := bytes.LastIndexByte(data[:off], '\n') + 1
	return s, len(bytes.Trim(data[s:off], " \t")) == 0
}

// lineIndent is the run of spaces and tabs that starts off's line.
func lineIndent(data []byte, off int) string {
	s, _ := lineStart(data, off)
	e := s
	for e < len(data) && (data[e] == ' ' || data[e] == '\t') {
		e++
	}
	return string(data[s:e])
}

func skipBlanks(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t') {
		i++
	}
	return i
}

// restOfLine returns, for a position after a value and its comma, the
// offset just past the end of its line (after the newline) when only
// blanks and a // comment remain on it; ok is false otherwise.
func restOfLine(data []byte, i int) (int, bool) {
	i = skipBlanks(data, i)
	if bytes.HasPrefix(data[i:], []byte("//")) {
		if n := bytes.IndexByte(data[i:], '\n'); n >= 0 {
			return i + n + 1, true
		}
		return len(data), true
	}
	switch {
	case i >= len(data):
		return i, true
	case data[i] == '\n':
		return i + 1, true
	case data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n':
		return i + 2, true
	}
	return i, false
}

// commaAfter returns the offset of the comma that follows a value ending
// at end (across whitespace and comments), or -1.
func commaAfter(data []byte, end int) int {
	p := &parser{data: data, pos: end}
	if p.space() == nil && p.pos < len(data) && data[p.pos] == ',' {
		return p.pos
	}
	return -1
}

// indentUnit guesses one level of indentation from the document's first
// member on a line of its own; two spaces when there is none.
func indentUnit(data []byte, root *Value) string {
	var find func(v *Value) string
	find = func(v *Value) string {
		if v.Kind != Object {
			return ""
		}
		for _, m := range v.Members {
			if _, own := lineStart(data, m.KeyStart); own {
				outer, inner := lineIndent(data, v.Start), lineIndent(data, m.KeyStart)
				if u, ok := strings.CutPrefix(inner, outer); ok && u != "" {
					return u
				}
			}
			if u := find(m.Value); u != "" {
				return u
			}
		}
		return ""
	}
	if u := find(root); u != "" {
		return u
	}
	return "  "
}

// lookup follows path from the root; it returns the object at the end,
// or the index of the first key missing and the object that lacks it.
func lookup(root *Value, path []string) (obj *Value, missing int, err error) {
	obj = root
	for i, k := range path {
		if obj.Kind != Object {
			return nil, 0, fmt.Errorf("%s is %s, not an object", strings.Join(path[:i], "."), obj.Kind)
		}
		next := obj.Get(k)
		if next == nil {
			return obj, i, nil
		}
		obj = next
	}
	if obj.Kind != Object {
		return nil, 0, fmt.Errorf("%s is %s, not an object", strings.Join(path, "."), obj.Kind)
	}
	return obj, -1, nil
}

// SetMember sets the member key of the object at path (object keys from
// the root) to value, encoded as JSON, and returns the new document. An
// existing member (the last of that name) has its value's bytes replaced;
// a new one goes after the object's last member, on a line of its own
// indented like its siblings (or on the object's line when the object is
// written on one line; an empty object is opened onto lines). Objects
// missing on the path are added. Every other byte is kept.
func SetMember(data []byte, path []string, key string, value any) ([]byte, error) {
	root, err := Parse(data)
	if err != nil {
		return nil, err
	}
	obj, missing, err := lookup(root, path)
	if err != nil {
		return nil, err
	}
	if missing >= 0 { // build the missing objects around value
		for i := len(path) - 1; i > missing; i-- {
			value = Ordered{{key, value}}
			key = path[i]
		}
		value, key = Ordered{{key, value}}, path[missing]
	}
	unit := indentUnit(data, root)
	oneLine := !bytes.Contains(data[obj.Start:obj.End], []byte{'\n'})
	if i := obj.index(key); i >= 0 {
		v := obj.Members[i].Value
		u := unit
		if oneLine {
			u = ""
		}
		text, err := Encode(value, lineIndent(data, obj.Members[i].KeyStart), u)
		if err != nil {
			return nil, err
		}
		return apply(data, []edit{{v.Start, v.End, text}})
	}
	name, _ := Encode(key, "", "")
	if len(obj.Members) == 0 {
		blank := len(bytes.Trim(data[obj.Start+1:obj.End-1], " \t\r\n")) == 0
		outer := lineIndent(data, obj.Start)
		text, err := Encode(value, outer+unit, unit)
		if err != nil {
			return nil, err
		}
		e := edit{obj.Start + 1, obj.Start + 1, "\n" + outer + unit + name + ": " + text}
		if blank {
			e.end, e.text = obj.End-1, e.text+"\n"+outer
		}
		return apply(data, []edit{e})
	}
	last := obj.Members[len(obj.Members)-1]
	var edits []edit
	anchor := last.Value.End
	if c := commaAfter(data, anchor); c >= 0 && len(bytes.Trim(data[anchor:c], " \t")) == 0 {
		anchor = c + 1
	} else {
		edits = append(edits, edit{anchor, anchor, ","})
	}
	if oneLine {
		text, err := Encode(value, "", "")
		if err != nil {
			return nil, err
		}
		edits = append(edits, edit{anchor, anchor, " " + name + ": " + text})
		return apply(data, edits)
	}
	indent := lineIndent(data, last.KeyStart)
	if _, own := lineStart(data, last.KeyStart); !own {
		indent = lineIndent(data, obj.Start) + unit
	}
	text, err := Encode(value, indent, unit)
	if err != nil {
		return nil, err
	}
	at := anchor
	if end, ok := restOfLine(data, anchor); ok && end > anchor {
		// after a comment ending the line, before its newline
		at = end
		for at > anchor && (data[at-1] == '\n' || data[at-1] == '\r') {
			at--
		}
	}
	edits = append(edits, edit{at, at, "\n" + indent + name + ": " + text})
	return apply(data, edits)
}

// RemoveMember removes every member named key from the object at path and
// returns the new document; the document as it was when there is none. A
// member on lines of its own goes with its lines (a comment at the end of
// its last line included); comments on lines before it stay. Every other
// byte is kept, but for the comma a removed last member leaves behind.
func RemoveMember(data []byte, path []string, key string) ([]byte, error) {
	for {
		root, err := Parse(data)
		if err != nil {
			return nil, err
		}
		obj, missing, err := lookup(root, path)
		if err != nil {
			return nil, err
		}
		i := obj.index(key)
		if missing >= 0 || i < 0 {
			return data, nil
		}
		if data, err = apply(data, removal(data, obj, i)); err != nil {
			return nil, err
		}
	}
}

// removal returns the edits that remove member i of obj.
func removal(data []byte, obj *Value, i int) []edit {
	ms := obj.Members
	m := ms[i]
	after := m.Value.End
	own := commaAfter(data, after)
	end := after
	if own >= 0 && len(bytes.Trim(data[after:own], " \t")) == 0 {
		end = own + 1
	} else {
		own = -1
	}
	anyComma := commaAfter(data, after) // maybe on a later line
	start, ownLine := lineStart(data, m.KeyStart)
	if lineEnd, clean := restOfLine(data, end); ownLine && clean && (anyComma < 0 || own >= 0) {
		edits := []edit{{start, lineEnd, ""}}
		if i == len(ms)-1 && own < 0 && i > 0 {
			if c := commaAfter(data, ms[i-1].Value.End); c >= 0 && c < start {
				edits = append(edits, edit{c, c + 1, ""})
			}
		}
		return edits
	}
	switch {
	case i > 0:
		return []edit{{ms[i-1].Value.End, after, ""}}
	case len(ms) > 1:
		return []edit{{m.KeyStart, ms[1].KeyStart, ""}}
	}
	if anyComma >= 0 {
		end = anyComma + 1
	}
	return []edit{{m.KeyStart, end, ""}}
}
