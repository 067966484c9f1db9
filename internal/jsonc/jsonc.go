// Package jsonc reads JSON with comments and trailing commas (the JSONC
// that VS Code and Zed allow in their settings) and edits such a document
// by splicing bytes: every byte an edit does not touch is kept, comments
// and formatting included. Strict JSON is JSONC without the extras, so the
// package reads every client's JSON file.
//
// Parse builds a tree whose values carry their byte spans; SetMember and
// RemoveMember change one object member and return the new document,
// parsing it again first, so edits compose without offset bookkeeping.
// Standardize blanks comments and trailing commas with spaces, keeping every
// offset, for a strict JSON decoder.
package jsonc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Kind is the JSON type of a value.
type Kind uint8

// The kinds of value.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

// String names the kind as messages use it ("a string").
func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "a boolean"
	case Number:
		return "a number"
	case String:
		return "a string"
	case Array:
		return "an array"
	case Object:
		return "an object"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Value is one parsed value and where it is in the document.
type Value struct {
	Kind Kind
	// Start and End delimit the value's bytes: data[Start:End].
	Start, End int
	// Str is a String's decoded text, a Number's text as written.
	Str string
	// Bool is a Bool's value.
	Bool bool
	// Members are an Object's members in document order, duplicates
	// included.
	Members []Member
	// Elems are an Array's elements.
	Elems []*Value
}

// Member is one member of an object.
type Member struct {
	Key      string
	KeyStart int // offset of the key's opening quote
	Value    *Value
}

// Get returns the value of the last member named key of an object, or nil.
func (v *Value) Get(key string) *Value {
	if i := v.index(key); i >= 0 {
		return v.Members[i].Value
	}
	return nil
}

// index returns the index of the last member named key, or -1.
func (v *Value) index(key string) int {
	if v == nil || v.Kind != Object {
		return -1
	}
	for i := len(v.Members) - 1; i >= 0; i-- {
		if v.Members[i].Key == key {
			return i
		}
	}
	return -1
}

// SyntaxError is a document that is not JSONC, located by byte offset and
// by line and column (1-based; the column counts bytes).
type SyntaxError struct {
	Offset       int
	Line, Column int
	Msg          string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Msg) }

// LineCol turns a byte offset of data into a 1-based line and column.
func LineCol(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	return 1 + bytes.Count(before, []byte{'\n'}), off - bytes.LastIndexByte(before, '\n')
}

// Parse parses a JSONC document holding exactly one value (a UTF-8 byte
// order mark before it is allowed). Comments (// and /* */) and a comma
// after the last member or element are accepted; anything else that is not
// JSON is a *SyntaxError.
func Parse(data []byte) (*Value, error) {
	return (&parser{data: data}).parse()
}

// ParseComments is Parse that also returns where the document's comments
// are, in order: each is data[c[0]:c[1]], "//" to the end of its line
// (the newline excluded) or "/*" to "*/".
func ParseComments(data []byte) (*Value, [][2]int, error) {
	p := &parser{data: data, comments: [][2]int{}}
	v, err := p.parse()
	return v, p.comments, err
}

func (p *parser) parse() (*Value, error) {
	data := p.data
	if bytes.HasPrefix(data, []byte("\xEF\xBB\xBF")) {
		p.pos = 3
	}
	if err := p.space(); err != nil {
		return nil, err
	}
	if p.pos >= len(data) {
		return nil, p.errorf(p.pos, "the file is empty (want a JSON object)")
	}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if err := p.space(); err != nil {
		return nil, err
	}
	if p.pos < len(data) {
		return nil, p.errorf(p.pos, "unexpected %s after the top-level value", p.describe(p.pos))
	}
	return v, nil
}

// maxDepth bounds nesting, so a hostile file cannot exhaust the stack.
const maxDepth = 1000

type parser struct {
	data []byte
	pos  int
	// comments, when not nil, collects the comments' spans.
	comments [][2]int
}

func (p *parser) errorf(off int, format string, args ...any) *SyntaxError {
	line, col := LineCol(p.data, off)
	return &SyntaxError{Offset: off, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) describe(off int) string {
	if off >= len(p.data) {
		return "end of file"
	}
	return fmt.Sprintf("character %q", p.data[off])
}

// space skips whitespace and comments.
func (p *parser) space() error {
	for p.pos < len(p.data) {
		switch c := p.data[p.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.pos++
		case c == '/' && p.pos+1 < len(p.data) && p.data[p.pos+1] == '/':
			end := len(p.data)
			if i := bytes.IndexByte(p.data[p.pos:], '\n'); i >= 0 {
				end = p.pos + i
			}
			p.comment(end)
			p.pos = min(end+1, len(p.data))
		case c == '/' && p.pos+1 < len(p.data) && p.data[p.pos+1] == '*':
			i := bytes.Index(p.data[p.pos+2:], []byte("*/"))
			if i < 0 {
				return p.errorf(p.pos, "unterminated /* comment")
			}
			p.comment(p.pos + 2 + i + 2)
			p.pos += 2 + i + 2
		default:
			return nil
		}
	}
	return nil
}

// comment records a comment from p.pos to end, when comments are kept.
func (p *parser) comment(end int) {
	if p.comments != nil {
		p.comments = append(p.comments, [2]int{p.pos, end})
	}
}

func (p *parser) value(depth int) (*Value, error) {
	if depth > maxDepth {
		return nil, p.errorf(p.pos, "nested more than %d deep", maxDepth)
	}
	if p.pos >= len(p.data) {
		return nil, p.errorf(p.pos, "unexpected end of file (unclosed object, array or string?)")
	}
	start := p.pos
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &Value{Kind: String, Start: start, End: p.pos, Str: s}, nil
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	default:
		for _, lit := range []struct {
			text string
			v    Value
		}{{"true", Value{Kind: Bool, Bool: true}}, {"false", Value{Kind: Bool}}, {"null", Value{Kind: Null}}} {
			if bytes.HasPrefix(p.data[p.pos:], []byte(lit.text)) {
				v := lit.v
				v.Start, v.End = start, start+len(lit.text)
				p.pos = v.End
				if p.pos < len(p.data) && isWordByte(p.data[p.pos]) {
					return nil, p.errorf(p.pos, "invalid %s after %s", p.describe(p.pos), lit.text)
				}
				return &v, nil
			}
		}
		return nil, p.errorf(p.pos, "invalid %s looking for the beginning of a value", p.describe(p.pos))
	}
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func (p *parser) object(depth int) (*Value, error) {
	v := &Value{Kind: Object, Start: p.pos}
	p.pos++ // {
	for {
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			p.pos++
			v.End = p.pos
			return v, nil
		}
		if p.pos >= len(p.data) {
			return nil, p.errorf(p.pos, "unexpected end of file (unclosed object)")
		}
		if p.data[p.pos] != '"' {
			return nil, p.errorf(p.pos, "invalid %s looking for the beginning of an object key string", p.describe(p.pos))
		}
		keyStart := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf(p.pos, "invalid %s after object key %q (want ':')", p.describe(p.pos), key)
		}
		p.pos++
		if err := p.space(); err != nil {
			return nil, err
		}
		mv, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.Members = append(v.Members, Member{Key: key, KeyStart: keyStart, Value: mv})
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos < len(p.data) && p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			continue
		}
		return nil, p.errorf(p.pos, "invalid %s after object member %q (want ',' or '}')", p.describe(p.pos), key)
	}
}

func (p *parser) array(depth int) (*Value, error) {
	v := &Value{Kind: Array, Start: p.pos}
	p.pos++ // [
	for {
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			p.pos++
			v.End = p.pos
			return v, nil
		}
		e, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.Elems = append(v.Elems, e)
		if err := p.space(); err != nil {
			return nil, err
		}
		if p.pos < len(p.data) && p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			continue
		}
		return nil, p.errorf(p.pos, "invalid %s after array element (want ',' or ']')", p.describe(p.pos))
	}
}

// str reads a string at p.pos and decodes it with encoding/json, which
// knows every escape.
func (p *parser) str() (string, error) {
	start := p.pos
	i := start + 1
	for ; i < len(p.data); i++ {
		switch c := p.data[i]; {
		case c == '\\':
			i++
		case c == '"':
			var s string
			if err := json.Unmarshal(p.data[start:i+1], &s); err != nil {
				return "", p.errorf(start, "invalid string: %s", strings.TrimPrefix(err.Error(), "json: "))
			}
			p.pos = i + 1
			return s, nil
		case c < 0x20:
			return "", p.errorf(i, "invalid control character %q in string", c)
		}
	}
	return "", p.errorf(start, "unterminated string")
}

func (p *parser) number() (*Value, error) {
	start := p.pos
	i := start
	for i < len(p.data) && strings.IndexByte("+-.eE0123456789", p.data[i]) >= 0 {
		i++
	}
	text := p.data[start:i]
	if !json.Valid(text) || text[0] == '+' {
		return nil, p.errorf(start, "invalid number %q", text)
	}
	p.pos = i
	return &Value{Kind: Number, Start: start, End: i, Str: string(text)}, nil
}

// Standardize returns data with every comment and trailing comma replaced
// by spaces (newlines kept), so every offset still points where it did;
// data itself when it has none. It only lexes: strings are skipped whole,
// and an unterminated comment or string is left for the JSON decoder to
// report.
func Standardize(data []byte) []byte {
	var out []byte
	blank := func(from, to int) {
		if out == nil {
			out = bytes.Clone(data)
		}
		for i := from; i < to; i++ {
			if out[i] != '\n' && out[i] != '\r' {
				out[i] = ' '
			}
		}
	}
	// skip returns the offset of the first byte at or after i that is
	// neither whitespace nor a comment, blanking comments.
	skip := func(i int) int {
		for i < len(data) {
			switch c := data[i]; {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				i++
			case c == '/' && i+1 < len(data) && data[i+1] == '/':
				end := bytes.IndexByte(data[i:], '\n')
				if end < 0 {
					end = len(data) - i
				}
				blank(i, i+end)
				i += end
			case c == '/' && i+1 < len(data) && data[i+1] == '*':
				end := bytes.Index(data[i+2:], []byte("*/"))
				if end < 0 {
					return len(data) // unterminated: the decoder reports it; no comment can follow
				}
				blank(i, i+2+end+2)
				i += 2 + end + 2
			default:
				return i
			}
		}
		return i
	}
	for i := 0; i < len(data); {
		switch data[i] {
		case '"':
			i++
			for i < len(data) && data[i] != '"' {
				if data[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case ',':
			next := skip(i + 1)
			if next < len(data) && (data[next] == '}' || data[next] == ']') {
				blank(i, i+1)
			}
			i = next
		case '/':
			if next := skip(i); next != i {
				i = next
			} else {
				i++
			}
		default:
			i++
		}
	}
	if out == nil {
		return data
	}
	return out
}
