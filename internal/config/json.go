package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// kind is the JSON type of a node.
type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// String names the kind the way error messages use it ("a string").
func (k kind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindArray:
		return "an array"
	case kindObject:
		return "an object"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// node is one decoded JSON value. Objects keep their keys in document order,
// duplicates included, so the walker can report duplicates and unknown keys
// with exact paths.
type node struct {
	kind kind
	b    bool
	num  json.Number
	str  string
	keys []string // object keys, parallel to vals
	vals []*node  // object values or array elements
}

// syntaxError is a JSON syntax error at a byte offset of the input.
type syntaxError struct {
	offset int64
	msg    string
}

// decodeTree decodes data, which must hold exactly one JSON value.
func decodeTree(data []byte) (*node, *syntaxError) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &syntaxError{0, "the file is empty (want a JSON object)"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := decodeValue(dec)
	if err != nil {
		return nil, toSyntaxError(err, dec, data)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, toSyntaxError(err, dec, data)
		}
		return nil, &syntaxError{dec.InputOffset(), fmt.Sprintf("unexpected %s after the top-level value", describeToken(tok))}
	}
	return n, nil
}

func decodeValue(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kindNull}, nil
	case bool:
		return &node{kind: kindBool, b: t}, nil
	case json.Number:
		return &node{kind: kindNumber, num: t}, nil
	case string:
		return &node{kind: kindString, str: t}, nil
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: kindObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok { // the decoder rejects non-string keys itself; be safe
					return nil, fmt.Errorf("object key is %s, not a string", describeToken(kt))
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, key)
				n.vals = append(n.vals, v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return n, nil
		case '[':
			n := &node{kind: kindArray}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				n.vals = append(n.vals, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return n, nil
		}
	}
	return nil, fmt.Errorf("unexpected %s", describeToken(tok))
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return strconv.Quote(t.String())
	case string:
		return "string " + strconv.Quote(t)
	case json.Number:
		return "number " + t.String()
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprint(tok)
}

// toSyntaxError locates a decoding error. The Decoder's offsets are not
// reliable for errors inside a scalar value (its scanner counts only the
// bytes it scanned itself), so the input is checked again with Unmarshal,
// whose scanner sees every byte: its Offset counts the bytes read up to and
// including the offending one.
func toSyntaxError(err error, dec *json.Decoder, data []byte) *syntaxError {
	var v any
	uerr := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.As(uerr, &se) && se.Offset >= int64(len(data)) && strings.Contains(se.Error(), "end of JSON input"):
		return &syntaxError{int64(len(data)), "unexpected end of file (unclosed object, array or string?)"}
	case errors.As(uerr, &se):
		return &syntaxError{max(se.Offset-1, 0), strings.TrimPrefix(se.Error(), "json: ")}
	}
	return &syntaxError{dec.InputOffset(), strings.TrimPrefix(err.Error(), "json: ")}
}
