package confclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// scenarioTimeout bounds one scenario, below the suite's own kill of a
// client (30 s by default), so that the harness reports serve's log
// itself.
const scenarioTimeout = 25 * time.Second

// settleTimeout bounds the wait for the server's first start to end
// (running, or needs-login, or failed).
const settleTimeout = 10 * time.Second

// Main runs the harness on args (the suite's argv without the program;
// the server's URL last) and returns the exit code. With BrowseEnv set,
// or "browse" first, it is the login's browser instead (Browse).
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	if os.Getenv(BrowseEnv) == "1" || len(args) > 1 && args[0] == "browse" {
		return Browse(args, stderr)
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "usage: %s=… %s=… conformance-client URL\n", BinEnv, scenarioEnv)
		return 2
	}
	h := &harness{
		url:      args[len(args)-1],
		scenario: os.Getenv(scenarioEnv),
		version:  os.Getenv(versionEnv),
		bin:      os.Getenv(BinEnv),
		log:      stderr,
	}
	if h.bin == "" || h.scenario == "" {
		fmt.Fprintf(stderr, "conformance-client: %s and %s must be set\n", BinEnv, scenarioEnv)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "conformance-client: %v\n", err)
		return 1
	}
	h.self = self
	if h.ctx, err = parseContext(os.Getenv(contextEnv)); err != nil {
		fmt.Fprintf(stderr, "conformance-client: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, scenarioTimeout)
	defer cancel()
	start := time.Now()
	if err := h.run(ctx); err != nil {
		fmt.Fprintf(stderr, "conformance-client: %s: %v\n", h.scenario, err)
		return 1
	}
	h.logf("%s done in %v", h.scenario, time.Since(start).Round(time.Millisecond))
	return 0
}

type harness struct {
	url, scenario, version string
	bin, self              string
	ctx                    scenarioContext
	log                    io.Writer
	serve                  *served
	logins                 int
	// runLogin logs in once (`mcpvisor login s` unless a test sets it).
	runLogin func(context.Context) error
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.log, "conformance-client: "+format+"\n", args...)
}

// run configures and starts serve, makes the scenario's calls through
// it, and stops it; on failure, serve's log tail goes to the log.
func (h *harness) run(ctx context.Context) (err error) {
	dir, err := os.MkdirTemp("", "conformance-client-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg, env, err := writeConfig(dir, h.scenario, h.url, h.ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if h.serve, err = startServe(ctx, h.bin, cfg, dir, env); err != nil {
		return err
	}
	h.logf("serve listens at %s after %v", h.serve.addr, time.Since(start).Round(time.Millisecond))
	defer func() {
		if stopErr := h.serve.stop(); stopErr != nil && err == nil {
			err = stopErr
		}
		if err != nil {
			fmt.Fprintf(h.log, "---- mcpvisor serve's log (last %d lines)\n%s\n----\n", tailLines, h.serve.log)
		}
	}()
	if strings.HasPrefix(h.scenario, "auth/") {
		// The server's first start tells whether it needs a login; the
		// state, not the scenario's name, decides.
		st, err := h.serve.settled(ctx, settleTimeout)
		if err != nil {
			return err
		}
		h.logf("server s is %s after %v (%s)", st.State, time.Since(start).Round(time.Millisecond), st.LastError)
		if st.State == NeedsLogin {
			if err := h.login(ctx); err != nil {
				return err
			}
		}
	}
	return h.calls(ctx)
}

// login runs `mcpvisor login s`, at most maxLogins times a scenario.
func (h *harness) login(ctx context.Context) error {
	if clientCredentials(h.scenario) {
		return errors.New("server s needs a login, but it is configured for the client credentials grant (no user)")
	}
	if h.logins >= maxLogins {
		return fmt.Errorf("server s still needs a login after %d logins", h.logins)
	}
	h.logins++
	start := time.Now()
	run := h.runLogin
	if run == nil {
		run = func(ctx context.Context) error { return login(ctx, h.bin, h.self, h.serve.addr) }
	}
	err := run(ctx)
	h.logf("login %d: %v after %v", h.logins, errOrOK(err), time.Since(start).Round(time.Millisecond))
	return err
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// do runs f, and when it fails because the server needs a login (the
// error's data says so, or serve's state), logs in and runs it again.
func (h *harness) do(ctx context.Context, what string, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !h.needsLogin(ctx, err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		h.logf("%s: needs a login: %v", what, err)
		if lerr := h.login(ctx); lerr != nil {
			return fmt.Errorf("%s: %w (login: %w)", what, err, lerr)
		}
	}
}

// needsLogin reports whether err says that the server needs a login: a
// JSON-RPC error whose data has "needsLogin": true, or else the server's
// state.
func (h *harness) needsLogin(ctx context.Context, err error) bool {
	if ErrorNeedsLogin(err) {
		return true
	}
	st, serr := h.serve.status(ctx)
	return serr == nil && st.State == NeedsLogin
}

// ErrorNeedsLogin reports whether err holds a JSON-RPC error whose data
// has "needsLogin": true.
func ErrorNeedsLogin(err error) bool {
	var data json.RawMessage
	var wire *jsonrpc.Error
	var raw *rpcError
	switch {
	case errors.As(err, &wire):
		data = wire.Data
	case errors.As(err, &raw):
		data = raw.Data
	default:
		return false
	}
	var d struct {
		NeedsLogin bool `json:"needsLogin"`
	}
	return json.Unmarshal(data, &d) == nil && d.NeedsLogin
}

// connect connects the go-sdk client to serve's endpoint of the server
// (at version, "" for the client's default: 2026-07-28).
func (h *harness) connect(ctx context.Context, opts *mcp.ClientOptions, version string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "conformance-client", Version: "1.0.0"}, opts)
	var sess *mcp.ClientSession
	var sopts *mcp.ClientSessionOptions
	if version != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	err := h.do(ctx, "connect", func() error {
		var err error
		sess, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.serve.endpoint(), MaxRetries: -1}, sopts)
		return err
	})
	return sess, err
}

// listTools lists the tools of sess.
func (h *harness) listTools(ctx context.Context, sess *mcp.ClientSession) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	err := h.do(ctx, "tools/list", func() error {
		res, err := sess.ListTools(ctx, nil)
		if err == nil {
			tools = res.Tools
		}
		return err
	})
	return tools, err
}

// callTool calls name with args through sess.
func (h *harness) callTool(ctx context.Context, sess *mcp.ClientSession, name string, args map[string]any) error {
	return h.do(ctx, "tools/call "+name, func() error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err == nil && res.IsError {
			h.logf("tools/call %s: the tool's error: %s", name, toolText(res))
		}
		return err
	})
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// acceptElicitation answers every elicitation with content.
func acceptElicitation(content map[string]any) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: content}, nil
		},
	}
}
