package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Custom headers from tool parameters (2026-07-28, streamable-http:
// x-mcp-header). A tool's inputSchema may name parameters that a client
// mirrors into Mcp-Param-{Name} headers; a server that processes the body
// must check that each matches its value.

// mcpHeaderKey marks an annotated schema.
var mcpHeaderKey = []byte(`"x-mcp-header"`)

// toolSchemas is an endpoint that knows its tools' input schemas.
type toolSchemas interface {
	// toolSchema is the annotated inputSchema of the endpoint's tool
	// name, nil if it has none; an error if the tools could not be
	// learned within ctx and the servers' own bounds (their start and
	// request timeouts).
	toolSchema(ctx context.Context, name string) (json.RawMessage, error)
}

// paramHeader is one x-mcp-header annotation: the header name and the
// chain of properties that leads to the parameter.
type paramHeader struct {
	name string
	path []string
}

// paramHeaders lists the annotations of schema, reachable from its root by
// properties alone.
func paramHeaders(schema json.RawMessage, path []string, out []paramHeader) []paramHeader {
	var props map[string]json.RawMessage
	if json.Unmarshal(rpc.Member(schema, "properties"), &props) != nil {
		return out
	}
	for key, sub := range props {
		p := append(append([]string(nil), path...), key)
		if h, ok := rpc.StringMember(sub, "x-mcp-header"); ok && h != "" {
			out = append(out, paramHeader{name: h, path: p})
		}
		out = paramHeaders(sub, p, out)
	}
	return out
}

// paramHeaderMismatch checks a modern tools/call's Mcp-Param-* headers
// against its arguments, for the annotations of the tool's schema: each
// value present must come with its header, of valid characters, equal to
// it once decoded (numbers compared as numbers). A failure is a
// HeaderMismatch error naming the header.
func paramHeaderMismatch(r *http.Request, m *rpc.Message, schema json.RawMessage) *rpc.Message {
	if !bytes.Contains(schema, mcpHeaderKey) {
		return nil
	}
	args := rpc.Member(m.Params, "arguments")
	for _, ph := range paramHeaders(schema, nil, nil) {
		v := args
		for _, k := range ph.path {
			v = rpc.Member(v, k)
		}
		hname := "Mcp-Param-" + ph.name
		vals := r.Header.Values(hname)
		if len(v) == 0 || string(v) == "null" {
			continue // no value: no header expected
		}
		mismatch := func(msg string) *rpc.Message {
			return errorResponse(m.ID, rpc.HeaderMismatch, "Header mismatch: "+hname+" "+msg)
		}
		if len(vals) == 0 {
			return mismatch("is missing (the argument " + strings.Join(ph.path, ".") + " has a value)")
		}
		raw := vals[0]
		for i := 0; i < len(raw); i++ {
			if c := raw[i]; (c < 0x20 && c != '\t') || c > 0x7e {
				return mismatch("holds a character a header value may not (encode it as =?base64?...?=)")
			}
		}
		got, ok := decodeHeaderValue(raw)
		if !ok {
			return mismatch("is not valid Base64 between =?base64? and ?=")
		}
		if !paramMatches(v, got) {
			return mismatch("value " + strconv.Quote(got) + " does not match the body value " + string(v))
		}
	}
	return nil
}

// paramMatches reports whether the header text got stands for the JSON
// value v: a string itself, a number numerically, a boolean as true or
// false.
func paramMatches(v json.RawMessage, got string) bool {
	switch v[0] {
	case '"':
		s, ok := rpc.String(v)
		return ok && s == got
	case 't', 'f':
		return string(v) == got
	}
	want, err1 := strconv.ParseFloat(string(v), 64)
	have, err2 := strconv.ParseFloat(strings.TrimSpace(got), 64)
	return err1 == nil && err2 == nil && want == have
}
