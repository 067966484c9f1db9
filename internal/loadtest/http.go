package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// ProtocolVersion is the MCP version the load client negotiates.
const ProtocolVersion = "2025-11-25"

const initializeRequest = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + ProtocolVersion + `","capabilities":{},"clientInfo":{"name":"mcpvisor-loadtest","version":"0"}}}`

// NewHTTPClient returns a client for callers concurrent callers to each
// host: keep-alive with enough idle connections that none is ever closed
// for want of room, however many hosts it takes turns with; no proxy.
func NewHTTPClient(callers int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// No bound across hosts: a benchmark that takes turns between
		// servers must find each one's connections where it left them,
		// not dial them again (and charge the server their accepts).
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 2 * callers,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// HTTPSession is one MCP session on a Streamable HTTP endpoint.
type HTTPSession struct {
	c      *http.Client
	url    string
	hdr    http.Header
	nextID atomic.Int64
	modern bool // stateless: _meta in every request (OpenModernHTTP)
}

// OpenHTTP initializes a session at url: initialize, then
// notifications/initialized. An endpoint that issues no Mcp-Session-Id
// (the bare-handler floor) gets requests without one.
func OpenHTTP(ctx context.Context, c *http.Client, url string) (*HTTPSession, error) {
	s := &HTTPSession{c: c, url: url, hdr: http.Header{}}
	s.hdr.Set("Accept", "application/json, text/event-stream")
	s.hdr.Set("Content-Type", "application/json")
	var buf bytes.Buffer
	resp, err := s.post(ctx, []byte(initializeRequest), &buf)
	if err != nil {
		return nil, fmt.Errorf("initialize %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(buf.Bytes(), []byte(`"result"`)) {
		return nil, fmt.Errorf("initialize %s: %s %.300s", url, resp.Status, buf.Bytes())
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		s.hdr.Set("Mcp-Session-Id", sid)
	}
	s.hdr.Set("Mcp-Protocol-Version", ProtocolVersion)
	resp, err = s.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), &buf)
	if err != nil {
		return nil, fmt.Errorf("notifications/initialized %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("notifications/initialized %s: %s %.300s", url, resp.Status, buf.Bytes())
	}
	return s, nil
}

// OpenModernHTTP returns a client of url at MCP 2026-07-28: no session;
// every request carries its version and (empty) client capabilities in
// _meta and the headers that mirror its body.
func OpenModernHTTP(url string, c *http.Client) *HTTPSession {
	s := &HTTPSession{c: c, url: url, hdr: http.Header{}, modern: true}
	s.hdr.Set("Accept", "application/json, text/event-stream")
	s.hdr.Set("Content-Type", "application/json")
	s.hdr.Set("Mcp-Protocol-Version", ModernVersion)
	s.hdr.Set("Mcp-Method", "tools/call")
	return s
}

// ModernVersion is the stateless revision OpenModernHTTP speaks.
const ModernVersion = "2026-07-28"

// post sends body and reads the whole reply into buf.
func (s *HTTPSession) post(ctx context.Context, body []byte, buf *bytes.Buffer) (*http.Response, error) {
	return s.postWith(ctx, s.hdr, body, buf)
}

// postWith is post with the headers hdr.
func (s *HTTPSession) postWith(ctx context.Context, hdr http.Header, body []byte, buf *bytes.Buffer) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = hdr.Clone()
	resp, err := s.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	return resp, err
}

// Echo returns one caller's call function: tools/call tool {"text": text},
// a fresh id each time, checking the reply. Every caller needs its own.
func (s *HTTPSession) Echo(ctx context.Context, tool, text string) func() error {
	var body []byte
	var buf bytes.Buffer
	want := EchoWant(text)
	hdr := s.hdr
	if s.modern {
		hdr = s.hdr.Clone()
		hdr.Set("Mcp-Name", tool)
	}
	return func() error {
		if s.modern {
			body = AppendModernCall(body[:0], s.nextID.Add(1), tool, text)
		} else {
			body = AppendCall(body[:0], s.nextID.Add(1), tool, text)
		}
		resp, err := s.postWith(ctx, hdr, body, &buf)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %.200s", resp.Status, buf.Bytes())
		}
		return CheckEcho(buf.Bytes(), want)
	}
}

// Close ends the session (DELETE) if the endpoint issued one.
func (s *HTTPSession) Close(ctx context.Context) error {
	if s.hdr.Get("Mcp-Session-Id") == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
	if err != nil {
		return err
	}
	req.Header = s.hdr.Clone()
	resp, err := s.c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// CannedHandler is the HTTP floor: it reads the request body and answers
// with reply as application/json, nothing else.
func CannedHandler(reply []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})
}
