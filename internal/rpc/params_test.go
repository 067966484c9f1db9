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
