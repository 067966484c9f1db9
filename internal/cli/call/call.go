package call

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/gateway"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/sse"
)

// ExitToolError is call's exit code for a tool that answered with
// isError: true (the call itself went through).
const ExitToolError = 4

// client is the admin API's client, with the few requests call makes as
// an MCP client of a server's own endpoint.
type client struct{ adminclient.Client }

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
	cmd.Flags().BoolVar(&o.OutputJSON, "output-json", false, "print the whole result as JSON")
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
	// An interrupt ends the call, and its session is still ended
	// (the deferred close outlives ctx).
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	sess, err := openSession(ctx, &client{o.API}, o.Server)
	if err != nil {
		return err
	}
	defer sess.close(ctx)
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
	result, err := sess.call(ctx, "tools/call", map[string]any{"name": o.Tool, "arguments": arguments})
	if err != nil {
		return err
	}
	out := o.IO.Out
	if o.OutputJSON {
		var b bytes.Buffer
		_ = json.Indent(&b, result, "", "  ")
		fmt.Fprintln(out, b.String())
	} else {
		printContent(out, result)
	}
	if string(rpc.Member(result, "isError")) == "true" {
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

// cliSession is an MCP session of the CLI's on one server's endpoint.
type cliSession struct {
	api      *client
	server   string
	endpoint string
	hdr      http.Header
	nextID   int
}

// openSession opens a 2025-11-25 session on server's own endpoint (which
// starts or wakes the server as any client's would).
func openSession(ctx context.Context, api *client, server string) (*cliSession, error) {
	s := &cliSession{api: api, server: server, endpoint: "/servers/" + url.PathEscape(server) + "/mcp", hdr: http.Header{}}
	init := fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpvisor-cli","version":%q}}}`, gateway.Version)
	resp, h, err := api.rpc(ctx, s.endpoint, s.hdr, []byte(init))
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, errors.New(nameOnce(server, resp.Error.Message))
	}
	s.hdr.Set("Mcp-Session-Id", h.Get("Mcp-Session-Id"))
	s.hdr.Set("Mcp-Protocol-Version", "2025-11-25")
	if _, _, err := api.rpc(ctx, s.endpoint, s.hdr, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		s.close(ctx)
		return nil, err
	}
	return s, nil
}

// call sends one request and returns its result, or its JSON-RPC error as
// an error.
func (s *cliSession) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	s.nextID++
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, s.nextID, method, p)
	resp, _, err := s.api.rpc(ctx, s.endpoint, s.hdr, []byte(body))
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("%s (JSON-RPC error %d)", nameOnce(s.server, resp.Error.Message), resp.Error.Code)
	}
	return resp.Result, nil
}

// toolSchema is the inputSchema of tool, read from the server's tools/list
// (every page); an error if the server does not list it.
func (s *cliSession) toolSchema(ctx context.Context, tool string) (json.RawMessage, error) {
	cursor := ""
	for pages := 0; pages < 1000; pages++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		res, err := s.call(ctx, "tools/list", params)
		if err != nil {
			return nil, err
		}
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(res, &page); err != nil {
			return nil, fmt.Errorf("server %s: tools/list: %w", s.server, err)
		}
		for _, t := range page.Tools {
			if name, _ := rpc.StringMember(t, "name"); name == tool {
				return rpc.Member(t, "inputSchema"), nil
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	var t admin.Tools
	if s.api.GetJSON(ctx, "/api/servers/"+url.PathEscape(s.server)+"/tools", &t) == nil && slices.Contains(t.Held, tool) {
		return nil, fmt.Errorf("tool %s of server %s is held back: its definition is new or changed since it was approved (pinned); review it with `mcpvisor tools diff %s` and approve it with `mcpvisor tools approve %s %s`", tool, s.server, s.server, s.server, tool)
	}
	return nil, fmt.Errorf("server %s has no tool %q (mcpvisor tools %s lists them)", s.server, tool, s.server)
}

// close ends the session: a per-session instance of the server stops now
// rather than at the session's expiry.
func (s *cliSession) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if resp, err := s.api.Do(ctx, http.MethodDelete, s.endpoint, s.hdr, nil); err == nil {
		resp.Body.Close()
	}
}

// refuse answers a server's request m, on the session of hdr, with an
// error: mcpvisor call declares no client capability.
func (c *client) refuse(ctx context.Context, path string, hdr http.Header, m *rpc.Message) {
	answer := (&rpc.Message{ID: m.ID, Error: &rpc.Error{Code: rpc.MethodNotFound,
		Message: "mcpvisor call cannot answer " + m.Method + " (it declares no sampling, elicitation or roots)"}}).Encode()
	if resp, err := c.post(ctx, path, hdr, answer); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
}

// printContent prints a tool result's content: text as it is, anything
// else as one line of JSON; structured content if there is no content.
func printContent(w io.Writer, result json.RawMessage) {
	var r struct {
		Content    []json.RawMessage `json:"content"`
		Structured json.RawMessage   `json:"structuredContent"`
	}
	_ = json.Unmarshal(result, &r)
	for _, c := range r.Content {
		if t, _ := rpc.StringMember(c, "type"); t == "text" {
			text, _ := rpc.StringMember(c, "text")
			fmt.Fprintln(w, text)
			continue
		}
		fmt.Fprintln(w, string(c))
	}
	if len(r.Content) == 0 && r.Structured != nil {
		fmt.Fprintln(w, string(r.Structured))
	}
}

// post sends one JSON-RPC message to an MCP endpoint, as a Streamable
// HTTP client does, with the session's headers hdr.
func (c *client) post(ctx context.Context, path string, hdr http.Header, body []byte) (*http.Response, error) {
	h := hdr.Clone()
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	return c.Do(ctx, http.MethodPost, path, h, body)
}

// rpc posts one JSON-RPC message to path and returns the response to it
// (nil for a notification; a request always gets one, or an error), from
// a JSON reply or an event stream, with the reply's headers.
func (c *client) rpc(ctx context.Context, path string, hdr http.Header, body []byte) (*rpc.Message, http.Header, error) {
	resp, err := c.post(ctx, path, hdr, body)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusAccepted {
		if m, err := rpc.Decode(body); err == nil && m.IsRequest() {
			return nil, nil, fmt.Errorf("%s%s: %s was accepted with no response", c.Addr, path, m.Method)
		}
		return nil, resp.Header, nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/event-stream" {
		// The response is the stream's message that is one; the others
		// (progress, log lines) are the call's, and not printed.
		var tooLarge error
		r := sse.NewReader(resp.Body, 64<<20)
		for {
			ev, err := r.Next()
			if errors.Is(err, sse.ErrEventTooLarge) {
				tooLarge = err // a notification may be; the response is said below if it was
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("reading the answer of %s: %w", c.Addr, err)
			}
			if ev.Type != "message" {
				continue
			}
			m, err := rpc.Decode(ev.Data)
			switch {
			case err != nil:
			case m.IsResponse():
				return m, resp.Header, nil
			case m.IsRequest():
				// The server asks the client (sampling, elicitation,
				// roots): the CLI has nothing to give, and says so at
				// once rather than leave the call waiting on it.
				c.refuse(ctx, path, hdr, m)
			}
		}
		if tooLarge != nil {
			return nil, nil, fmt.Errorf("reading the answer of %s: %w", c.Addr, tooLarge)
		}
		return nil, nil, fmt.Errorf("%s%s: the stream ended without a response", c.Addr, path)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer of %s: %w", c.Addr, err)
	}
	m, err := rpc.Decode(b)
	if err == nil && m.IsResponse() && m.Error != nil && resp.StatusCode == http.StatusNotFound {
		return nil, nil, fmt.Errorf("%s", m.Error.Message) // no such server
	}
	if err != nil || !m.IsResponse() {
		if resp.StatusCode == http.StatusNotFound {
			return nil, nil, fmt.Errorf("%s%s: %s", c.Addr, path, strings.TrimSpace(string(b)))
		}
		return nil, nil, fmt.Errorf("%s%s: %s: %.300s", c.Addr, path, resp.Status, bytes.TrimSpace(b))
	}
	return m, resp.Header, nil
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
