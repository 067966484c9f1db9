package confclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// legacyVersion is the protocol version of rawSession.
const legacyVersion = "2025-11-25"

// rawSession is a 2025-11-25 Streamable HTTP session over plain HTTP,
// for what the go-sdk client would hide: it keeps every tool a
// tools/list answers (the go-sdk drops those with an invalid
// x-mcp-header) and sends no Mcp-Param-* header (so what reaches the
// server is what mcpvisor computed).
type rawSession struct {
	url string
	sid string
	id  int
}

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string {
	if len(e.Data) > 0 {
		return fmt.Sprintf("JSON-RPC error %d: %s (data %s)", e.Code, e.Message, e.Data)
	}
	return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message)
}

type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

// open initializes the session.
func (s *rawSession) open(ctx context.Context) error {
	_, err := s.call(ctx, "initialize", map[string]any{
		"protocolVersion": legacyVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "conformance-client", "version": "0"},
	})
	if err != nil {
		return err
	}
	return s.post(ctx, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}, nil)
}

// call sends a request and returns its result.
func (s *rawSession) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	s.id++
	var m message
	if err := s.post(ctx, map[string]any{"jsonrpc": "2.0", "id": s.id, "method": method, "params": params}, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%s: %w", method, m.Error)
	}
	return m.Result, nil
}

// post sends msg; when answer is not nil, it reads the response to the
// request (from a JSON body or an event stream) into it.
func (s *rawSession) post(ctx context.Context, msg any, answer *message) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
		req.Header.Set("MCP-Protocol-Version", legacyVersion)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		s.sid = sid
	}
	if answer == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("HTTP %s", resp.Status)
		}
		return nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct != "text/event-stream" {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, answer); err != nil || (answer.Result == nil && answer.Error == nil) {
			return fmt.Errorf("HTTP %s: %s", resp.Status, bytes.TrimSpace(b))
		}
		return nil
	}
	// An event stream: the answer is the message with an id and no
	// method (the server's own requests and notifications have one).
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data:"); ok {
			data.WriteString(strings.TrimPrefix(d, " "))
			continue
		}
		if line != "" || data.Len() == 0 {
			continue
		}
		var m message
		if json.Unmarshal([]byte(data.String()), &m) == nil && m.Method == "" && len(m.ID) > 0 {
			*answer = m
			return nil
		}
		data.Reset()
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("HTTP %s: the event stream ended with no answer", resp.Status)
}
