package jsonc

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "1:1: the file is empty"},
		{"{\n  \"a\": 1\n  \"b\": 2\n}", "3:3: invalid character '\"' after object member \"a\""},
		{"{\"a\": tru}", "1:7: invalid character 't' looking for the beginning of a value"},
		{"{\n  /* open", "2:3: unterminated /* comment"},
		{"{\"a\": \"x\ny\"}", "1:9: invalid control character"},
		{"{} {}", "1:4: unexpected character '{' after the top-level value"},
		{"{\"a\": [1, 2}", "1:12: invalid character '}' after array element"},
		{"{\"a\": 01}", "1:7: invalid number \"01\""},
		{strings.Repeat("[", 2000), "nested more than 1000 deep"},
	} {
		_, err := Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.20q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseJSONC(t *testing.T) {
	doc := "\xEF\xBB\xBF// top\n{\n  \"a\": [1, 2,], /* b */ \"b\": {\"c\": \"d\\n\\u00e9\",},\n}\n"
	v, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Get("b").Get("c").Str; got != "d\né" {
		t.Errorf("b.c = %q", got)
	}
	if a := v.Get("a"); len(a.Elems) != 2 || doc[a.Start:a.End] != "[1, 2,]" {
		t.Errorf("a spans %q", doc[a.Start:a.End])
	}
	_, comments, err := ParseComments([]byte(doc + "/* a\nb */ // end"))
	var got []string
	for _, c := range comments {
		got = append(got, (doc + "/* a\nb */ // end")[c[0]:c[1]])
	}
	if err != nil || strings.Join(got, "|") != "// top|/* b */|/* a\nb */|// end" {
		t.Errorf("ParseComments: %q, %v", got, err)
	}
	std := Standardize([]byte(doc))
	if len(std) != len(doc) {
		t.Fatalf("Standardize changed the length")
	}
	var x any
	if err := json.Unmarshal(std[3:], &x); err != nil {
		t.Errorf("Standardize left non-JSON: %v\n%s", err, std)
	}
	if s := []byte(`{"a": "// not a comment, }"}`); string(Standardize(s)) != string(s) {
		t.Errorf("Standardize changed a string: %s", Standardize(s))
	}
}

// TestEdits checks SetMember and RemoveMember on the layouts people write.
func TestEdits(t *testing.T) {
	type op struct {
		remove bool
		path   []string
		key    string
		value  any
	}
	for _, tc := range []struct {
		name, in string
		ops      []op
		want     string
	}{
		{"add after last", "{\n  \"s\": {\n    \"a\": 1\n  }\n}\n", []op{{path: []string{"s"}, key: "b", value: 2}},
			"{\n  \"s\": {\n    \"a\": 1,\n    \"b\": 2\n  }\n}\n"},
		{"add after a trailing comma and a comment", "{\n\t\"s\": {\n\t\t\"a\": 1, // one\n\t},\n}\n", []op{{path: []string{"s"}, key: "b", value: []int{2}}},
			"{\n\t\"s\": {\n\t\t\"a\": 1, // one\n\t\t\"b\": [\n\t\t\t2\n\t\t]\n\t},\n}\n"},
		{"add after a comment", "{\n  \"a\": 1 // one\n}", []op{{key: "b", value: true}},
			"{\n  \"a\": 1, // one\n  \"b\": true\n}"},
		{"add on one line", `{"a": 1}`, []op{{key: "b", value: "x&y"}}, `{"a": 1, "b": "x&y"}`},
		{"add to an empty object", "{\n  \"s\": {}\n}", []op{{path: []string{"s"}, key: "b", value: 2}},
			"{\n  \"s\": {\n    \"b\": 2\n  }\n}"},
		{"add the missing path", "{\n  \"x\": 1\n}\n", []op{{path: []string{"s", "t"}, key: "b", value: 2}},
			"{\n  \"x\": 1,\n  \"s\": {\n    \"t\": {\n      \"b\": 2\n    }\n  }\n}\n"},
		{"replace", "{\n  \"a\": {\"x\": 1}, // keep\n  \"b\": 2\n}", []op{{key: "a", value: Ordered{{"y", 2}, {"x", 1}}}},
			"{\n  \"a\": {\n    \"y\": 2,\n    \"x\": 1\n  }, // keep\n  \"b\": 2\n}"},
		{"remove middle", "{\n  \"a\": 1,\n  // about b\n  \"b\": 2,\n  \"c\": 3\n}", []op{{remove: true, key: "b"}},
			"{\n  \"a\": 1,\n  // about b\n  \"c\": 3\n}"},
		{"remove last", "{\n  \"a\": 1,\n  \"b\": 2\n}", []op{{remove: true, key: "b"}}, "{\n  \"a\": 1\n}"},
		{"remove last with trailing comma", "{\n  \"a\": 1,\n  \"b\": 2,\n}", []op{{remove: true, key: "b"}}, "{\n  \"a\": 1,\n}"},
		{"remove only", "{\n  \"s\": {\n    \"a\": 1\n  }\n}", []op{{remove: true, path: []string{"s"}, key: "a"}}, "{\n  \"s\": {\n  }\n}"},
		{"remove inline first", `{"a": 1, "b": 2}`, []op{{remove: true, key: "a"}}, `{"b": 2}`},
		{"remove inline last", `{"a": 1, "b": 2}`, []op{{remove: true, key: "b"}}, `{"a": 1}`},
		{"remove duplicates", `{"a": 1, "b": 2, "a": 3}`, []op{{remove: true, key: "a"}}, `{"b": 2}`},
		{"remove two, then add", "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3\n}", []op{{remove: true, key: "b"}, {remove: true, key: "c"}, {key: "d", value: 4}},
			"{\n  \"a\": 1,\n  \"d\": 4\n}"},
		{"only, comma on the next line", "{\"a\":0\n,}", []op{{remove: true, key: "a"}}, "{}"},
		{"first, comma on the next line", "{\n  \"a\": 1\n  , \"b\": 2\n}", []op{{remove: true, key: "a"}}, "{\n  \"b\": 2\n}"},
		{"CRLF", "{\r\n  \"a\": 1,\r\n  \"b\": 2\r\n}", []op{{remove: true, key: "a"}}, "{\r\n  \"b\": 2\r\n}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.in)
			var err error
			for _, o := range tc.ops {
				if o.remove {
					data, err = RemoveMember(data, o.path, o.key)
				} else {
					data, err = SetMember(data, o.path, o.key, o.value)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if string(data) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", data, tc.want)
			}
		})
	}
	if _, err := SetMember([]byte(`{"s": 1}`), []string{"s"}, "a", 1); err == nil || !strings.Contains(err.Error(), "s is a number, not an object") {
		t.Errorf("SetMember into a number: %v", err)
	}
}
