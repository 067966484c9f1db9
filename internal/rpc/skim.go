package rpc

import (
	"bytes"
	"encoding/binary"
)

// skim reads the envelope of a line too long to keep, as the line reader
// skips it: fed the line's bytes in pieces, in order, it finds the
// top-level object's "id" member wherever it sits (the TypeScript SDK
// writes it last, after a result of any size) and whether the object has
// a "method" or "params" member (a request) or a "result" or "error" one
// (a response). It tracks only nesting depth and string and escape state,
// in a few bytes plus the member name and id being read, so a line of any
// length costs no memory; it is not a validator. Keys and strings nested
// in a member's value, an "id" among them, are skipped. Escaped names
// ("\u0069d") are understood. Once the id and the kind are known it stops
// looking (done), and the reader skips the rest at full speed.
//
// An id is taken if it is a string, a number or null of at most
// maxSkimID bytes (a longer one could be none that this side sent);
// the first top-level "id" wins. Bytes that cannot be JSON at the
// member level end the skim with what it found so far.
type skim struct {
	state   skimState
	esc     bool // in a string: the next byte is escaped
	depth   int  // in a member's object or array value: nesting depth
	isID    bool // the member being read is "id"
	long    bool // the name or id being read is over its bound
	nameEsc bool // the name being read has escapes
	name    []byte
	val     []byte // the id being read, as on the wire

	id                []byte // the id, once read whole
	request, response bool
}

type skimState uint8

const (
	skStart     skimState = iota // before the top-level '{'
	skName                       // before a member's name (or the closing '}')
	skNameStr                    // in a member's name
	skColon                      // after a member's name
	skValue                      // before a member's value
	skStr                        // in a string value, skipped
	skIDStr                      // in a string id, kept
	skScalar                     // in a number or literal value, skipped
	skIDScalar                   // in a number or null id, kept
	skNested                     // in an object or array value
	skNestedStr                  // in a string inside one
	skNext                       // after a member's value
	skEnd                        // the top-level object ended, or the line is not one
)

// maxSkimName bounds the member names compared; the longest that counts,
// escaped throughout, is 6 letters of 6 bytes each.
const (
	maxSkimName = 64
	maxSkimID   = headLen
)

func (s *skim) reset() {
	*s = skim{name: s.name[:0], val: s.val[:0]}
}

// done reports whether the skim has found all it looks for, or stopped.
func (s *skim) done() bool {
	return s.state == skEnd || s.id != nil && (s.request || s.response)
}

// nestedStop marks the bytes that matter inside a member's value.
var nestedStop = func() (t [256]bool) {
	for _, c := range []byte(`"{}[]`) {
		t[c] = true
	}
	return t
}()

// feed skims the next piece of the line.
func (s *skim) feed(d []byte) {
	for i := 0; i < len(d) && !s.done(); {
		switch s.state {
		case skNested, skNestedStr:
			i = s.nested(d, i)
		case skStr:
			var closed bool
			if i, closed = s.skipString(d, i); closed {
				s.state = skNext
			}
		case skNameStr, skIDStr:
			i = s.keepString(d, i)
		case skScalar, skIDScalar:
			for ; i < len(d); i++ {
				c := d[i]
				if isSpace(c) || c == ',' || c == '}' || c == ']' {
					s.endScalar()
					break
				}
				if s.state == skIDScalar {
					s.keep(c)
				}
			}
		default:
			c := d[i]
			i++
			if isSpace(c) {
				continue
			}
			s.token(c)
		}
	}
}

// nested skims d[i:] inside a member's object or array value, and returns
// where it stopped: at the end of d or just past the value. Short strings
// are stepped through here, longer ones left to skipString.
func (s *skim) nested(d []byte, i int) int {
	if s.state == skNestedStr {
		var closed bool
		if i, closed = s.skipString(d, i); !closed {
			return i
		}
		s.state = skNested
	}
	for i < len(d) {
		c := d[i]
		i++
		switch {
		case !nestedStop[c]:
		case c == '"':
			for end := min(i+32, len(d)); i < end && strPlain[d[i]]; i++ {
			}
			if i < len(d) && d[i] == '"' {
				i++
				continue
			}
			var closed bool
			if i, closed = s.skipString(d, i); !closed {
				s.state = skNestedStr
				return i
			}
		case c == '{' || c == '[':
			s.depth++
		default:
			if s.depth--; s.depth == 0 {
				s.state = skNext
				return i
			}
		}
	}
	return i
}

// token handles a byte between tokens at the member level.
func (s *skim) token(c byte) {
	next := skEnd
	switch {
	case s.state == skStart && c == '{':
		next = skName
	case s.state == skName && c == '"':
		s.name, s.nameEsc, s.long = s.name[:0], false, false
		next = skNameStr
	case s.state == skName && c == '}', s.state == skNext && c == '}':
		next = skEnd
	case s.state == skColon && c == ':':
		next = skValue
	case s.state == skNext && c == ',':
		next = skName
	case s.state == skValue:
		s.val, s.long = s.val[:0], false
		switch {
		case c == '{' || c == '[':
			s.depth = 1
			next = skNested
		case c == '"' && s.isID:
			s.keep(c)
			next = skIDStr
		case c == '"':
			next = skStr
		case s.isID && (c == '-' || isDigit(c) || c == 'n'):
			s.keep(c)
			next = skIDScalar
		default:
			next = skScalar
		}
	}
	s.state = next
}

// keep adds c to the name or id being read, within bounds.
func (s *skim) keep(c byte) {
	if s.state == skNameStr {
		if len(s.name) < maxSkimName {
			s.name = append(s.name, c)
		} else {
			s.long = true
		}
		return
	}
	if len(s.val) < maxSkimID {
		s.val = append(s.val, c)
	} else {
		s.long = true
	}
}

// keepString reads a member's name or a string id from d[i:] and returns
// where it stopped.
func (s *skim) keepString(d []byte, i int) int {
	for ; i < len(d); i++ {
		c := d[i]
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
			s.nameEsc = true
		case c == '"':
			if s.state == skNameStr {
				s.endName()
				return i + 1
			}
			s.keep(c)
			s.endID()
			s.state = skNext
			return i + 1
		}
		s.keep(c)
	}
	return i
}

func (s *skim) endName() {
	s.state = skColon
	name := s.name
	if s.long {
		name = nil
	} else if s.nameEsc {
		name, _ = unquoteKey(name)
	}
	s.isID = false
	switch string(name) {
	case "id":
		s.isID = true
	case "method", "params":
		s.request = true
	case "result", "error":
		s.response = true
	}
}

func (s *skim) endScalar() {
	if s.state == skIDScalar {
		s.endID()
	}
	s.state = skNext
}

func (s *skim) endID() {
	if !s.long && s.id == nil && len(s.val) > 0 {
		s.id = bytes.Clone(s.val)
	}
}

// skipString skips string bytes from d[i:]: it returns the index just
// past the closing quote and true, or len(d) and false if the string goes
// on in the next piece (s.esc tells whether that piece starts with an
// escaped byte). Short stretches go 8 bytes at a time; after a long
// stretch without escapes it finds the next quote at memchr speed and
// counts the backslashes before it (an odd run escapes it; no byte before
// i can extend the run, as d[i-1] is never an escaping backslash).
func (s *skim) skipString(d []byte, i int) (int, bool) {
	if s.esc {
		s.esc = false
		i++
	}
	clean := 0 // words in a row without a quote or backslash
	for i < len(d) {
		if clean >= 16 {
			q := bytes.IndexByte(d[i:], '"')
			if q < 0 {
				s.esc = backslashes(d[i:], len(d)-i)%2 == 1
				return len(d), false
			}
			q += i
			if backslashes(d[i:], q-i)%2 == 0 {
				return q + 1, true
			}
			i, clean = q+1, 0
			continue
		}
		if i+8 <= len(d) && special8(binary.LittleEndian.Uint64(d[i:])) == 0 {
			i += 8
			clean++
			continue
		}
		for i < len(d) && d[i] != '"' && d[i] != '\\' {
			i++
		}
		switch {
		case i == len(d):
		case d[i] == '"':
			return i + 1, true
		case i+2 > len(d):
			s.esc = true
			return len(d), false
		default:
			i += 2
		}
	}
	return len(d), false
}

// backslashes counts the backslashes just before d[end].
func backslashes(d []byte, end int) int {
	n := 0
	for end-n > 0 && d[end-n-1] == '\\' {
		n++
	}
	return n
}
