package confclient

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// calls makes the scenario's calls through serve, as the go-sdk's
// conformance everything-client makes them against the scenario's server
// directly (its conformance/everything-client), with two exceptions
// where the go-sdk client would do mcpvisor's work: http-custom-headers
// connects as a 2025-11-25 client (which sends no Mcp-Param-* header, so
// those the server sees are mcpvisor's own), and http-invalid-tool-headers
// lists and calls over plain HTTP (the go-sdk client drops the tools
// whose x-mcp-header is invalid, so every tool mcpvisor lists is called).
func (h *harness) calls(ctx context.Context) error {
	switch h.scenario {
	case "initialize", "json-schema-ref-no-deref":
		sess, err := h.connect(ctx, nil, "")
		if err != nil {
			return err
		}
		defer sess.Close()
		_, err = h.listTools(ctx, sess)
		return err
	case "request-metadata":
		sess, err := h.connect(ctx, nil, "")
		if err != nil {
			return err
		}
		return sess.Close()
	case "tools_call":
		return h.listAndCall(ctx, nil, "add_numbers", map[string]any{"a": 5, "b": 3})
	case "sse-retry":
		return h.listAndCall(ctx, nil, "test_reconnection", map[string]any{})
	case "elicitation-sep1034-client-defaults":
		return h.listAndCall(ctx, acceptElicitation(map[string]any{}), "test_client_elicitation_defaults", map[string]any{})
	case "json-schema-2020-12-preservation":
		return h.schemaEcho(ctx)
	case "sep-2322-client-request-state":
		return h.requestState(ctx)
	case "http-standard-headers":
		return h.standardHeaders(ctx)
	case "http-custom-headers":
		return h.customHeaders(ctx)
	case "http-invalid-tool-headers":
		return h.invalidToolHeaders(ctx)
	}
	if strings.HasPrefix(h.scenario, "auth/") {
		return h.listAndCall(ctx, nil, "test-tool", map[string]any{})
	}
	return fmt.Errorf("unknown scenario %q", h.scenario)
}

// listAndCall lists the tools and calls name, which must be listed.
func (h *harness) listAndCall(ctx context.Context, opts *mcp.ClientOptions, name string, args map[string]any) error {
	sess, err := h.connect(ctx, opts, "")
	if err != nil {
		return err
	}
	defer sess.Close()
	tools, err := h.listTools(ctx, sess)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(tools, func(t *mcp.Tool) bool { return t.Name == name }) {
		return fmt.Errorf("tool %q is not listed", name)
	}
	return h.callTool(ctx, sess, name, args)
}

// schemaEcho echoes the focal tool's input schema, as listed, to the
// echo tool, so that the suite sees which keywords reached the client.
func (h *harness) schemaEcho(ctx context.Context) error {
	sess, err := h.connect(ctx, nil, "")
	if err != nil {
		return err
	}
	defer sess.Close()
	tools, err := h.listTools(ctx, sess)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(tools, func(t *mcp.Tool) bool { return t.Name == "json_schema_2020_12_tool" })
	if i < 0 {
		return fmt.Errorf("tool json_schema_2020_12_tool is not listed")
	}
	return h.callTool(ctx, sess, "json_schema_echo", map[string]any{"schema": tools[i].InputSchema})
}

// requestState calls the multi-round-trip tools, answering their
// elicitations; some are meant to be refused, so their errors are only
// logged.
func (h *harness) requestState(ctx context.Context) error {
	sess, err := h.connect(ctx, acceptElicitation(map[string]any{"confirmed": true}), "")
	if err != nil {
		return err
	}
	defer sess.Close()
	for _, name := range []string{"test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_unrelated", "test_mrtr_no_result_type"} {
		if err := h.callTool(ctx, sess, name, map[string]any{}); err != nil {
			h.logf("%v (expected for some)", err)
		}
	}
	return nil
}

// standardHeaders calls a tool, reads a resource and gets a prompt, so
// that the server sees the request metadata headers of each.
func (h *harness) standardHeaders(ctx context.Context) error {
	sess, err := h.connect(ctx, nil, "")
	if err != nil {
		return err
	}
	defer sess.Close()
	if tools, err := h.listTools(ctx, sess); err != nil {
		h.logf("%v", err)
	} else if len(tools) > 0 {
		if err := h.callTool(ctx, sess, tools[0].Name, map[string]any{}); err != nil {
			h.logf("%v", err)
		}
	}
	if res, err := sess.ListResources(ctx, nil); err != nil {
		h.logf("resources/list: %v", err)
	} else if len(res.Resources) > 0 {
		if _, err := sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: res.Resources[0].URI}); err != nil {
			h.logf("resources/read: %v", err)
		}
	}
	if res, err := sess.ListPrompts(ctx, nil); err != nil {
		h.logf("prompts/list: %v", err)
	} else if len(res.Prompts) > 0 {
		if _, err := sess.GetPrompt(ctx, &mcp.GetPromptParams{Name: res.Prompts[0].Name, Arguments: map[string]string{}}); err != nil {
			h.logf("prompts/get: %v", err)
		}
	}
	return nil
}

// customHeaders makes the calls the scenario's context names, as a
// 2025-11-25 client: the Mcp-Param-* headers the server checks can only
// be mcpvisor's.
func (h *harness) customHeaders(ctx context.Context) error {
	if len(h.ctx.ToolCalls) == 0 {
		return fmt.Errorf("%s names no toolCalls", contextEnv)
	}
	sess, err := h.connect(ctx, nil, legacyVersion)
	if err != nil {
		return err
	}
	defer sess.Close()
	if _, err := h.listTools(ctx, sess); err != nil {
		return err
	}
	for _, c := range h.ctx.ToolCalls {
		if c.Arguments == nil {
			c.Arguments = map[string]any{}
		}
		if err := h.callTool(ctx, sess, c.Name, c.Arguments); err != nil {
			h.logf("%v", err)
		}
	}
	return nil
}

// invalidToolHeaders calls every tool mcpvisor lists: mcpvisor, not the
// client, must keep those with an invalid x-mcp-header from the server.
func (h *harness) invalidToolHeaders(ctx context.Context) error {
	s := &rawSession{url: h.serve.endpoint()}
	if err := h.do(ctx, "initialize", func() error { return s.open(ctx) }); err != nil {
		return err
	}
	var list struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	err := h.do(ctx, "tools/list", func() error {
		res, err := s.call(ctx, "tools/list", map[string]any{})
		if err != nil {
			return err
		}
		return json.Unmarshal(res, &list)
	})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(list.Tools))
	for _, t := range list.Tools {
		names = append(names, t.Name)
	}
	h.logf("mcpvisor lists %v", names)
	for _, name := range names {
		_, err := s.call(ctx, "tools/call", map[string]any{"name": name, "arguments": map[string]any{"region": "us-west1"}})
		if err != nil {
			h.logf("tools/call %s: %v", name, err)
		}
	}
	return nil
}
