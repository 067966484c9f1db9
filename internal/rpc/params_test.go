package rpc

import (
	"encoding/json"
	"testing"
)

func TestProgressToken(t *testing.T) {
	tests := []struct{ params, want string }{
		{`{"name":"t","arguments":{"progressToken":"not this"},"_meta":{"progressToken":"abc"}}`, `"abc"`},
		{`{"progressToken":42,"progress":1,"total":10,"_meta":{"progressToken":"meta"}}`, `42`},
		{` { "_meta" : { "x" : 1 , "progressToken" : -7 } } `, `-7`},
		{`{"_meta":{}}`, ``},
		{`{"_meta":"x"}`, ``},
		{`{}`, ``},
		{`[1]`, ``},
		{`{"progressToken":1`, ``},
		{``, ``},
		// The key escaped: found by the scan, not by its bytes.
		{`{"_meta":{"progress\u0054oken":"esc"}}`, `"esc"`},
		{`{"\u0070rogressToken":5}`, `5`},
		// Escapes elsewhere, no token: only \u could spell the key.
		{`{"arguments":{"path":"C:\\x","text":"a\nb\"c"}}`, ``},
		{`{"arguments":{"text":"\u00e9"}}`, ``},
		// The key's bytes inside a string value only.
		{`{"arguments":{"text":"\"progressToken\""}}`, ``},
		{`{"arguments":{"text":"no token, no escape"}}`, ``},
	}
	for _, tt := range tests {
		if got := ProgressToken(json.RawMessage(tt.params)); string(got) != tt.want {
			t.Errorf("ProgressToken(%s) = %s, want %s", tt.params, got, tt.want)
		}
	}
}

func TestReplaceProgressToken(t *testing.T) {
	in := json.RawMessage(`{"name":"t","_meta":{"progressToken":"client-1","other":true},"arguments":{}}`)
	out, old := ReplaceProgressToken(in, json.RawMessage(`"b7"`))
	if string(old) != `"client-1"` || string(out) != `{"name":"t","_meta":{"progressToken":"b7","other":true},"arguments":{}}` {
		t.Fatalf("got %s, old %s", out, old)
	}
	if string(in) != `{"name":"t","_meta":{"progressToken":"client-1","other":true},"arguments":{}}` {
		t.Fatal("params modified")
	}
	note := json.RawMessage(`{"progressToken":"b7","progress":3}`)
	back, _ := ReplaceProgressToken(note, old)
	if string(back) != `{"progressToken":"client-1","progress":3}` {
		t.Fatalf("got %s", back)
	}
	none := json.RawMessage(`{"name":"t"}`)
	if out, old := ReplaceProgressToken(none, json.RawMessage(`1`)); string(out) != string(none) || old != nil {
		t.Fatalf("no token: got %s %s", out, old)
	}
}

func TestCancelledRequestID(t *testing.T) {
	for params, want := range map[string]string{
		`{"requestId":"r-1","reason":"user"}`: `"r-1"`,
		`{"reason":"x","requestId":12}`:       `12`,
		`{"reason":"x"}`:                      ``,
		`not json`:                            ``,
	} {
		if got := CancelledRequestID(json.RawMessage(params)); string(got) != want {
			t.Errorf("CancelledRequestID(%s) = %s, want %s", params, got, want)
		}
	}
}

func TestStringMemberAndReplaceMember(t *testing.T) {
	obj := json.RawMessage(`{"name":"files__read","arguments":{"name":"inner"},"x":[1,2]}`)
	if s, ok := StringMember(obj, "name"); !ok || s != "files__read" {
		t.Fatalf("StringMember = %q %v", s, ok)
	}
	if _, ok := StringMember(obj, "missing"); ok {
		t.Fatal("missing member found")
	}
	if _, ok := StringMember(json.RawMessage(`{"name":5}`), "name"); ok {
		t.Fatal("a number read as a string")
	}
	if s, ok := StringMember(json.RawMessage(`{"uri":"a\u002fb"}`), "uri"); !ok || s != "a/b" {
		t.Fatalf("escaped string: %q %v", s, ok)
	}
	out, ok := ReplaceMember(obj, "name", json.RawMessage(`"read"`))
	if !ok || string(out) != `{"name":"read","arguments":{"name":"inner"},"x":[1,2]}` {
		t.Fatalf("ReplaceMember = %s %v", out, ok)
	}
	if string(obj) != `{"name":"files__read","arguments":{"name":"inner"},"x":[1,2]}` {
		t.Fatal("ReplaceMember modified its input")
	}
	if _, ok := ReplaceMember(json.RawMessage(`{"a":1`), "a", json.RawMessage(`2`)); ok {
		t.Fatal("malformed object accepted")
	}
}

func TestMembersIntoAndString(t *testing.T) {
	var v [4]json.RawMessage
	if !MembersInto(v[:], []byte(`{"a":"x\u00e9","b":{"c":2},"a2":null,"d":1}`), "a", "b", "z", "c") {
		t.Fatal("a valid object refused")
	}
	if s, ok := String(v[0]); !ok || s != "xé" || string(v[1]) != `{"c":2}` || v[2] != nil || v[3] != nil {
		t.Fatalf("%q %q %v %v (a nested member is no top-level one)", v[0], v[1], v[2], v[3])
	}
	if _, ok := String(v[1]); ok {
		t.Fatal("an object read as a string")
	}
	if MembersInto(v[:1], []byte(`{"a":1`), "a") || v[0] != nil {
		t.Fatal("a member of an invalid object")
	}
}

func TestPrependAndSetMember(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, `{"a":1}`},
		{`null`, `{"a":1}`},
		{`{}`, `{"a":1}`},
		{"{ \n}", "{\"a\":1 \n}"},
		{`{"b":2}`, `{"a":1,"b":2}`},
		{`{"a":0,"b":2}`, `{"a":1,"b":2}`},
		{`[1]`, `[1]`},
	} {
		if got := string(SetMember([]byte(tc.in), "a", []byte("1"))); got != tc.want {
			t.Errorf("SetMember(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := string(PrependMembers([]byte(`{"x":1}`), []byte(`"a":1,"b":2`))); got != `{"a":1,"b":2,"x":1}` {
		t.Errorf("PrependMembers: %s", got)
	}
}

func TestDropMetaKeys(t *testing.T) {
	keys := []string{"io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/a"}
	for _, tc := range []struct{ in, want string }{
		// The keys go, the rest stay in their order.
		{`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7,"io.modelcontextprotocol/clientCapabilities":{"a":{}},"traceparent":"00-1"}}`,
			`{"name":"x","_meta":{"progressToken":7,"io.modelcontextprotocol/clientCapabilities":{"a":{}},"traceparent":"00-1"}}`},
		// Only such keys: _meta goes, with its comma, wherever it is.
		{`{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, `{"name":"x"}`},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}, "name":"x"}`, `{ "name":"x"}`},
		{`{"_meta":{"io.modelcontextprotocol/a":1,"io.modelcontextprotocol/protocolVersion":"x"}}`, `{}`},
		{`{"a":1 , "_meta":{"io.modelcontextprotocol/a":1} ,"b":2}`, `{"a":1  ,"b":2}`},
		// An escaped name is still the name it spells.
		{`{"_meta":{"io.modelcontextprotocol\/protocolVersion":"x","k":1}}`, `{"_meta":{"k":1}}`},
		// A name the key begins, or that begins with the key, is another.
		{`{"_meta":{"io.modelcontextprotocol/ab":1,"io.modelcontextprotocol/":2}}`, `{"_meta":{"io.modelcontextprotocol/ab":1,"io.modelcontextprotocol/":2}}`},
		// Nothing to drop, or nothing valid: params as they were.
		{`{"name":"x","_meta":{"progressToken":7}}`, `{"name":"x","_meta":{"progressToken":7}}`},
		{`{"name":"x"}`, `{"name":"x"}`},
		{`{"_meta":"io.modelcontextprotocol/a"}`, `{"_meta":"io.modelcontextprotocol/a"}`},
		{`{"_meta":{"io.modelcontextprotocol/a":1}`, `{"_meta":{"io.modelcontextprotocol/a":1}`},
		{`[1]`, `[1]`},
		{``, ``},
	} {
		in := json.RawMessage(tc.in)
		keep := append(json.RawMessage(nil), in...)
		got := DropMetaKeys(in, keys...)
		if string(got) != tc.want {
			t.Errorf("DropMetaKeys(%s) = %s, want %s", tc.in, got, tc.want)
		}
		if string(in) != string(keep) {
			t.Errorf("DropMetaKeys modified its input %s", tc.in)
		}
		if tc.want != "" && tc.want != "[1]" && tc.in != tc.want && !json.Valid(got) {
			t.Errorf("DropMetaKeys(%s) is not valid JSON: %s", tc.in, got)
		}
	}
}

func TestDropMembers(t *testing.T) {
	names := []string{"resultType", "ttlMs"}
	keys := []string{"io.modelcontextprotocol/serverInfo"}
	for _, tc := range []struct{ in, want string }{
		// Members and _meta keys go; the rest stay, in their order.
		{`{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s"},"k":1}}`,
			`{"content":[],"_meta":{"k":1}}`},
		// A _meta left empty goes whole, wherever it is.
		{`{"_meta":{"io.modelcontextprotocol/serverInfo":{}},"resultType":"complete","tools":[1]}`, `{"tools":[1]}`},
		{`{ "ttlMs" : 0 , "a" : 1 }`, `{"a" : 1}`},
		{`{"resultType":"complete"}`, `{}`},
		// An escaped name is still the name it spells; an escaped _meta too.
		{`{"result\u0054ype":"complete","\u005fmeta":{"io.modelcontextprotocol\/serverInfo":1,"x":2}}`, `{"\u005fmeta":{"x":2}}`},
		// Nested members of the same name are not top-level ones.
		{`{"structuredContent":{"resultType":"x","_meta":{"io.modelcontextprotocol/serverInfo":1}}}`,
			`{"structuredContent":{"resultType":"x","_meta":{"io.modelcontextprotocol/serverInfo":1}}}`},
		// Nothing to drop, or nothing valid: obj as it was.
		{`{"content":[]}`, `{"content":[]}`},
		{`{"_meta":"io.modelcontextprotocol/serverInfo"}`, `{"_meta":"io.modelcontextprotocol/serverInfo"}`},
		{`{"resultType":1`, `{"resultType":1`},
		{`{"resultType":1} x`, `{"resultType":1} x`},
		{`[1]`, `[1]`},
		{``, ``},
	} {
		in := json.RawMessage(tc.in)
		keep := append(json.RawMessage(nil), in...)
		got := DropMembers(in, names, keys)
		if string(got) != tc.want {
			t.Errorf("DropMembers(%s) = %s, want %s", tc.in, got, tc.want)
		}
		if string(in) != string(keep) {
			t.Errorf("DropMembers modified its input %s", tc.in)
		}
	}
}
