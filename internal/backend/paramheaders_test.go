package backend

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The annotations the revision allows are read, with their property
// paths; every kind of invalid one makes its tool invalid, naming why.
func TestParamAnnotations(t *testing.T) {
	for _, c := range []struct {
		name, schema string
		want         []string // "Name=a.b"
		bad          string   // part of the error
	}{
		{name: "none", schema: `{"type":"object","properties":{"q":{"type":"string"}}}`},
		{name: "top level", schema: `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},"b":{"type":"boolean","x-mcp-header":"Flag"}}}`,
			want: []string{"Region=region", "N=n", "Flag=b"}},
		{name: "nested by properties", schema: `{"type":"object","properties":{"o":{"type":"object","properties":{"id":{"type":"string","x-mcp-header":"Id"}}}}}`,
			want: []string{"Id=o.id"}},
		{name: "a parameter called x-mcp-header", schema: `{"type":"object","properties":{"x-mcp-header":{"type":"string"}}}`},
		{name: "empty", schema: `{"properties":{"a":{"type":"string","x-mcp-header":""}}}`, bad: "empty"},
		{name: "not a string", schema: `{"properties":{"a":{"type":"string","x-mcp-header":5}}}`, bad: "empty or not a string"},
		{name: "space", schema: `{"properties":{"a":{"type":"string","x-mcp-header":"My Header"}}}`, bad: "not an HTTP token"},
		{name: "colon", schema: `{"properties":{"a":{"type":"string","x-mcp-header":"A:B"}}}`, bad: "not an HTTP token"},
		{name: "non-ASCII", schema: `{"properties":{"a":{"type":"string","x-mcp-header":"Régión"}}}`, bad: "not an HTTP token"},
		{name: "newline", schema: `{"properties":{"a":{"type":"string","x-mcp-header":"A\nB"}}}`, bad: "not an HTTP token"},
		{name: "duplicate in another case", schema: `{"properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"type":"string","x-mcp-header":"REGION"}}}`, bad: "used twice"},
		{name: "number", schema: `{"properties":{"a":{"type":"number","x-mcp-header":"A"}}}`, bad: "not string, integer or boolean"},
		{name: "object", schema: `{"properties":{"a":{"type":"object","x-mcp-header":"A"}}}`, bad: "not string, integer or boolean"},
		{name: "array", schema: `{"properties":{"a":{"type":"array","x-mcp-header":"A"}}}`, bad: "not string, integer or boolean"},
		{name: "under items", schema: `{"properties":{"a":{"type":"array","items":{"type":"object","properties":{"b":{"type":"string","x-mcp-header":"B"}}}}}}`, bad: "properties alone"},
		{name: "under oneOf", schema: `{"oneOf":[{"properties":{"b":{"type":"string","x-mcp-header":"B"}}}]}`, bad: "properties alone"},
		{name: "in $defs", schema: `{"$defs":{"d":{"type":"string","x-mcp-header":"D"}},"properties":{"a":{"$ref":"#/$defs/d"}}}`, bad: "properties alone"},
	} {
		annos, err := annotations(json.RawMessage(c.schema))
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%s: %v %v, want an error saying %q", c.name, annos, err, c.bad)
			}
			continue
		}
		var got []string
		for _, a := range annos {
			got = append(got, a.name+"="+strings.Join(a.path, "."))
		}
		if err != nil || !sameSet(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		if m[s]--; m[s] < 0 {
			return false
		}
	}
	return true
}

// A tools/list answer loses its invalid tools; a tools/call of a tool it
// annotated gets each value present as its header, encoded as the
// revision says; a value that is absent or null gets none.
func TestParamHeadersMirrored(t *testing.T) {
	var th toolHeaders
	list := `{"tools":[
		{"name":"ok","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},"b":{"type":"boolean","x-mcp-header":"B"},"o":{"type":"object","properties":{"id":{"type":"string","x-mcp-header":"Id"}}}}}},
		{"name":"bad","inputSchema":{"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}}},
		{"name":"plain","inputSchema":{"type":"object"}}]}`
	res, rejected := th.learn(json.RawMessage(list))
	if len(rejected) != 1 || !strings.Contains(rejected[0], `"bad"`) || strings.Contains(string(res), `"bad"`) || !strings.Contains(string(res), `"plain"`) {
		t.Fatalf("learn: %s %v", res, rejected)
	}
	if res, rejected := th.learn(json.RawMessage(`{"tools":[{"name":"plain","inputSchema":{}}]}`)); res != nil || rejected != nil {
		t.Errorf("a list with nothing to leave out was rewritten: %s %v", res, rejected)
	}
	for _, c := range []struct {
		args string
		want map[string]string
	}{
		{`{"region":"us-west1","n":-7,"b":true,"o":{"id":"x"}}`, map[string]string{"Region": "us-west1", "N": "-7", "B": "true", "Id": "x"}},
		{`{"region":"Hello, 世界"}`, map[string]string{"Region": "=?base64?SGVsbG8sIOS4lueVjA==?="}},
		{`{"region":" padded "}`, map[string]string{"Region": "=?base64?IHBhZGRlZCA=?="}},
		{`{"region":"line1\nline2"}`, map[string]string{"Region": "=?base64?bGluZTEKbGluZTI=?="}},
		{`{"region":"=?base64?literal?="}`, map[string]string{"Region": "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="}},
		{`{"region":null,"o":{}}`, map[string]string{}},
	} {
		h := http.Header{}
		th.set(h, json.RawMessage(`{"name":"ok","arguments":`+c.args+`}`))
		got := map[string]string{}
		for k, v := range h {
			got[strings.TrimPrefix(k, "Mcp-Param-")] = v[0]
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: headers %v, want %v", c.args, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: Mcp-Param-%s = %q, want %q", c.args, k, got[k], v)
			}
		}
	}
	h := http.Header{}
	th.set(h, json.RawMessage(`{"name":"plain","arguments":{"region":"x"}}`))
	if len(h) != 0 {
		t.Errorf("a tool with no annotations got headers %v", h)
	}
}
