package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Custom headers from tool parameters (2026-07-28, basic/transports/
// streamable-http, "Custom Headers from Tool Parameters"): a tool's
// inputSchema may annotate parameters with x-mcp-header; a client over
// Streamable HTTP mirrors their values into Mcp-Param-{Name} headers of
// each tools/call, and leaves out of tools/list every tool whose
// annotations break the rules (with a warning). mcpvisor is that client
// for its modern remote servers: it learns the annotations from the
// tools/list answers that pass through the connection.

// mcpHeaderKey marks an annotated schema.
var mcpHeaderKey = []byte(`"x-mcp-header"`)

// maxAnnotatedTools bounds the tools whose annotations a connection
// keeps (a server listing more has the rest's headers left out).
const maxAnnotatedTools = 10_000

// paramAnno is one valid x-mcp-header annotation: the header's name and
// the chain of properties that leads to the parameter.
type paramAnno struct {
	name string
	path []string
}

// toolHeaders is a connection's record of its server's annotated tools.
type toolHeaders struct {
	mu     sync.Mutex
	byTool map[string][]paramAnno
}

// learn reads a tools/list result: it records the annotations of its
// tools, and returns the result without the tools whose annotations are
// invalid (nil: keep it as it is), with each rejection's reason.
func (th *toolHeaders) learn(result json.RawMessage) (json.RawMessage, []string) {
	if !bytes.Contains(result, mcpHeaderKey) {
		return nil, nil
	}
	var tools []json.RawMessage
	if json.Unmarshal(rpc.Member(result, "tools"), &tools) != nil {
		return nil, nil
	}
	kept := tools[:0:0]
	var rejected []string
	th.mu.Lock()
	defer th.mu.Unlock()
	for _, t := range tools {
		name, _ := rpc.StringMember(t, "name")
		annos, err := annotations(rpc.Member(t, "inputSchema"))
		if err != nil {
			rejected = append(rejected, fmt.Sprintf("tool %q: %v", name, err))
			continue
		}
		kept = append(kept, t)
		if len(annos) == 0 {
			delete(th.byTool, name)
			continue
		}
		if th.byTool == nil {
			th.byTool = map[string][]paramAnno{}
		}
		if _, known := th.byTool[name]; known || len(th.byTool) < maxAnnotatedTools {
			th.byTool[name] = annos
		}
	}
	if len(rejected) == 0 {
		return nil, nil
	}
	return rpc.SetMember(result, "tools", mustMarshal(kept)), rejected
}

// set adds to h the Mcp-Param headers of a tools/call with params.
func (th *toolHeaders) set(h http.Header, params json.RawMessage) {
	name, _ := rpc.StringMember(params, "name")
	th.mu.Lock()
	annos := th.byTool[name]
	th.mu.Unlock()
	if len(annos) == 0 {
		return
	}
	args := rpc.Member(params, "arguments")
	for _, a := range annos {
		v := args
		for _, k := range a.path {
			v = rpc.Member(v, k)
		}
		if text, ok := headerText(v); ok {
			h.Set("Mcp-Param-"+a.name, headerValue(text))
		}
	}
}

// headerText is the header text of a parameter's value: a string as it
// is, an integer in decimal, a boolean as true or false; ok is false for
// no value, null, or anything else.
func headerText(v json.RawMessage) (string, bool) {
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		return rpc.String(v)
	case 't', 'f':
		return string(v), string(v) == "true" || string(v) == "false"
	case 'n', '{', '[':
		return "", false
	}
	var n json.Number
	if json.Unmarshal(v, &n) != nil {
		return "", false
	}
	return n.String(), true
}

// annotations are the x-mcp-header annotations of a tool's inputSchema,
// or why the tool is invalid: an annotation that is not a token, is empty
// or repeats another (case-insensitively), is on a parameter that is not
// a string, integer or boolean, or is anywhere but on a property reached
// from the root by properties alone.
func annotations(schema json.RawMessage) ([]paramAnno, error) {
	if !bytes.Contains(schema, mcpHeaderKey) {
		return nil, nil
	}
	var root any
	if json.Unmarshal(schema, &root) != nil {
		return nil, errors.New("its inputSchema is not JSON")
	}
	var annos []paramAnno
	seen := map[string]bool{}
	var walk func(node map[string]any, path []string) error
	walk = func(node map[string]any, path []string) error {
		props, _ := node["properties"].(map[string]any)
		for key, sub := range props {
			obj, ok := sub.(map[string]any)
			if !ok {
				continue
			}
			p := append(append([]string(nil), path...), key)
			if h, has := obj["x-mcp-header"]; has {
				name, _ := h.(string)
				switch {
				case name == "":
					return fmt.Errorf("x-mcp-header of %s is empty or not a string", strings.Join(p, "."))
				case !isToken(name):
					return fmt.Errorf("x-mcp-header %q of %s is not an HTTP token", name, strings.Join(p, "."))
				case seen[strings.ToLower(name)]:
					return fmt.Errorf("x-mcp-header %q is used twice", name)
				}
				if t, _ := obj["type"].(string); t != "string" && t != "integer" && t != "boolean" {
					return fmt.Errorf("x-mcp-header %q is on %s, whose type is not string, integer or boolean", name, strings.Join(p, "."))
				}
				seen[strings.ToLower(name)] = true
				annos = append(annos, paramAnno{name: name, path: p})
			}
			if err := walk(obj, p); err != nil {
				return err
			}
		}
		return nil
	}
	obj, ok := root.(map[string]any)
	if !ok {
		return nil, errors.New("its inputSchema is not an object")
	}
	if err := walk(obj, nil); err != nil {
		return nil, err
	}
	if n := countAnnotations(root); n != len(annos) {
		return nil, errors.New("an x-mcp-header is on a schema not reached from the root by properties alone (items, oneOf, $ref, …)")
	}
	return annos, nil
}

// countAnnotations counts the x-mcp-header members anywhere in v, the
// names of a properties object aside (a parameter may be called that).
func countAnnotations(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			if k == "x-mcp-header" {
				n++
				continue
			}
			if props, ok := sub.(map[string]any); ok && k == "properties" {
				for _, p := range props {
					n += countAnnotations(p)
				}
				continue
			}
			n += countAnnotations(sub)
		}
	case []any:
		for _, sub := range v {
			n += countAnnotations(sub)
		}
	}
	return n
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2: 1*tchar).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}
