package testserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitLong = 5 * time.Second

// rpcMsg is any message the fixture writes.
type rpcMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type callResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

// readLines sends every line of r, without its newline, to a channel that
// is closed at EOF.
func readLines(r io.Reader) <-chan []byte {
	ch := make(chan []byte, 1024)
	go func() {
		defer close(ch)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				ch <- bytes.TrimSuffix(line, []byte("\n"))
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// nextLine returns the next line from lines, failing the test on timeout or
// EOF.
func nextLine(t *testing.T, lines <-chan []byte) []byte {
	t.Helper()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("stdout ended, expected a line")
		}
		return line
	case <-time.After(waitLong):
		t.Fatalf("no line on stdout within %v", waitLong)
	}
	return nil
}

func decodeMsg(t *testing.T, line []byte) rpcMsg {
	t.Helper()
	var m rpcMsg
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("line is not JSON: %v: %.200q", err, line)
	}
	if m.JSONRPC != "2.0" {
		t.Fatalf("jsonrpc = %q in %s", m.JSONRPC, line)
	}
	return m
}

// inproc is Main running in this process over pipes.
type inproc struct {
	t      *testing.T
	stdin  *io.PipeWriter
	lines  <-chan []byte
	stderr *Buffer
	done   chan struct{}
	code   int
}

func startMain(t *testing.T, args ...string) *inproc {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &inproc{t: t, stdin: inW, stderr: &Buffer{}, done: make(chan struct{})}
	p.lines = readLines(outR)
	go func() {
		defer close(p.done)
		p.code = Main(args, inR, outW, p.stderr)
		outW.Close()
		inR.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-p.done:
			for range p.lines {
			}
		case <-time.After(waitLong):
			t.Errorf("Main did not return after stdin closed")
		}
	})
	return p
}

func (p *inproc) send(format string, a ...any) {
	p.t.Helper()
	if _, err := fmt.Fprintf(p.stdin, format+"\n", a...); err != nil {
		p.t.Fatalf("writing to stdin: %v", err)
	}
}

func (p *inproc) next() rpcMsg {
	p.t.Helper()
	return decodeMsg(p.t, nextLine(p.t, p.lines))
}

// close closes stdin and returns Main's exit code and the lines written
// after the ones already read.
func (p *inproc) close() (int, [][]byte) {
	p.t.Helper()
	p.stdin.Close()
	var rest [][]byte
	timeout := time.After(waitLong)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				return p.code, rest
			}
			rest = append(rest, line)
		case <-timeout:
			p.t.Fatalf("Main did not end within %v of stdin closing", waitLong)
		}
	}
}

// result checks m is a successful response to id and decodes its result.
func result(t *testing.T, m rpcMsg, id string, v any) {
	t.Helper()
	if string(m.ID) != id {
		t.Fatalf("response id = %s, want %s", m.ID, id)
	}
	if m.Error != nil || m.Result == nil {
		t.Fatalf("response %s: error %+v, result %s", id, m.Error, m.Result)
	}
	if err := json.Unmarshal(m.Result, v); err != nil {
		t.Fatalf("decoding result %s: %v", m.Result, err)
	}
}

// callText checks m is a successful tools/call response with one text.
func callText(t *testing.T, m rpcMsg, id string) string {
	t.Helper()
	var r callResult
	result(t, m, id, &r)
	if r.IsError || len(r.Content) != 1 || r.Content[0].Type != "text" {
		t.Fatalf("tools/call result = %s, want one text and no error", m.Result)
	}
	return r.Content[0].Text
}

func errorCode(t *testing.T, m rpcMsg, id string) int {
	t.Helper()
	if string(m.ID) != id {
		t.Fatalf("error response id = %s, want %s", m.ID, id)
	}
	if m.Error == nil || m.Result != nil {
		t.Fatalf("response %s is not an error: %+v", id, m)
	}
	return m.Error.Code
}

const initReq = `{"jsonrpc":"2.0","id":%s,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"test","version":"0"}}}`

func TestInitializeNegotiatesVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ asked, want string }{
		{"2024-11-05", "2024-11-05"},
		{"2025-03-26", "2025-03-26"},
		{"2025-06-18", "2025-06-18"},
		{"2025-11-25", "2025-11-25"},
		{"1999-01-01", "2025-11-25"},
		{"", "2025-11-25"},
	} {
		t.Run(tc.asked, func(t *testing.T) {
			t.Parallel()
			p := startMain(t)
			p.send(initReq, `"init-1"`, tc.asked)
			var r struct {
				ProtocolVersion string                     `json:"protocolVersion"`
				Capabilities    map[string]json.RawMessage `json:"capabilities"`
				ServerInfo      struct{ Name, Version string }
			}
			result(t, p.next(), `"init-1"`, &r)
			if r.ProtocolVersion != tc.want {
				t.Errorf("protocolVersion = %q, want %q", r.ProtocolVersion, tc.want)
			}
			if got := string(r.Capabilities["tools"]); got != `{"listChanged":true}` {
				t.Errorf("capabilities.tools = %s", got)
			}
			if got := string(r.Capabilities["logging"]); got != `{}` {
				t.Errorf("capabilities.logging = %s", got)
			}
			if r.ServerInfo.Name != "mcp-fixture" || r.ServerInfo.Version == "" {
				t.Errorf("serverInfo = %+v", r.ServerInfo)
			}
			p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			p.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
			var empty map[string]any
			result(t, p.next(), "2", &empty)
			if len(empty) != 0 {
				t.Errorf("ping result = %v, want {}", empty)
			}
			p.send(`{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"debug"}}`)
			result(t, p.next(), "3", &empty)
			if code, rest := p.close(); code != 0 || len(rest) != 0 {
				t.Errorf("exit code %d, extra output %q", code, rest)
			}
		})
	}
}

func TestToolsList(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	var r struct {
		Tools []struct {
			Name        string
			Description string
			InputSchema struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"inputSchema"`
		}
	}
	result(t, p.next(), "1", &r)
	var names []string
	for _, tool := range r.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema.Type != "object" || tool.InputSchema.Properties == nil {
			t.Errorf("tool %q: description %q, inputSchema %+v", tool.Name, tool.Description, tool.InputSchema)
		}
	}
	if got := strings.Join(names, ","); got != "echo,sleep,progress,pid,crash,log,sample,meta,wedge,stderr,grow,whoami" {
		t.Errorf("tools = %s", got)
	}
}

func TestEchoPidAndWhoami(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello \"world\""}}}`)
	if got := callText(t, p.next(), "1"); got != `hello "world"` {
		t.Errorf("echo = %q", got)
	}
	p.send(`{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"pid"}}`)
	if got := callText(t, p.next(), `"two"`); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("pid = %q, want %d", got, os.Getpid())
	}
	p.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami"}}`)
	if got, want := callText(t, p.next(), "3"), fmt.Sprintf("pid=%d tag=%s", os.Getpid(), os.Getenv("FIXTURE_TAG")); got != want {
		t.Errorf("whoami = %q, want %q", got, want)
	}
}

// meta answers with the request's _meta as it came.
func TestMetaTool(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"meta","_meta":{"traceparent":"00-ab","k":[1, 2]}}}`)
	if got := callText(t, p.next(), "1"); got != `{"traceparent":"00-ab","k":[1, 2]}` {
		t.Errorf("meta = %q", got)
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"meta"}}`)
	if got := callText(t, p.next(), "2"); got != "null" {
		t.Errorf("meta without _meta = %q", got)
	}
}

// The stderr tool writes its text to stderr as one line, unprefixed, and
// answers "written".
func TestStderrTool(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stderr","arguments":{"text":"a line for the log"}}}`)
	if got := callText(t, p.next(), "1"); got != "written" {
		t.Errorf("stderr tool answered %q", got)
	}
	if got := p.stderr.String(); got != "a line for the log\n" {
		t.Errorf("stderr = %q, want the line", got)
	}
}

func TestToolErrors(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	// An unknown tool is a protocol error.
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	if code := errorCode(t, p.next(), "1"); code != -32602 {
		t.Errorf("unknown tool: code %d, want -32602", code)
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call"}`)
	if code := errorCode(t, p.next(), "2"); code != -32602 {
		t.Errorf("no params: code %d, want -32602", code)
	}
	// Bad arguments are tool errors.
	for i, args := range []string{
		`{}`,         // echo without text
		`{"text":5}`, // echo with a number
		`"text"`,     // not an object
	} {
		id := strconv.Itoa(10 + i)
		p.send(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"echo","arguments":%s}}`, id, args)
		var r callResult
		result(t, p.next(), id, &r)
		if !r.IsError || len(r.Content) != 1 || r.Content[0].Text == "" {
			t.Errorf("echo %s: result %+v, want isError with a message", args, r)
		}
	}
	for i, c := range []struct{ tool, args string }{
		{"sleep", `{"ms":"soon"}`},
		{"sleep", `{"ms":-1}`},
		{"sleep", `{}`},
		{"progress", `{"steps":-1}`},
		{"crash", `{"code":256}`},
		{"stderr", `{}`},
		{"stderr", `{"text":1}`},
		{"grow", `{"mb":"lots"}`},
		{"grow", `{"stepMb":0}`},
		{"grow", `{"mb":-1}`},
	} {
		id := strconv.Itoa(20 + i)
		p.send(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, c.tool, c.args)
		var r callResult
		result(t, p.next(), id, &r)
		if !r.IsError {
			t.Errorf("%s %s: result %+v, want isError", c.tool, c.args, r)
		}
	}
}

// The grow tool allocates what it is asked, step by step, and keeps it.
func TestGrow(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"grow","arguments":{"mb":8,"stepMb":3,"intervalMs":1}}}`)
	var r callResult
	result(t, p.next(), "1", &r)
	if r.IsError || len(r.Content) != 1 || r.Content[0].Text != "grew 8 MiB" {
		t.Fatalf("grow: %+v", r)
	}
	grown.Lock()
	defer grown.Unlock()
	n := 0
	for _, c := range grown.chunks {
		n += len(c)
	}
	if n < 8<<20 {
		t.Errorf("holding %d bytes", n)
	}
}

func TestProtocolErrors(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	for _, tc := range []struct {
		line, id string
		code     int
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"no/such/method"}`, "1", -32601},
		{`{"jsonrpc":"2.0","id":"s","method":"resources/list"}`, `"s"`, -32601},
		{`{"jsonrpc":"2.0","id":2,"method":`, "null", -32700},
		{`not json at all`, "null", -32700},
		{`{"jsonrpc":"2.0","id":3}`, "3", -32600},
		{`{"jsonrpc":"2.0","id":4,"params":{}}`, "4", -32600},
		{`[{"jsonrpc":"2.0","id":5,"method":"ping"}]`, "null", -32600},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, "null", -32600},
		{`{"jsonrpc":"1.0","id":6,"method":"ping"}`, "6", -32600},
	} {
		p.send("%s", tc.line)
		if code := errorCode(t, p.next(), tc.id); code != tc.code {
			t.Errorf("%s: code %d, want %d", tc.line, code, tc.code)
		}
	}
	// Unknown notifications, responses and blank lines get no answer:
	// the next line out answers the ping.
	p.send(`{"jsonrpc":"2.0","method":"notifications/whatever","params":{}}`)
	p.send(`{"jsonrpc":"2.0","id":99,"result":{}}`)
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":12345}}`)
	p.send(``)
	p.send(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	var empty map[string]any
	result(t, p.next(), "7", &empty)
}

func TestCallsRunConcurrently(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":300}}}`)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"first"}}}`)
	if got := callText(t, p.next(), "2"); got != "first" {
		t.Errorf("echo = %q", got)
	}
	if got := callText(t, p.next(), "1"); got != "slept 300 ms" {
		t.Errorf("sleep = %q", got)
	}
}

func TestSleepCancelled(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	start := time.Now()
	p.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":400}}}`)
	p.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":700}}}`)
	// A cancel for another id, even "7" as a string, touches nothing.
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"7"}}`)
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"test"}}`)
	// Had 7 not been cancelled it would answer before 8.
	if got := callText(t, p.next(), "8"); got != "slept 700 ms" {
		t.Errorf("sleep = %q", got)
	}
	if d := time.Since(start); d < 700*time.Millisecond {
		t.Errorf("sleep 700 answered after %v", d)
	}
	code, rest := p.close()
	if code != 0 || len(rest) != 0 {
		t.Errorf("exit code %d, extra output %q", code, rest)
	}
	if !strings.Contains(p.stderr.String(), "request 7 cancelled") {
		t.Errorf("stderr does not log the cancel:\n%s", p.stderr.String())
	}
}

func TestEOFEndsCalls(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}}`)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":50}}}`)
	p.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
	start := time.Now()
	code, rest := p.close()
	if d := time.Since(start); d > eofGrace+time.Second {
		t.Errorf("Main took %v to end after EOF", d)
	}
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	// The quick calls answer, the 60 s sleep does not.
	ids := map[string]bool{}
	for _, line := range rest {
		ids[string(decodeMsg(t, line).ID)] = true
	}
	if len(ids) != 2 || !ids["2"] || !ids["3"] {
		t.Errorf("answers after EOF: %q, want ids 2 and 3", rest)
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	type progress struct {
		ProgressToken json.RawMessage `json:"progressToken"`
		Progress      float64         `json:"progress"`
		Total         float64         `json:"total"`
		Message       string          `json:"message"`
	}
	for _, tc := range []struct {
		id, args, token string
		steps           int
	}{
		{"1", `{"steps":4,"intervalMs":1}`, `"tok-1"`, 4},
		{"2", `{"intervalMs":1}`, `42`, 3},
		{"3", `{}`, ``, 3},
	} {
		meta := ""
		if tc.token != "" {
			meta = fmt.Sprintf(`,"_meta":{"progressToken":%s}`, tc.token)
		}
		p.send(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"progress","arguments":%s%s}}`, tc.id, tc.args, meta)
		if tc.token != "" {
			for i := 1; i <= tc.steps; i++ {
				m := p.next()
				var pr progress
				if m.Method != "notifications/progress" || m.ID != nil || json.Unmarshal(m.Params, &pr) != nil {
					t.Fatalf("call %s: got %+v, want progress notification %d", tc.id, m, i)
				}
				if string(pr.ProgressToken) != tc.token || pr.Progress != float64(i) || pr.Total != float64(tc.steps) || pr.Message == "" {
					t.Errorf("call %s: progress %+v, want token %s, %d of %d", tc.id, pr, tc.token, i, tc.steps)
				}
			}
		}
		if got := callText(t, p.next(), tc.id); got != "done" {
			t.Errorf("progress = %q", got)
		}
	}
}

func TestGarbage(t *testing.T) {
	t.Parallel()
	p := startMain(t, "-garbage")
	for i := 1; i <= 2; i++ {
		p.send(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i)
		line := nextLine(t, p.lines)
		if json.Valid(line) || string(line) != GarbageLine {
			t.Fatalf("line before response %d = %q, want the garbage line", i, line)
		}
		var empty map[string]any
		result(t, p.next(), strconv.Itoa(i), &empty)
	}
}

func TestNeverAnswer(t *testing.T) {
	t.Parallel()
	p := startMain(t, "-never-answer")
	p.send(initReq, "1", "2025-06-18")
	p.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	p.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"crash"}}`)
	p.send(`{"jsonrpc":"2.0","id":4,"method":"nope"}`)
	p.send(`garbage`)
	code, rest := p.close()
	if code != 0 || len(rest) != 0 {
		t.Errorf("exit code %d, output %q; want 0 and nothing", code, rest)
	}
}

func TestHugeLine(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 300_000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			t.Parallel()
			p := startMain(t, "-huge-line", strconv.Itoa(size))
			line := nextLine(t, p.lines)
			if size > 1000 && len(line) != size {
				t.Errorf("line is %d bytes, want %d", len(line), size)
			}
			m := decodeMsg(t, line)
			if m.Method != "notifications/message" || m.ID != nil {
				t.Errorf("huge line is not a notifications/message: %.200s", line)
			}
			p.send(initReq, "1", "2025-06-18")
			var r map[string]any
			result(t, p.next(), "1", &r)
		})
	}
}

func TestStartupFlags(t *testing.T) {
	t.Parallel()
	t.Run("stderr-lines", func(t *testing.T) {
		t.Parallel()
		p := startMain(t, "-stderr-lines", "5")
		p.close()
		var got []string
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.HasPrefix(l, "stderr line") {
				got = append(got, l)
			}
		}
		want := "stderr line 1,stderr line 2,stderr line 3,stderr line 4,stderr line 5"
		if strings.Join(got, ",") != want {
			t.Errorf("stderr lines = %q", got)
		}
	})
	t.Run("slow-start", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		p := startMain(t, "-slow-start", "300ms")
		p.send(initReq, "1", "2025-06-18")
		p.next()
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("initialize answered after %v, want at least 300ms", d)
		}
	})
	t.Run("crash-at-start", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr Buffer
		if code := Main([]string{"-crash-at-start"}, strings.NewReader(""), &stdout, &stderr); code != 3 {
			t.Errorf("exit code %d, want 3", code)
		}
		if stdout.String() != "" || stderr.String() == "" {
			t.Errorf("stdout %q, stderr %q; want nothing and a line", stdout.String(), stderr.String())
		}
	})
	t.Run("help", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr Buffer
		if code := Main([]string{"-h"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Errorf("-h: exit code %d, want 0", code)
		}
		for _, b := range envBindings {
			if !strings.Contains(stderr.String(), "-"+b.flag) || !strings.Contains(stderr.String(), b.env) {
				t.Errorf("-h output lacks -%s or %s", b.flag, b.env)
			}
		}
		if strings.Contains(stderr.String(), "-linger") {
			t.Errorf("-h shows the hidden linger mode")
		}
	})
	t.Run("bad-flag", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr Buffer
		if code := Main([]string{"-no-such-flag"}, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("exit code %d, want 2", code)
		}
	})
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"FIXTURE_SLOW_START":      "2s",
		"FIXTURE_CRASH_AT_START":  "1",
		"FIXTURE_CRASH_AFTER":     "5",
		"FIXTURE_IGNORE_TERM":     "1",
		"FIXTURE_IGNORE_EOF":      "true",
		"FIXTURE_SETSID_CHILD":    "1",
		"FIXTURE_STDOUT_CHILD":    "1",
		"FIXTURE_GARBAGE":         "1",
		"FIXTURE_HUGE_LINE":       "1000",
		"FIXTURE_NEVER_ANSWER":    "1",
		"FIXTURE_STDERR_LINES":    "7",
		"FIXTURE_STRICT_INIT":     "1",
		"FIXTURE_STRICT_INIT_LOG": "/tmp/x",
		"FIXTURE_MODERN_ONLY":     "1",
		"FIXTURE_TOOLS_VARIANT":   "2",
		"FIXTURE_UI_URI":          "ui://fixture/view.html",
		"FIXTURE_UI_IN_RESULT":    "1",
		// The file, read at start, wins over the variant.
		"FIXTURE_TOOLS_VARIANT_FILE":  filepath.Join(t.TempDir(), "variant"),
		"FIXTURE_HOLD_MB":             "64",
		"FIXTURE_SPIN":                "300ms",
		"FIXTURE_GROW_MB":             "32",
		"FIXTURE_FORK_BOMB":           "10",
		"FIXTURE_ASK_ROOTS":           "1",
		"FIXTURE_ASK_ROOTS_AT_INIT":   "1",
		"FIXTURE_SKILLS":              "pdf-processing,acme/refunds",
		"FIXTURE_SKILLS_NO_DIRECTORY": "1",
		"FIXTURE_HTTP":                "127.0.0.1:0",
		"FIXTURE_METHOD_LOG":          "/tmp/y",
		"FIXTURE_FLOCK":               "/tmp/z.lock",
	}
	if err := os.WriteFile(env["FIXTURE_TOOLS_VARIANT_FILE"], []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(env) != len(envBindings) {
		t.Fatalf("test covers %d variables, there are %d", len(env), len(envBindings))
	}
	c, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		slowStart: 2 * time.Second, crashAtStart: true, crashAfter: 5, ignoreTerm: true,
		ignoreEOF: true, setsidChild: true, stdoutChild: true, garbage: true,
		hugeLine: 1000, neverAnswer: true, stderrLines: 7, strictInit: true, strictLog: "/tmp/x", modernOnly: true,
		toolsVariant: 1, toolsVariantFile: env["FIXTURE_TOOLS_VARIANT_FILE"], uiURI: "ui://fixture/view.html", uiInResult: true,
		holdMB: 64, spin: 300 * time.Millisecond, growMB: 32, forkBomb: 10, askRoots: true, askRootsAtInit: true,
		skills: "pdf-processing,acme/refunds", skillsNoDir: true, httpAddr: "127.0.0.1:0", methodLog: "/tmp/y",
		flock: "/tmp/z.lock",
	}
	if c != want {
		t.Errorf("config from env = %+v, want %+v", c, want)
	}

	// Flags win over the environment, false ones too.
	c, err = parseConfig([]string{"-crash-after", "2", "-garbage=false", "-slow-start", "0s"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.crashAfter != 2 || c.garbage || c.slowStart != 0 || !c.neverAnswer {
		t.Errorf("config = %+v, want flags to win", c)
	}

	for _, bad := range []map[string]string{
		{"FIXTURE_CRASH_AFTER": "many"},
		{"FIXTURE_GARBAGE": "yes please"},
		{"FIXTURE_SLOW_START": "-1s"},
		{"FIXTURE_GROW_MB": "-1"},
		{"FIXTURE_FORK_BOMB": "2001"}, // bounded whatever limit applies
	} {
		var out bytes.Buffer
		_, err := parseConfig(nil, func(k string) string { return bad[k] }, &out)
		if err == nil || isHelp(err) || out.Len() == 0 {
			t.Errorf("env %v: err %v, output %q; want a reported error", bad, err, out.String())
		}
	}
	if _, err := parseConfig([]string{"-help"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-help: err %v", err)
	}
}

// The sample tool asks its client for sampling and returns the answer's
// text (one content block, or a list of them); a refusal is a tool error.
func TestSample(t *testing.T) {
	t.Parallel()
	p := startMain(t)
	for i, answer := range []string{
		`{"role":"assistant","content":{"type":"text","text":"Paris"},"model":"m"}`,
		`{"role":"assistant","content":[{"type":"text","text":"Paris"}],"model":"m"}`,
	} {
		id := strconv.Itoa(i + 1)
		p.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"sample","arguments":{"prompt":"capital?"}}}`)
		req := p.next()
		if req.Method != "sampling/createMessage" || !strings.Contains(string(req.Params), "capital?") {
			t.Fatalf("the fixture asked %s %s", req.Method, req.Params)
		}
		p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + answer + `}`)
		if got := callText(t, p.next(), id); got != "sampled: Paris" {
			t.Errorf("sample = %q", got)
		}
	}
	p.send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sample","arguments":{"prompt":"x"}}}`)
	req := p.next()
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32601,"message":"no sampling"}}`)
	m := p.next()
	if !strings.Contains(string(m.Result), `"isError":true`) || !strings.Contains(string(m.Result), "refused") {
		t.Errorf("refused sample: %s", m.Result)
	}
	// hangOnRefusal: refused, the call answers nothing until cancelled
	// (the next message is the echo sent after it).
	p.send(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"sample","arguments":{"prompt":"x","hangOnRefusal":true}}}`)
	req = p.next()
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32601,"message":"no sampling"}}`)
	p.send(`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"text":"after"}}}`)
	if got := callText(t, p.next(), "11"); got != "after" {
		t.Errorf("after a refused hangOnRefusal sample, %q", got)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":10}}`)
	p.send(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo","arguments":{"text":"end"}}}`)
	if got := callText(t, p.next(), "12"); got != "end" {
		t.Errorf("after the cancel, %q (the cancelled call answers nothing)", got)
	}
}

// -tools-variant changes what tools/list says and what tools/call runs;
// -tools-variant-file reads the variant at start (missing: 0), so that a
// test changes the tools between two starts with one command line; a bad
// variant fails at start, naming the flag.
func TestToolsVariant(t *testing.T) {
	t.Parallel()
	list := func(p *inproc) (names []string, echo string) {
		p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		var r struct {
			Tools []json.RawMessage `json:"tools"`
		}
		result(t, p.next(), "1", &r)
		for _, raw := range r.Tools {
			var tool struct{ Name string }
			_ = json.Unmarshal(raw, &tool)
			names = append(names, tool.Name)
			if tool.Name == "echo" {
				echo = string(raw)
			}
		}
		return names, echo
	}
	base, echo0 := list(startMain(t))

	p := startMain(t, "-tools-variant", "1")
	names, echo1 := list(p)
	if echo1 == echo0 || !strings.Contains(echo1, `"upper"`) {
		t.Errorf("variant 1 echo %s, want it changed with an upper argument", echo1)
	}
	if slices.Contains(names, "meta") || !slices.Contains(names, "reverse") || len(names) != len(base) {
		t.Errorf("variant 1 tools %v (base %v): want meta gone and reverse added", names, base)
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"abc","upper":true}}}`)
	if got := callText(t, p.next(), "2"); got != "ABC" {
		t.Errorf("variant 1 echo upper = %q", got)
	}
	p.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"reverse","arguments":{"text":"abc"}}}`)
	if got := callText(t, p.next(), "3"); got != "cba" {
		t.Errorf("reverse = %q", got)
	}
	p.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"meta"}}`)
	if code := errorCode(t, p.next(), "4"); code != -32602 {
		t.Errorf("meta in variant 1: code %d, want unknown tool", code)
	}

	names3, echo3 := list(startMain(t, "-tools-variant", "3"))
	var def3 struct{ Description string }
	if err := json.Unmarshal([]byte(echo3), &def3); err != nil || def3.Description != InjectedDescription || !slices.Equal(names3, names) {
		t.Errorf("variant 3: tools %v, echo %s, want variant 1's with echo described by InjectedDescription", names3, echo3)
	}

	if names, _ := list(startMain(t, "-tools-variant", "2")); len(names) != 0 {
		t.Errorf("variant 2 lists %v, want none", names)
	}

	file := filepath.Join(t.TempDir(), "variant")
	if names, _ := list(startMain(t, "-tools-variant-file", file)); !slices.Equal(names, base) {
		t.Errorf("missing variant file: %v, want the usual tools", names)
	}
	if err := os.WriteFile(file, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, echo := list(startMain(t, "-tools-variant-file", file)); echo != echo1 {
		t.Errorf("variant file with 1: echo %s, want %s", echo, echo1)
	}

	for _, args := range [][]string{{"-tools-variant", "5"}, {"-tools-variant", "-1"}} {
		var out bytes.Buffer
		if _, err := parseConfig(args, func(string) string { return "" }, &out); err == nil || !strings.Contains(out.String(), "tools-variant must be 0 to 4") {
			t.Errorf("parseConfig(%v): %v, %q", args, err, out.String())
		}
	}
	if err := os.WriteFile(file, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := parseConfig(nil, func(k string) string {
		if k == "FIXTURE_TOOLS_VARIANT_FILE" {
			return file
		}
		return ""
	}, &out); err == nil || !strings.Contains(out.String(), `"two" is not a variant number`) {
		t.Errorf("a variant file with garbage: %v, %q", err, out.String())
	}
}

// -ask-roots: the first call makes the fixture ask roots/list, and no call
// is answered before the client answers it; the roots tool returns the
// answer, or the refusal, and the fixture asks once per process.
func TestAskRoots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ answer, want string }{
		{`"result":{"roots":[{"uri":"file:///w"}]}`, `roots: {"roots":[{"uri":"file:///w"}]}`},
		{`"error":{"code":-32601,"message":"Method not found"}`, "roots refused: -32601 Method not found"},
	} {
		p := startMain(t, "-ask-roots")
		p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}`)
		req := p.next()
		if req.Method != "roots/list" || len(req.ID) == 0 {
			t.Fatalf("before answering, the fixture sent %s %s", req.Method, req.ID)
		}
		p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,` + tc.answer + `}`)
		if got := callText(t, p.next(), "1"); got != "a" {
			t.Fatalf("echo after roots: %q", got)
		}
		p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"roots","arguments":{}}}`)
		if got := callText(t, p.next(), "2"); got != tc.want+"\ndeclared: " {
			t.Errorf("roots = %q, want %q and nothing declared (no initialize)", got, tc.want)
		}
	}
	// What initialize declared is reported as it came.
	p := startMain(t, "-ask-roots")
	p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := p.next(); m.Error != nil {
		t.Fatalf("initialize: %+v", m.Error)
	}
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"roots","arguments":{}}}`)
	req := p.next()
	p.send(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"roots":[]}}`)
	if got, want := callText(t, p.next(), "1"), "roots: {\"roots\":[]}\ndeclared: {\"roots\":{\"listChanged\":true}}"; got != want {
		t.Errorf("roots = %q, want %q", got, want)
	}
}
