package rpc

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"unicode/utf8"
)

// This file is a small validating JSON scanner. It never builds values: it
// finds where a value ends, so the envelope decoder can take id, method,
// params and result as sub-slices of the line in one pass. It accepts
// exactly what json.Valid accepts (the fuzz test checks this), including
// invalid UTF-8 inside strings, which encoding/json also lets through.

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// syntaxError is a JSON syntax error at a byte offset.
type syntaxError struct {
	off int
	msg string
}

func errAt(off int, msg string) *syntaxError { return &syntaxError{off: off, msg: msg} }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(d []byte, i int) int {
	for i < len(d) && isSpace(d[i]) {
		i++
	}
	return i
}

// strPlain marks the bytes a string may hold without a closer look: not a
// quote, not a backslash, not a control character.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// special8 marks, with its top bit, each of the 8 bytes in x (read little
// endian) that is a quote, a backslash or below 0x20. A byte after a
// marked one may be marked too (a borrow carries), but the lowest mark is
// always exact: no borrow reaches it, so it is the first special byte, and
// a word with no special byte has no mark.
func special8(x uint64) uint64 {
	lt := (x - lsb*0x20) &^ x
	q := x ^ (lsb * '"')
	q = (q - lsb) &^ q
	b := x ^ (lsb * '\\')
	b = (b - lsb) &^ b
	return (lt | q | b) & msb
}

// skipString returns the index just past the string that starts at d[i]
// (which must be '"') and whether it holds an escape.
func skipString(d []byte, i int) (end int, escaped bool, err *syntaxError) {
	i++
	for {
		// A word at a time while 8 bytes are left; the first special
		// byte of the word that has one is found from its mark. Only the
		// last few bytes of the input go one at a time.
		for i+8 <= len(d) {
			if m := special8(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				goto special
			}
			i += 8
		}
		for i < len(d) && strPlain[d[i]] {
			i++
		}
	special:
		if i >= len(d) {
			return 0, false, errAt(i, "unexpected end of JSON input in string")
		}
		switch c := d[i]; c {
		case '"':
			return i + 1, escaped, nil
		case '\\':
			escaped = true
			if i+1 >= len(d) {
				return 0, false, errAt(i, "unexpected end of JSON input in string escape")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) {
					return 0, false, errAt(i, "unexpected end of JSON input in \\u escape")
				}
				for _, h := range d[i+2 : i+6] {
					if !isHex(h) {
						return 0, false, errAt(i, "invalid character in \\u escape")
					}
				}
				i += 6
			default:
				return 0, false, errAt(i+1, "invalid escape in string")
			}
		default:
			return 0, false, errAt(i, "invalid control character in string")
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// skipNumber returns the index just past the number that starts at d[i].
func skipNumber(d []byte, i int) (int, *syntaxError) {
	start := i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return 0, errAt(start, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return 0, errAt(i, "invalid number: digit expected after '.'")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return 0, errAt(i, "invalid number: digit expected in exponent")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	return i, nil
}

func skipLiteral(d []byte, i int, lit string) (int, *syntaxError) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return 0, errAt(i, "invalid literal, expected "+lit)
	}
	return i + len(lit), nil
}

// skipValue returns the index just past the JSON value that starts at d[i]
// (leading white space already skipped).
func skipValue(d []byte, i, depth int) (int, *syntaxError) {
	if i >= len(d) {
		return 0, errAt(i, "unexpected end of JSON input")
	}
	switch c := d[i]; {
	case c == '"':
		end, _, err := skipString(d, i)
		return end, err
	case c == '{':
		return skipObject(d, i, depth+1)
	case c == '[':
		return skipArray(d, i, depth+1)
	case c == '-' || isDigit(c):
		return skipNumber(d, i)
	case c == 't':
		return skipLiteral(d, i, "true")
	case c == 'f':
		return skipLiteral(d, i, "false")
	case c == 'n':
		return skipLiteral(d, i, "null")
	default:
		return 0, errAt(i, "invalid character "+quoteByte(c)+" looking for beginning of value")
	}
}

func skipObject(d []byte, i, depth int) (int, *syntaxError) {
	if depth > maxDepth {
		return 0, errAt(i, "exceeded max depth")
	}
	o := objectAt(d, i, depth)
	for o.next() {
	}
	return o.end, o.err
}

func skipArray(d []byte, i, depth int) (int, *syntaxError) {
	if depth > maxDepth {
		return 0, errAt(i, "exceeded max depth")
	}
	i = skipSpace(d, i+1)
	if i < len(d) && d[i] == ']' {
		return i + 1, nil
	}
	for {
		var err *syntaxError
		if i, err = skipValue(d, i, depth); err != nil {
			return 0, err
		}
		i = skipSpace(d, i)
		if i >= len(d) {
			return 0, errAt(i, "unexpected end of JSON input in array")
		}
		switch d[i] {
		case ',':
			i = skipSpace(d, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errAt(i, "invalid character "+quoteByte(d[i])+" after array element")
		}
	}
}

// object walks the members of a JSON object, validating it:
//
//	o := objectAt(d, i, depth)
//	for o.next() { use o.key, o.esc, o.start, o.end }
//	if o.err != nil { ... }  // else o.end is just past the '}'
type object struct {
	d          []byte
	i, depth   int
	key        []byte // the member's name without quotes, still escaped if esc
	kstart     int    // where the member's name begins (its opening quote)
	esc        bool
	more       bool // a member was read: a ',' or the '}' comes next
	start, end int  // the member's value; after the walk, end is just past the object
	err        *syntaxError
}

// objectAt starts a walk of the object at d[i], which must be '{'.
func objectAt(d []byte, i, depth int) object {
	o := object{d: d, i: i, depth: depth}
	if i >= len(d) || d[i] != '{' {
		o.err = errAt(i, "object expected")
		return o
	}
	o.i = skipSpace(d, i+1)
	if o.i < len(d) && d[o.i] == '}' {
		o.end, o.i = o.i+1, -1
	}
	return o
}

// next moves to the next member; false at the end of the object or at an
// error (o.err).
func (o *object) next() bool {
	d, i := o.d, o.i
	if i < 0 || o.err != nil {
		return false
	}
	if o.more {
		i = skipSpace(d, o.end)
		if i >= len(d) {
			return o.fail(i, "unexpected end of JSON input in object")
		}
		switch d[i] {
		case ',':
			i = skipSpace(d, i+1)
		case '}':
			o.end, o.i = i+1, -1
			return false
		default:
			return o.fail(i, "invalid character "+quoteByte(d[i])+" after object key:value pair")
		}
	}
	if i >= len(d) {
		return o.fail(i, "unexpected end of JSON input in object")
	}
	if d[i] != '"' {
		return o.fail(i, "invalid character "+quoteByte(d[i])+" looking for beginning of object key string")
	}
	kend, esc, err := skipString(d, i)
	if err != nil {
		o.err = err
		return false
	}
	o.key, o.esc, o.kstart = d[i+1:kend-1], esc, i
	i = skipSpace(d, kend)
	if i >= len(d) {
		return o.fail(i, "unexpected end of JSON input in object")
	}
	if d[i] != ':' {
		return o.fail(i, "invalid character "+quoteByte(d[i])+" after object key")
	}
	o.start = skipSpace(d, i+1)
	if o.end, err = skipValue(d, o.start, o.depth); err != nil {
		o.err = err
		return false
	}
	o.i, o.more = o.end, true
	return true
}

func (o *object) fail(i int, msg string) bool {
	o.err = errAt(i, msg)
	return false
}

// is reports whether the current member's name is name.
func (o *object) is(name string) bool {
	if !o.esc {
		return string(o.key) == name
	}
	k, ok := unquoteKey(o.key)
	return ok && string(k) == name
}

// value returns the current member's value.
func (o *object) value() span { return span{o.start, o.end} }

// field returns the value of the member called name of the object d
// (white space around it allowed), or nil if d is not a valid object or
// has no such member. A repeated name yields its last value, as in
// encoding/json. The result aliases d, with its capacity clipped.
func field(d []byte, name string) []byte {
	o := objectAt(d, skipSpace(d, 0), 1)
	var v span
	for o.next() {
		if o.is(name) {
			v = o.value()
		}
	}
	if o.err != nil || skipSpace(d, o.end) != len(d) {
		return nil
	}
	return v.of(d)
}

// unquote returns the string value of the JSON string literal q;
// escaped says whether q may hold escapes.
func unquote(q []byte, escaped bool) (string, bool) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return "", false
	}
	if !escaped && utf8.Valid(q[1:len(q)-1]) {
		return string(q[1 : len(q)-1]), true
	}
	// encoding/json unescapes and turns invalid UTF-8 into U+FFFD, as
	// encoding does: a string read here encodes back to the same value.
	var s string
	if json.Unmarshal(q, &s) != nil {
		return "", false
	}
	return s, true
}

func quoteByte(c byte) string {
	if c < utf8.RuneSelf && c >= 0x20 {
		return "'" + string(rune(c)) + "'"
	}
	const hex = "0123456789abcdef"
	return "0x" + string([]byte{hex[c>>4], hex[c&15]})
}
