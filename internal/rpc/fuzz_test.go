package rpc

import (
	"bytes"
	"encoding/json"
	"testing"
)

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,2.5e3,"s\u00e9"]}}}`,
		`{"jsonrpc":"2.0","id":"a","result":{"content":[],"x-unknown":null}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":{"d":1}}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
		`{"jsonrpc":"2.0","\u0069d":1,"method":"m"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"m"}]`,
		"{\"jsonrpc\":\"2.0\",\n\"id\":1,\"result\":{\n}}",
		`{"jsonrpc":"2.0","id":1,"result":{]}`, `"x"`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := valid(data), json.Valid(data); got != want {
			t.Fatalf("valid = %v, json.Valid = %v", got, want)
		}
		m, err := Decode(data)
		if err != nil {
			if _, ok := err.(*DecodeError); !ok {
				t.Fatalf("error %T %v", err, err)
			}
			if json.Valid(data) && err.(*DecodeError).Code == ParseError {
				t.Fatalf("valid JSON reported as a parse error: %v", err)
			}
			return
		}
		ProgressToken(m.Params)
		CancelledRequestID(m.Params)
		enc := m.Encode()
		if bytes.IndexByte(enc, '\n') >= 0 {
			t.Fatalf("encoding %q is not one line", enc)
		}
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decode of %q: %v", enc, err)
		}
		same := func(a, b []byte) bool {
			// Encoding turns newlines (white space) into spaces; nothing else.
			return bytes.Equal(bytes.ReplaceAll(a, []byte("\n"), []byte(" ")), b)
		}
		if !same(m.ID, m2.ID) || m.Method != m2.Method || !same(m.Params, m2.Params) || !same(m.Result, m2.Result) ||
			(m.Error == nil) != (m2.Error == nil) {
			t.Fatalf("round trip changed the envelope:\n%+v\n%+v", m, m2)
		}
		if m.Error != nil && (m.Error.Code != m2.Error.Code || m.Error.Message != m2.Error.Message || !same(m.Error.Data, m2.Error.Data)) {
			t.Fatalf("round trip changed the error: %+v %+v", m.Error, m2.Error)
		}
	})
}

// DropMetaKeys keeps a valid object valid, leaves none of the keys it
// drops, keeps every other member, and is idempotent.
func FuzzDropMetaKeys(f *testing.F) {
	for _, s := range []string{
		`{"name":"x","_meta":{"p/a":1,"progressToken":7,"p\/b":{"c":[1]},"p/ab":2}}`,
		`{"_meta":{"p/a":1}}`, `{"_meta":{"p/a":1} , "b":2}`, `{"_meta":{}}`, `{"_meta":"p/x"}`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out := DropMetaKeys(data, "p/a", "p/b")
		if !json.Valid(data) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("DropMetaKeys(%s) = %s: not valid JSON", data, out)
		}
		var in, got map[string]json.RawMessage
		if json.Unmarshal(data, &in) != nil {
			return
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("DropMetaKeys(%s) = %s: %v", data, out, err)
		}
		var metaIn, metaGot map[string]json.RawMessage
		if json.Unmarshal(in["_meta"], &metaIn) != nil {
			if !bytes.Equal(out, data) {
				t.Fatalf("DropMetaKeys(%s) = %s, with no _meta object", data, out)
			}
			return
		}
		_ = json.Unmarshal(got["_meta"], &metaGot)
		for k, v := range metaIn {
			if k == "p/a" || k == "p/b" {
				if _, ok := metaGot[k]; ok {
					t.Fatalf("DropMetaKeys(%s) = %s keeps %q", data, out, k)
				}
			} else if compact(metaGot[k]) != compact(v) {
				t.Fatalf("DropMetaKeys(%s) = %s lost or changed %q", data, out, k)
			}
		}
		for k := range in {
			if k != "_meta" && compact(got[k]) != compact(in[k]) {
				t.Fatalf("DropMetaKeys(%s) = %s changed %q", data, out, k)
			}
		}
		if again := DropMetaKeys(out, "p/a", "p/b"); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %s, then %s", out, again)
		}
	})
}

func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

// EditParams is, byte for byte, DropMetaKeys then ReplaceMember, in one
// scan and one copy.
func FuzzEditParams(f *testing.F) {
	for _, s := range []string{
		`{"name":"x","arguments":{"a":1},"_meta":{"p/a":1,"progressToken":7}}`,
		`{"_meta":{"p/a":1},"name":"x"}`, `{"_meta":{"p/a":1} , "name":"x" }`, `{"name":"x","_meta":{"p/a":1}}`,
		`{"name":"x"}`, `{"_meta":{"p/b":2}}`, `{"name":1,"name":2,"_meta":{}}`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		value := json.RawMessage(`"y__x"`)
		got, ok := EditParams(data, "name", value, "p/a", "p/b")
		want, wok := ReplaceMember(DropMetaKeys(data, "p/a", "p/b"), "name", value)
		if ok != wok || !bytes.Equal(got, want) {
			t.Fatalf("EditParams(%s) = %s %v, want %s %v", data, got, ok, want, wok)
		}
		if again := DropMetaKeys(data, "p/a", "p/b"); !bytes.Equal(again, func() []byte { o, _ := EditParams(data, "", nil, "p/a", "p/b"); return o }()) {
			t.Fatalf("EditParams without a name is not DropMetaKeys for %s", data)
		}
	})
}

// FuzzProgressToken holds ProgressToken to encoding/json's reading of
// the same params: the top-level "progressToken", else
// "_meta"."progressToken", the last of duplicates; nothing for anything
// but a JSON object. The search that settles most params without a scan
// (no key's bytes, no escape) must never miss a token a decoder sees.
func FuzzProgressToken(f *testing.F) {
	for _, s := range []string{
		`{"name":"t","_meta":{"progressToken":"abc"}}`,
		`{"progressToken":42,"_meta":{"progressToken":"meta"}}`,
		`{"_meta":{"progress\u0054oken":"esc"}}`,
		`{"\u0070rogressToken":5}`,
		`{"arguments":{"text":"\"progressToken\""}}`,
		`{"_meta":{"progressToken":1},"_meta":{"x":2}}`,
		`{"arguments":{"path":"C:\\x"}}`,
		`[1]`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		got := ProgressToken(params)
		var want json.RawMessage
		var top map[string]json.RawMessage
		if json.Unmarshal(params, &top) == nil && top != nil {
			if v, ok := top["progressToken"]; ok {
				want = v
			} else if m, ok := top["_meta"]; ok {
				var meta map[string]json.RawMessage
				if json.Unmarshal(m, &meta) == nil {
					want = meta["progressToken"]
				}
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("ProgressToken(%q) = %q, encoding/json reads %q", params, got, want)
		}
	})
}

// DropMembers keeps a valid object valid, leaves none of the members or
// _meta keys it drops, keeps every other member as it was, and is
// idempotent.
func FuzzDropMembers(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[2],"_meta":{"p/a":1,"k":{"a":2}},"c":{"a":3}}`,
		`{"_meta":{"p/a":1}}`, `{ "a" : 1 , "_meta" : { "p/a" : 1 } }`, `{"_meta":{}}`, `{"\u0061":1}`, `{`, ``,
		`{"_meta":{"p/a":1,"x":1},"_meta":{"p/a":2,"y":2}}`,
	} {
		f.Add([]byte(s))
	}
	names, keys := []string{"a", "b"}, []string{"p/a"}
	f.Fuzz(func(t *testing.T, data []byte) {
		out := DropMembers(data, names, keys)
		if !json.Valid(data) {
			if !bytes.Equal(out, data) {
				t.Fatalf("DropMembers(%s) = %s: changed what is not JSON", data, out)
			}
			return
		}
		var in, got map[string]json.RawMessage
		if json.Unmarshal(data, &in) != nil {
			if !bytes.Equal(out, data) {
				t.Fatalf("DropMembers(%s) = %s: changed what is no object", data, out)
			}
			return
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("DropMembers(%s) = %s: %v", data, out, err)
		}
		for k, v := range in {
			switch {
			case k == "a" || k == "b":
				if _, ok := got[k]; ok {
					t.Fatalf("DropMembers(%s) = %s keeps %q", data, out, k)
				}
			case k == "_meta":
				var metaIn, metaGot map[string]json.RawMessage
				if json.Unmarshal(v, &metaIn) != nil {
					if compact(got[k]) != compact(v) {
						t.Fatalf("DropMembers(%s) = %s changed a _meta that is no object", data, out)
					}
					continue
				}
				_ = json.Unmarshal(got[k], &metaGot)
				for mk, mv := range metaIn {
					if mk == "p/a" {
						if _, ok := metaGot[mk]; ok {
							t.Fatalf("DropMembers(%s) = %s keeps _meta %q", data, out, mk)
						}
					} else if compact(metaGot[mk]) != compact(mv) {
						t.Fatalf("DropMembers(%s) = %s lost or changed _meta %q", data, out, mk)
					}
				}
			default:
				if compact(got[k]) != compact(v) {
					t.Fatalf("DropMembers(%s) = %s lost or changed %q", data, out, k)
				}
			}
		}
		if again := DropMembers(out, names, keys); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %s, then %s", out, again)
		}
	})
}
