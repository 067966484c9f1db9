package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxArgumentDepth bounds the nesting of arguments a rule reads.
const maxArgumentDepth = 1000

var errTooDeep = fmt.Errorf("arguments nest deeper than %d", maxArgumentDepth)

// decodeObject decodes a JSON object into the values encoding/json would
// give (map[string]any, []any, string, float64, bool, nil), without its
// reflection: the arguments are decoded on the request path.
func decodeObject(b []byte) (map[string]any, error) {
	d := decoder{b: b}
	d.space()
	if d.peek() != '{' {
		return nil, errors.New("arguments are not a JSON object")
	}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, d.errorf("data after the object")
	}
	return v.(map[string]any), nil
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) errorf(format string, a ...any) error {
	return fmt.Errorf("arguments are not valid JSON: offset %d: %s", d.i, fmt.Sprintf(format, a...))
}

func (d *decoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (any, error) {
	if depth >= maxArgumentDepth {
		return nil, errTooDeep
	}
	d.space()
	switch c := d.peek(); {
	case c == '{':
		d.i++
		m := map[string]any{}
		d.space()
		if d.peek() == '}' {
			d.i++
			return m, nil
		}
		for {
			d.space()
			if d.peek() != '"' {
				return nil, d.errorf("want a key")
			}
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			d.space()
			if d.peek() != ':' {
				return nil, d.errorf("want ':'")
			}
			d.i++
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			d.space()
			switch d.peek() {
			case ',':
				d.i++
			case '}':
				d.i++
				return m, nil
			default:
				return nil, d.errorf("want ',' or '}'")
			}
		}
	case c == '[':
		d.i++
		l := []any{}
		d.space()
		if d.peek() == ']' {
			d.i++
			return l, nil
		}
		for {
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			d.space()
			switch d.peek() {
			case ',':
				d.i++
			case ']':
				d.i++
				return l, nil
			default:
				return nil, d.errorf("want ',' or ']'")
			}
		}
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.word("true")
	case c == 'f':
		return false, d.word("false")
	case c == 'n':
		return nil, d.word("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, d.errorf("unexpected input")
}

func (d *decoder) word(w string) error {
	if len(d.b)-d.i < len(w) || string(d.b[d.i:d.i+len(w)]) != w {
		return d.errorf("want %s", w)
	}
	d.i += len(w)
	return nil
}

// str decodes a string; one with escapes or non-ASCII bytes goes through
// encoding/json, for its exact handling of escapes and invalid UTF-8.
func (d *decoder) str() (string, error) {
	start := d.i
	d.i++
	simple := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if simple {
				return string(d.b[start+1 : d.i-1]), nil
			}
			var s string
			if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
				return "", d.errorf("%v", err)
			}
			return s, nil
		case c == '\\':
			simple = false
			d.i += 2
			continue
		case c < 0x20:
			return "", d.errorf("control character in a string")
		case c >= utf8.RuneSelf:
			simple = false
		}
		d.i++
	}
	return "", d.errorf("unterminated string")
}

func (d *decoder) number() (any, error) {
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.peek() == '-' {
		d.i++
	}
	if d.peek() == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, d.errorf("bad number")
	}
	if d.peek() == '.' {
		d.i++
		if digits() == 0 {
			return nil, d.errorf("bad number")
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errorf("bad number")
		}
	}
	f, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
	if err != nil {
		return nil, d.errorf("number %s out of range", d.b[start:d.i])
	}
	return f, nil
}
