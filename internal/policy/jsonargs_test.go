package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeObject: the arguments decoder agrees with encoding/json on
// every input: the same values, and an error exactly when it errs.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1} `, `{"a":[1,2,{"b":null}],"c":"d\u00e9\n","e":true,"f":false}`,
		`{"a":-0.5e+3,"b":0,"c":-0}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":1e400}`,
		`{"a":"\ud800"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\x01\"}", `{"a":"\q"}`, `{"a" 1}`, `{"a":1,}`, `[1]`,
		`{"a":[1,]}`, `{"a":tru}`, `{"a":nul}`, `{"a":1}}`, `{"a":"b`, `{"a":"\"}`, `{"a":1,"a":2}`, `{1:2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeObject(b)
		var want any
		werr := json.Unmarshal(b, &want)
		if werr == nil {
			if _, isObj := want.(map[string]any); !isObj {
				werr = errors.New("not an object")
			}
		}
		if errors.Is(err, errTooDeep) {
			return
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: decodeObject err %v, encoding/json err %v", b, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeObject %#v, encoding/json %#v", b, got, want)
		}
	})
}

func TestDecodeObjectDepthBounded(t *testing.T) {
	deep := []byte(strings.Repeat(`{"a":`, maxArgumentDepth+1) + `1` + strings.Repeat(`}`, maxArgumentDepth+1))
	if _, err := decodeObject(deep); !errors.Is(err, errTooDeep) {
		t.Errorf("nesting %d deep: %v", maxArgumentDepth+1, err)
	}
	ok := []byte(strings.Repeat(`[`, maxArgumentDepth-1) + strings.Repeat(`]`, maxArgumentDepth-1))
	if _, err := decodeObject(append(append([]byte(`{"a":`), ok...), '}')); err != nil {
		t.Errorf("nesting %d deep: %v", maxArgumentDepth, err)
	}
}
