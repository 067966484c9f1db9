package call

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
)

func TestCallArguments(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{
		"s":{"type":"string"},
		"n":{"type":"integer"},
		"b":{"type":"boolean"},
		"o":{"type":"object"},
		"sn":{"type":["string","null"]},
		"any":{"anyOf":[{"type":"string"},{"type":"null"}]},
		"mixed":{"anyOf":[{"type":"string"},{"type":"number"}]},
		"ref":{"$ref":"#/$defs/x"}}}`)
	props := func(args ...string) string {
		out, err := callArguments(`{"s":"from json","keep":1}`, args, schema)
		if err != nil {
			return "error: " + err.Error()
		}
		b, _ := json.Marshal(out)
		return string(b)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"s=42"}, `{"keep":1,"s":"42"}`},                         // --arg wins over --json, text stays text
		{[]string{"n=42"}, `{"keep":1,"n":42,"s":"from json"}`},           // a number
		{[]string{"b=true"}, `{"b":true,"keep":1,"s":"from json"}`},       // a boolean
		{[]string{`o={"k":1}`}, `{"keep":1,"o":{"k":1},"s":"from json"}`}, // an object
		{[]string{"sn=42"}, `{"keep":1,"s":"from json","sn":"42"}`},       // ["string","null"] is text
		{[]string{"any=true"}, `{"any":"true","keep":1,"s":"from json"}`}, // anyOf string|null is text
		{[]string{"mixed=7"}, `{"keep":1,"mixed":7,"s":"from json"}`},     // several types: JSON if it parses
		{[]string{"mixed=seven"}, `{"keep":1,"mixed":"seven","s":"from json"}`},
		{[]string{"ref=8"}, `{"keep":1,"ref":8,"s":"from json"}`},       // nothing said: JSON if it parses
		{[]string{"new=a=b"}, `{"keep":1,"new":"a=b","s":"from json"}`}, // the first = splits
		{[]string{"n=many"}, `error: --arg n: the tool's schema says integer, and "many" is not JSON`},
		{[]string{"=1"}, `error: --arg "=1": want key=value`},
	}
	for _, c := range cases {
		if got := props(c.args...); got != c.want {
			t.Errorf("%v: %s, want %s", c.args, got, c.want)
		}
	}
	if _, err := callArguments(`[1]`, nil, nil); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("--json [1]: %v", err)
	}
	if _, err := callArguments(`null`, nil, nil); err == nil {
		t.Errorf("--json null accepted")
	}
}

// call's flags and arguments reach its options through runF.
func TestFlagsReachTheOptions(t *testing.T) {
	streams := cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)}
	var got *Options
	cmd := NewCmdCall(streams, func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"github", "search", "--arg", "q=mcp", "--arg", "n=3", "--json", `{"x":1}`, "--output-json", "--timeout", "9s", "--addr", "h:4"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Server != "github" || got.Tool != "search" || strings.Join(got.Args, ",") != "q=mcp,n=3" || got.ArgsJSON != `{"x":1}` ||
		!got.OutputJSON || got.Timeout != 9*time.Second || got.API.Addr != "h:4" {
		t.Errorf("call options: %+v", got)
	}
}
