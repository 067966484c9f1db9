package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeKinds(t *testing.T) {
	tests := []struct {
		in                 string
		req, note, resp    bool
		id, method, params string
		result, errMsg     string
		errCode            int
	}{
		{in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","y":[1,2]}}`,
			req: true, id: `1`, method: "tools/call", params: `{"name":"x","y":[1,2]}`},
		{in: ` {"method":"m","jsonrpc":"2.0","id":"a\"b"} `, req: true, id: `"a\"b"`, method: "m"},
		{in: `{"jsonrpc":"2.0","id":-1.5e3,"method":"m","params":[]}`, req: true, id: `-1.5e3`, method: "m", params: `[]`},
		{in: `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7}}`,
			note: true, method: "notifications/progress", params: `{"progressToken":7}`},
		{in: `{"jsonrpc":"2.0","id":3,"result":{"a":{"unknown":true}}}`, resp: true, id: `3`, result: `{"a":{"unknown":true}}`},
		{in: `{"jsonrpc":"2.0","id":3,"result":null}`, resp: true, id: `3`, result: `null`},
		{in: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
			resp: true, id: `null`, errCode: -32700, errMsg: "Parse error"},
		{in: `{"jsonrpc":"2.0","id":"x","error":{"code":5,"message":"caf\u00e9","data":[1]},"extra":1}`,
			resp: true, id: `"x"`, errCode: 5, errMsg: "café"},
		{in: `{"jsonrpc":"2.0","\u0069d":2,"meth\u006fd":"a\/b"}`, req: true, id: `2`, method: "a/b"},
		{in: `{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`, req: true, id: `2`, method: "m"},
		{in: "{\"jsonrpc\":\"2.0\",\n\"id\":1,\t\"method\":\"m\"}\r", req: true, id: `1`, method: "m"},
	}
	for _, tt := range tests {
		m, err := Decode([]byte(tt.in))
		if err != nil {
			t.Errorf("Decode(%s): %v", tt.in, err)
			continue
		}
		if m.IsRequest() != tt.req || m.IsNotification() != tt.note || m.IsResponse() != tt.resp {
			t.Errorf("Decode(%s): kinds req=%v note=%v resp=%v", tt.in, m.IsRequest(), m.IsNotification(), m.IsResponse())
		}
		if string(m.ID) != tt.id || m.Method != tt.method || string(m.Params) != tt.params || string(m.Result) != tt.result {
			t.Errorf("Decode(%s) = id %s method %q params %s result %s", tt.in, m.ID, m.Method, m.Params, m.Result)
		}
		if tt.errMsg != "" && (m.Error == nil || m.Error.Code != tt.errCode || m.Error.Message != tt.errMsg) {
			t.Errorf("Decode(%s).Error = %+v", tt.in, m.Error)
		}
		if tt.params == "" && m.Params != nil || tt.result == "" && m.Result != nil {
			t.Errorf("Decode(%s): absent member decoded as present", tt.in)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		in   string
		code int
		id   string // the id the error still names
		req  bool
	}{
		{``, ParseError, "", false},
		{`   `, ParseError, "", false},
		{`{`, ParseError, "", false},
		{`{"jsonrpc":"2.0","id":1,"result":{]}`, ParseError, "1", false},
		{`{"jsonrpc":"2.0","id":"q","method":"m","params":{"a":tru}}`, ParseError, `"q"`, true},
		{`{"jsonrpc":"2.0","id":1,"result":{}} x`, ParseError, "1", false},
		{`{"jsonrpc":"2.0","id":1,"result":"a` + "\n" + `"}`, ParseError, "1", false},
		{`nope`, ParseError, "", false},
		{`[{"jsonrpc":"2.0","id":1,"method":"m"}]`, InvalidRequest, "", false},
		{`[]`, InvalidRequest, "", false},
		{`42`, InvalidRequest, "", false},
		{`"str"`, InvalidRequest, "", false},
		{`{"id":1,"method":"m"}`, InvalidRequest, "1", true},
		{`{"jsonrpc":"1.0","id":1,"result":{}}`, InvalidRequest, "1", false},
		{`{"jsonrpc":2,"id":1,"result":{}}`, InvalidRequest, "1", false},
		{`{"jsonrpc":"2.0","id":{},"method":"m"}`, InvalidRequest, "", true},
		{`{"jsonrpc":"2.0","id":true,"result":{}}`, InvalidRequest, "", false},
		{`{"jsonrpc":"2.0","id":1,"method":5}`, InvalidRequest, "1", true},
		{`{"jsonrpc":"2.0","id":1,"method":""}`, InvalidRequest, "1", true},
		{`{"jsonrpc":"2.0","id":null,"method":"m"}`, InvalidRequest, "", true},
		{`{"jsonrpc":"2.0","id":1,"method":"m","result":{}}`, InvalidRequest, "1", true},
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":"s"}`, InvalidRequest, "1", true},
		{`{"jsonrpc":"2.0","id":1,"params":{}}`, InvalidRequest, "1", true},
		{`{"jsonrpc":"2.0"}`, InvalidRequest, "", false},
		{`{"jsonrpc":"2.0","result":{}}`, InvalidRequest, "", false},
		{`{"jsonrpc":"2.0","id":1}`, InvalidRequest, "1", false},
		{`{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`, InvalidRequest, "1", false},
		{`{"jsonrpc":"2.0","id":1,"error":"bad"}`, InvalidRequest, "1", false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"x"}}`, InvalidRequest, "1", false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":3}}`, InvalidRequest, "1", false},
		{`{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}`, InvalidRequest, "1", false},
	}
	for _, tt := range tests {
		_, err := Decode([]byte(tt.in))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("Decode(%s) = %v, want a *DecodeError", tt.in, err)
			continue
		}
		if de.Code != tt.code || string(de.ID) != tt.id || de.Request != tt.req {
			t.Errorf("Decode(%s) = code %d id %s request %v (%v); want %d %s %v", tt.in, de.Code, de.ID, de.Request, de, tt.code, tt.id, tt.req)
		}
	}
}

func TestDecodeAliasesWithClippedCapacity(t *testing.T) {
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1},"x":"tail"}`)
	m, err := Decode(line)
	if err != nil {
		t.Fatal(err)
	}
	if cap(m.Params) != len(m.Params) || cap(m.ID) != len(m.ID) {
		t.Fatal("a raw field's capacity reaches past it: append would overwrite the line")
	}
	_ = append(m.Params, "zzzzzzzz"...)
	if !bytes.HasSuffix(line, []byte(`"x":"tail"}`)) {
		t.Fatal("line changed")
	}
}

func TestEncode(t *testing.T) {
	tests := []struct {
		m    Message
		want string
	}{
		{Message{ID: json.RawMessage(`1`), Method: "tools/call", Params: json.RawMessage(`{"x":{"unknown":[1]}}`)},
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":{"unknown":[1]}}}`},
		{Message{Method: "notifications/initialized"}, `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{Message{ID: json.RawMessage(`"a"`)}, `{"jsonrpc":"2.0","id":"a","result":{}}`},
		{Message{ID: json.RawMessage(`"a"`), Result: json.RawMessage(`null`)}, `{"jsonrpc":"2.0","id":"a","result":null}`},
		{Message{ID: json.RawMessage(`2`), Error: &Error{Code: -32001, Message: "timed \"out\"\n", Data: json.RawMessage(`{"s":30}`)}},
			`{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"timed \"out\"\n","data":{"s":30}}}`},
		{Message{ID: json.RawMessage(`3`), Result: json.RawMessage("{\n  \"pretty\": \"a\\nb\"\n}")},
			`{"jsonrpc":"2.0","id":3,"result":{   "pretty": "a\nb" }}`},
		{Message{Method: "m<é>"}, `{"jsonrpc":"2.0","method":"m\u003cé\u003e"}`},
	}
	for _, tt := range tests {
		got := tt.m.Encode()
		if string(got) != tt.want {
			t.Errorf("Encode(%+v)\n got %s\nwant %s", tt.m, got, tt.want)
		}
		if bytes.IndexByte(got, '\n') >= 0 {
			t.Errorf("Encode(%+v) is not one line", tt.m)
		}
		if _, err := Decode(got); err != nil {
			t.Errorf("Decode(Encode(%+v)): %v", tt.m, err)
		}
	}
}

func TestScannerAgreesWithEncodingJSON(t *testing.T) {
	cases := []string{
		`0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`, `.5`, `+1`, `1.5e3.2`,
		`"`, `"\`, `"\u12"`, `"\u12G4"`, `"\uD834\uDD1E"`, `"\x"`, `"a\/b"`, "\"\x01\"", "\"\x7f\"", "\"\xff\xfe\"",
		`true`, `tru`, `truex`, `null`, `nul`, `false`,
		`{}`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":1 "b":2}`, `{1:2}`,
		`[]`, `[`, `[1,]`, `[,1]`, `[1 2]`, `[[[]]]`, ` [ 1 , { "a" : [ ] } ] `,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		"\"abcdefgh\x00ijklmnop\"", `"abcdefghijklmnopqrstuvwx\"yz"`, `"0123456789abcdef\\"`,
	}
	for _, c := range cases {
		if got, want := valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("valid(%.40q) = %v, json.Valid = %v", c, got, want)
		}
	}
}

func TestErrorStrings(t *testing.T) {
	if s := (&Error{Code: -32601, Message: "no"}).Error(); s != "rpc: error -32601: no" {
		t.Error(s)
	}
	for n, want := range map[int]string{16 << 20: "16 MiB", 64 << 10: "64 KiB", 1000: "1000-byte", 1<<20 + 1: "1048577-byte"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %s, want %s", n, got, want)
		}
	}
}
