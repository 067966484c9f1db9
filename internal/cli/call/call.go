package call

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// ExitToolError is call's exit code for a tool that answered with
// isError: true (the call itself went through).
const ExitToolError = 4

// Options are call's.
type Options struct {
	IO cmdutil.IOStreams
	// Server and Tool are the server and the tool named (arguments).
	Server, Tool string
	API          adminclient.Client
	// Args are the --arg key=value; ArgsJSON the --json object.
	Args       []string
	ArgsJSON   string
	OutputJSON bool
	Timeout    time.Duration
}

// NewCmdCall is call: its flags fill an Options, run by runF (nil:
// RunCall).
func NewCmdCall(streams cmdutil.IOStreams, runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{IO: streams}
	cmd := &cobra.Command{
		Use:   "call SERVER TOOL [--arg key=value ...] [--json '{...}']",
		Short: "Call one tool of one server of a running mcpvisor serve and print its result",
		Long: "Calls TOOL of SERVER through the server's own endpoint (/servers/SERVER/mcp) of a running mcpvisor serve, " +
			"starting or waking the server if need be, and prints the result's text (other content as JSON; --output-json " +
			"prints the whole result). --json gives the arguments as one JSON object; each --arg key=value sets one, " +
			"its value read as the tool's input schema says (text for a string property, JSON for numbers, booleans, " +
			"objects and arrays; for a property the schema does not describe, JSON if it parses, else text).\n\n" +
			"Exit codes: 0 the tool succeeded; 4 the tool answered with isError: true; 1 the call failed " +
			"(no serve at --addr, no such server or tool, a JSON-RPC error, a timeout); 2 a bad command line.",
		Args: cobra.ExactArgs(2),
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, pos []string) error {
			o.IO = streams.Or(cmd)
			o.Server, o.Tool = pos[0], pos[1]
			return nil
		}, runF, RunCall),
	}
	cmdutil.AddAPIFlags(cmd, &o.API)
	cmd.Flags().StringArrayVar(&o.Args, "arg", nil, "an argument, key=value (repeatable)")
	cmd.Flags().StringVar(&o.ArgsJSON, "json", "", "the arguments as one JSON object (--arg adds to it)")
	cmd.Flags().BoolVar(&o.OutputJSON, "output-json", false, "print the whole result as JSON (as the MCP client reads it)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

// RunCall calls the tool through the server's own endpoint and prints its
// result; a tool that answered isError ends with ExitToolError.
func RunCall(parent context.Context, o *Options) error {
	// The command line first: a bad one starts no server.
	if _, err := callArguments(o.ArgsJSON, o.Args, nil); err != nil {
		return shutdown.UsageError{Err: err}
	}
	// An interrupt ends the call, and its session is still ended.
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	sess, err := openSession(ctx, &o.API, o.Server)
	if err != nil {
		return err
	}
	// The session's end outlives ctx, within closeBound; a second
	// interrupt while it is under way ends the command at once.
	defer func() {
		stop()
		sess.close()
	}()
	// The tool's schema, as the server lists it now, to read each
	// --arg as the tool wants it.
	schema, err := sess.toolSchema(ctx, o.Tool)
	if err != nil {
		return err
	}
	arguments, err := callArguments(o.ArgsJSON, o.Args, schema)
	if err != nil {
		return shutdown.UsageError{Err: err}
	}
	result, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: o.Tool, Arguments: arguments})
	if err != nil {
		return sess.fail(ctx, err, true)
	}
	out := o.IO.Out
	if o.OutputJSON {
		b, err := json.MarshalIndent(result, "", "  ")
		if err != nil {
			return fmt.Errorf("server %s: the result of %s: %w", o.Server, o.Tool, err)
		}
		fmt.Fprintln(out, string(b))
	} else {
		printContent(out, result)
	}
	if result.IsError {
		return shutdown.ExitCode(ExitToolError)
	}
	return nil
}

// callArguments builds a call's arguments: the object argsJSON, then each
// key=value of args, read as schema's property key says.
func callArguments(argsJSON string, args []string, schema json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if argsJSON != "" {
		if err := json.Unmarshal([]byte(argsJSON), &out); err != nil || out == nil {
			return nil, fmt.Errorf("--json: not a JSON object: %s", argsJSON)
		}
	}
	props := rpc.Member(schema, "properties")
	for _, a := range args {
		key, val, ok := strings.Cut(a, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("--arg %q: want key=value", a)
		}
		typ := schemaType(rpc.Member(props, key))
		switch {
		case typ == "string":
			out[key], _ = json.Marshal(val)
		case typ != "":
			if !json.Valid([]byte(val)) {
				return nil, fmt.Errorf("--arg %s: the tool's schema says %s, and %q is not JSON", key, typ, val)
			}
			out[key] = json.RawMessage(val)
		case json.Valid([]byte(val)):
			out[key] = json.RawMessage(val)
		default:
			out[key], _ = json.Marshal(val)
		}
	}
	return out, nil
}

// schemaType is what a property's schema makes of a command-line value:
// "string" when text is the only non-null type it allows (type "string",
// ["string", "null"], or an anyOf/oneOf of such), another type name when
// that is the only one, "" when it allows several or says nothing (a $ref).
func schemaType(prop json.RawMessage) string {
	types := map[string]bool{}
	var add func(json.RawMessage)
	add = func(p json.RawMessage) {
		switch t := rpc.Member(p, "type"); {
		case len(t) > 0 && t[0] == '"':
			s, _ := rpc.String(t)
			types[s] = true
		case len(t) > 0 && t[0] == '[':
			var list []string
			_ = json.Unmarshal(t, &list)
			for _, s := range list {
				types[s] = true
			}
		}
		for _, k := range []string{"anyOf", "oneOf"} {
			var alts []json.RawMessage
			_ = json.Unmarshal(rpc.Member(p, k), &alts)
			for _, a := range alts {
				add(a)
			}
		}
	}
	add(prop)
	delete(types, "null")
	if len(types) != 1 {
		return ""
	}
	for t := range types {
		return t
	}
	return ""
}

// legacyVersion is the protocol version call asks for: a 2025-11-25
// session, which a per-session server's one instance serves from tools/list
// to tools/call and which ends with the session's DELETE. (The go-sdk
// would otherwise try 2026-07-28 first, in which each request stands
// alone, and a server's request for sampling fails the call instead of
// reaching the tool as a refusal.)
const legacyVersion = "2025-11-25"

// codeRejected is the code of the go-sdk's "rejected by transport" error,
// which its transport wraps around any failure to deliver a request or to
// read its reply (the go-sdk does not export it).
const codeRejected = -32005

// closeBound bounds a session's end. The go-sdk's Close first waits for
// the writes under way (an answer to a server's request is sent with no
// deadline of its own), then sends its DELETE; past the bound every
// request of the session is cut, and Close returns.
const closeBound = 6 * time.Second

// session is an MCP session of the CLI's on one server's own endpoint.
type session struct {
	*mcp.ClientSession
	api      *adminclient.Client
	server   string
	endpoint string // as the user gave it: --addr and the path
	http     *transport
}

// close ends the session: its DELETE, within closeBound.
func (s *session) close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Close()
	}()
	t := time.NewTimer(closeBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.http.cut()
		<-done // every request it could wait on has ended
	}
}

// transport carries a session's requests: each ends when the session is
// cut, and the JSON-RPC error of a reply that is not 2xx (serve refusing
// a session: too many, shutting down) is kept for the error the go-sdk
// makes of it, which says only the status.
type transport struct {
	next    http.RoundTripper
	life    context.Context
	cut     context.CancelFunc
	mu      sync.Mutex
	refusal string
}

func newTransport(next http.RoundTripper) *transport {
	if next == nil {
		next = http.DefaultTransport
	}
	life, cut := context.WithCancel(context.Background())
	return &transport{next: next, life: life, cut: cut}
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(t.life, cancel)
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if m, err := rpc.Decode(b); err == nil && m.Error != nil && m.Error.Message != "" {
			t.mu.Lock()
			t.refusal = m.Error.Message
			t.mu.Unlock()
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp.Body = &endBody{ReadCloser: resp.Body, end: func() { stop(); cancel() }}
	return resp, nil
}

// lastRefusal is the message of the last JSON-RPC error a reply that was
// not 2xx carried; "" for none.
func (t *transport) lastRefusal() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refusal
}

// endBody runs end once its body is closed.
type endBody struct {
	io.ReadCloser
	once sync.Once
	end  func()
}

func (b *endBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.end)
	return err
}

// openSession opens a session on server's own endpoint (which starts or
// wakes the server as any client's would).
func openSession(ctx context.Context, api *adminclient.Client, server string) (*session, error) {
	// The server first, through the admin API: an unreachable serve and
	// an unknown name are then said in the words of every other command
	// (the endpoint's 404 would come back from the go-sdk as an HTTP error).
	if _, err := api.Get(ctx, "/api/servers/"+url.PathEscape(server)); err != nil {
		return nil, err
	}
	hc, err := api.HTTPClient()
	if err != nil {
		return nil, err
	}
	path := "/servers/" + url.PathEscape(server) + "/mcp"
	s := &session{api: api, server: server, endpoint: api.Addr + path, http: newTransport(hc.Transport)}
	hc.Transport = s.http
	// No capabilities: sampling, elicitation and roots are refused.
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpvisor-cli", Version: gateway.Version}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	c.AddReceivingMiddleware(refuse)
	// No standalone stream: the CLI waits for nothing but its answers.
	t := &mcp.StreamableClientTransport{Endpoint: api.URL(path), HTTPClient: hc, DisableStandaloneSSE: true}
	s.ClientSession, err = c.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
	if err != nil {
		s.http.cut()
		return nil, s.fail(ctx, err, false)
	}
	return s, nil
}

// refuse answers a server's request for what only a client with the
// capability gives (sampling, elicitation, roots) at once with Method not
// found, as serve answers one its client did not declare: mcpvisor call
// declares none, and has nothing to give. (Left to itself, the go-sdk
// would answer roots/list with no roots, and the others with other
// codes.) The go-sdk words the answer itself: method not found: "roots/list".
func refuse(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "sampling/createMessage", "elicitation/create", "roots/list":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}
		}
		return next(ctx, method, req)
	}
}

// fail is err, of a request on the session, in words: the end of ctx
// (the timeout, an interrupt) as its cause; a request the transport
// failed as serve's refusal or the transport's error; a JSON-RPC error as its
// message naming the server once, and its code if withCode; anything else
// as the go-sdk says it, naming the server.
func (s *session) fail(ctx context.Context, err error, withCode bool) error {
	if ctx.Err() != nil {
		return fmt.Errorf("POST %s: %w", s.endpoint, context.Cause(ctx))
	}
	var e *jsonrpc.Error
	switch {
	case errors.As(err, &e) && e.Code == codeRejected:
		// The request got no answer of the server's: a reply that was
		// not one (its refusal said, if it had one), or no reply at all
		// (the go-sdk's whole account of it).
		if msg := s.http.lastRefusal(); msg != "" {
			return errors.New(nameOnce(s.server, msg))
		}
		return fmt.Errorf("server %s: %w", s.server, err)
	case errors.As(err, &e) && withCode:
		return fmt.Errorf("%s (JSON-RPC error %d)", nameOnce(s.server, e.Message), e.Code)
	case errors.As(err, &e):
		return errors.New(nameOnce(s.server, e.Message))
	}
	return fmt.Errorf("server %s: %w", s.server, err)
}

// toolSchema is the inputSchema of tool, read from the server's tools/list
// (every page); an error if the server does not list it.
func (s *session) toolSchema(ctx context.Context, tool string) (json.RawMessage, error) {
	params := &mcp.ListToolsParams{}
	for pages := 0; pages < 1000; pages++ {
		res, err := s.ListTools(ctx, params)
		if err != nil {
			return nil, s.fail(ctx, err, true)
		}
		for _, t := range res.Tools {
			if t.Name == tool {
				return json.Marshal(t.InputSchema)
			}
		}
		if params.Cursor = res.NextCursor; params.Cursor == "" {
			break
		}
	}
	var t admin.Tools
	if s.api.GetJSON(ctx, "/api/servers/"+url.PathEscape(s.server)+"/tools", &t) == nil && slices.Contains(t.Held, tool) {
		return nil, fmt.Errorf("tool %s of server %s is held back: its definition is new or changed since it was approved (pinned); review it with `mcpvisor tools diff %s` and approve it with `mcpvisor tools approve %s %s`", tool, s.server, s.server, s.server, tool)
	}
	return nil, fmt.Errorf("server %s has no tool %q (mcpvisor tools %s lists them)", s.server, tool, s.server)
}

// printContent prints a tool result's content: text as it is, anything
// else as one line of JSON; structured content if there is no content.
func printContent(w io.Writer, result *mcp.CallToolResult) {
	for _, c := range result.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			fmt.Fprintln(w, t.Text)
			continue
		}
		b, _ := json.Marshal(c)
		fmt.Fprintln(w, string(b))
	}
	if len(result.Content) == 0 && result.StructuredContent != nil {
		b, _ := json.Marshal(result.StructuredContent)
		fmt.Fprintln(w, string(b))
	}
}

// nameOnce is msg naming server once: mcpvisor's own errors (a server
// that cannot start, is in a crash loop, timed out) name it already; a
// server's own error messages do not.
func nameOnce(server, msg string) string {
	if strings.HasPrefix(msg, "server "+server+" ") {
		return msg
	}
	return "server " + server + ": " + msg
}
