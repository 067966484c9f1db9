package backend

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// A remote server's era (2026-07-28, basic/transports/streamable-http,
// "Backward Compatibility"). mcpvisor probes an "auto" or "modern" server
// with a modern server/discover POST. A DiscoverResult listing
// ModernVersion makes it modern; a recognized modern error (unsupported
// version, missing capability, header mismatch) is a modern server
// mcpvisor cannot speak to; any other 4xx answer, a JSON-RPC error that is
// not a modern one, or no answer within the probe bound makes it legacy,
// and it is initialized over the go-sdk transport as before.
//
// A modern server's connection is a modernConn: every request is a POST
// of its own with the request metadata headers, answered by one JSON
// object or an event stream scoped to it; there is no session, no GET
// stream, no resumption, and no notification from mcpvisor (closing a
// request's POST cancels it).

// probeTimeout bounds the server/discover probe of an "auto" remote
// server (a variable so that tests can shorten it).
var probeTimeout = ProbeTimeout

// maxErrorBody bounds the body of an HTTP error answer that is read for
// its JSON-RPC error.
const maxErrorBody = 1 << 20

// The request metadata headers of 2026-07-28 Streamable HTTP.
const (
	methodHeader = "Mcp-Method"
	nameHeader   = "Mcp-Name"
)

// modernHeaders are the headers a modern POST of req carries: the protocol
// version of its _meta (ModernVersion if it has none), its method, and
// for tools/call, prompts/get and resources/read the name or URI it is
// about (for the tasks extension's tasks/get, tasks/update and
// tasks/cancel, the taskId).
func modernHeaders(h http.Header, method string, params json.RawMessage) {
	version, ok := rpc.StringMember(rpc.Member(params, "_meta"), metaProtocolVersion)
	if !ok || version == "" {
		version = ModernVersion
	}
	h.Set(protocolVersionHeader, version)
	h.Set(methodHeader, method)
	member := ""
	switch method {
	case "tools/call", "prompts/get":
		member = "name"
	case "resources/read":
		member = "uri"
	case "tasks/get", "tasks/update", "tasks/cancel":
		member = "taskId"
	}
	if member != "" {
		if name, ok := rpc.StringMember(params, member); ok {
			h.Set(nameHeader, headerValue(name))
		}
	}
}

// headerValue is s as an MCP header value: as it is when it is plain,
// visible ASCII (spaces inside it allowed), else Base64 in the
// "=?base64?...?=" form, which a plain value that looks like that form
// takes too.
func headerValue(s string) string {
	plain := !strings.HasPrefix(s, "=?base64?") || !strings.HasSuffix(s, "?=")
	if s != "" && (s[0] == ' ' || s[0] == '\t' || s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		plain = false
	}
	for i := 0; plain && i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			plain = false
		}
	}
	if plain {
		return s
	}
	return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?="
}

// isModernError reports whether code is one of the errors by which a
// modern server refuses a request it cannot serve as sent.
func isModernError(code int) bool {
	switch code {
	case rpc.UnsupportedProtocolVersion, rpc.MissingClientCapability, rpc.HeaderMismatch:
		return true
	}
	return false
}

// exchange is one modern POST: its HTTP status, and the JSON-RPC response
// the answer carried (nil if none). The answer's other messages (a
// stream's notifications) are handed to each first.
type exchange struct {
	status int
	resp   *jsonrpc.Response
}

// postModern POSTs one request to a modern server and reads the answer:
// the response of a 2xx answer (one JSON object, or the event stream up
// to its response), or the JSON-RPC error an error answer's body holds.
// The response is taken as the request's, whatever id it has (a stream is
// scoped to its request; an HTTP error's JSON-RPC error may have none).
// err is the failure of the exchange itself (a *url.Error when the server
// could not be reached) or of reading the answer.
func (b *connStream) postModern(ctx context.Context, req *jsonrpc.Request, each func(jsonrpc.Message)) (exchange, error) {
	x, err := b.postModernOnce(ctx, req, each)
	if req.Method == "tools/list" && x.resp != nil && x.resp.Error == nil {
		// Tools whose x-mcp-header annotations are invalid are left
		// out of the list, as the revision requires of a client.
		if res, rejected := b.params.learn(x.resp.Result); res != nil {
			x.resp.Result = res
			for _, r := range rejected {
				b.log.Warn("a tool is left out: its x-mcp-header annotations are invalid", "server", b.name, "reason", r)
			}
		}
	}
	return x, err
}

// postModernOnce is postModern but for what it learns of the tools.
func (b *connStream) postModernOnce(ctx context.Context, req *jsonrpc.Request, each func(jsonrpc.Message)) (exchange, error) {
	data, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		return exchange{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(data))
	if err != nil {
		return exchange{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json, text/event-stream")
	modernHeaders(hr.Header, req.Method, req.Params)
	if req.Method == "tools/call" {
		b.params.set(hr.Header, req.Params)
	}
	hresp, err := b.client.Do(hr)
	if err != nil {
		return exchange{}, err
	}
	defer hresp.Body.Close()
	x := exchange{status: hresp.StatusCode}
	ct, _, _ := mime.ParseMediaType(hresp.Header.Get("Content-Type"))
	switch {
	case x.status < 200 || x.status >= 300:
		body, _ := io.ReadAll(io.LimitReader(hresp.Body, maxErrorBody))
		var m struct {
			Error *jsonrpc.Error `json:"error"`
		}
		if json.Unmarshal(body, &m) == nil && m.Error != nil {
			x.resp = &jsonrpc.Response{ID: req.ID, Error: m.Error}
		}
		return x, nil
	case ct == "application/json":
		body, err := io.ReadAll(io.LimitReader(hresp.Body, int64(maxEvent)+1))
		if err != nil {
			return x, fmt.Errorf("reading the answer to %s: %w", req.Method, err)
		}
		if len(body) > maxEvent {
			return x, fmt.Errorf("the answer to %s exceeds %d bytes", req.Method, maxEvent)
		}
		msg, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			return x, fmt.Errorf("the answer to %s: %w", req.Method, err)
		}
		resp, ok := msg.(*jsonrpc.Response)
		if !ok {
			return x, fmt.Errorf("the answer to %s is not a response", req.Method)
		}
		resp.ID = req.ID
		x.resp = resp
		return x, nil
	case ct == "text/event-stream":
		var ignored string
		_, _, err := b.readEvents(hresp.Body, &ignored, func(data []byte) bool {
			msg, err := jsonrpc.DecodeMessage(bytes.Clone(data)) // data is reused
			if err != nil {
				b.log.Warn("dropping an event that is not a JSON-RPC message", "method", req.Method, "err", err)
				return true
			}
			switch msg := msg.(type) {
			case *jsonrpc.Response:
				msg.ID = req.ID
				x.resp = msg
				return false
			case *jsonrpc.Request:
				if msg.IsCall() {
					// A modern server asks for input in its result (MRTR).
					b.log.Warn("dropping a request a modern server sent on a stream", "method", msg.Method)
					return true
				}
			}
			if each != nil {
				each(msg)
			}
			return true
		})
		if x.resp == nil && err == nil {
			err = errors.New("the server ended the stream without the response")
		}
		if x.resp == nil {
			return x, fmt.Errorf("the answer to %s: %w", req.Method, err)
		}
		return x, nil
	default:
		return x, fmt.Errorf("the answer to %s has content type %q", req.Method, ct)
	}
}

// probe asks the server with a modern server/discover POST whether it
// speaks ModernVersion: its description if it does, nil if it answered as
// a legacy server (or, unless protocol is "modern", not within
// probeTimeout), or why the probe failed: the server could not be
// reached, refused the credentials, failed (5xx, 429), or is a modern
// server that refused the probe.
func (b *connStream) probe(ctx context.Context, protocol string) (*InitResult, error) {
	pctx := ctx
	if protocol != ProtocolModern {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	id, _ := jsonrpc.MakeID(float64(0))
	req := &jsonrpc.Request{ID: id, Method: "server/discover", Params: json.RawMessage(`{"_meta":` + string(ownMeta) + `}`)}
	x, err := b.postModern(pctx, req, nil)
	switch code := x.status; {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && pctx.Err() != nil:
		b.log.Info("server/discover got no answer within the probe bound: initializing", "bound", probeTimeout)
		b.probeGaveUp = true
		return nil, nil
	case err != nil && code == 0:
		return nil, fmt.Errorf("server/discover: %w", err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return nil, fmt.Errorf("%w: server/discover: HTTP %d %s", lifecycle.ErrAuthRequired, code, http.StatusText(code))
	case code >= 500 || code == http.StatusTooManyRequests:
		return nil, fmt.Errorf("%w: server/discover: HTTP %d %s", lifecycle.ErrServerUnavailable, code, http.StatusText(code))
	case x.resp != nil && x.resp.Error != nil:
		var we *jsonrpc.Error
		if errors.As(x.resp.Error, &we) && int(we.Code) != rpc.UnsupportedProtocolVersion && isModernError(int(we.Code)) {
			return nil, fmt.Errorf("%w: the server speaks MCP %s but refused server/discover: %s", lifecycle.ErrCapabilityMissing, ModernVersion, we.Message)
		}
	case code >= 300 || err != nil:
		// A legacy server's refusal (400, 404, 405 without a modern error),
		// or an answer that is no DiscoverResult.
		if err != nil {
			err = b.redact(err)
		}
		b.log.Debug("server/discover answered as a legacy server would", "status", code, "err", err)
		return nil, nil
	}
	if x.resp == nil {
		return nil, nil
	}
	m := &rpc.Message{Result: x.resp.Result}
	var we *jsonrpc.Error
	if errors.As(x.resp.Error, &we) {
		m.Error = &rpc.Error{Code: int(we.Code), Message: we.Message, Data: we.Data}
	} else if x.resp.Error != nil {
		m.Error = &rpc.Error{Code: rpc.InternalError, Message: x.resp.Error.Error()}
	}
	return discoverResult(m)
}

// modernConn is the mcp.Connection of a modern server (see above). Write
// POSTs a request and reads its answer, handing the messages on to Read;
// connStream calls it from the request's own goroutine.
type modernConn struct {
	b        *connStream
	incoming chan jsonrpc.Message
	done     chan struct{}
	once     sync.Once
}

func newModernConn(b *connStream) *modernConn {
	return &modernConn{b: b, incoming: make(chan jsonrpc.Message), done: make(chan struct{})}
}

func (m *modernConn) SessionID() string { return "" }

func (m *modernConn) Close() error {
	m.once.Do(func() { close(m.done) })
	return nil
}

func (m *modernConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case msg := <-m.incoming:
		return msg, nil
	case <-m.done:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *modernConn) put(msg jsonrpc.Message) {
	select {
	case m.incoming <- msg:
	case <-m.done:
	}
}

// Write sends a request and delivers its answer. Anything else is not
// sent: the transport has no notification from the client (a cancelled
// request's POST is closed instead: connStream.cancelled) and the server
// sends no request to answer.
//
// An error answer that carries a JSON-RPC error is delivered as the
// response; one that does not is returned as an error, for connStream to
// answer the request with. HTTP 401 also ends the connection, as needing
// authentication: no request can succeed any more.
func (m *modernConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return nil
	}
	x, err := m.b.postModern(ctx, req, m.put)
	if x.status == http.StatusUnauthorized {
		m.b.fail(fmt.Errorf("%s: HTTP %d %s", req.Method, x.status, http.StatusText(x.status)))
	}
	switch {
	case err != nil:
		return err
	case x.resp != nil:
		m.put(x.resp)
		return nil
	default:
		return fmt.Errorf("%s: HTTP %d %s", req.Method, x.status, http.StatusText(x.status))
	}
}
