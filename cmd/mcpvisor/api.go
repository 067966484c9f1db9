package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// apiClient is how a command reaches the status API of a running
// mcpvisor serve: its address and bearer token.
type apiClient struct {
	addr, tokenFile string
}

// flags adds --addr and --token-file to cmd.
func (c *apiClient) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.addr, "addr", "127.0.0.1:7331", "address of mcpvisor serve")
	cmd.Flags().StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token (default: $MCPVISOR_TOKEN)")
}

// apiTimeout bounds one request to the API.
const apiTimeout = 10 * time.Second

// get fetches path and returns the body of a 200 answer. Anything else is
// an error that says what happened in words: nothing answering at the
// address, or the API's own error message (a 404's "no server named …").
func (c *apiClient) get(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", c.addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, answerError(resp.StatusCode, body)
	}
	return body, nil
}

// answerError is the error of an answer other than 200 whose body is
// body: the API's own message if it gave one in JSON ({"error": …}),
// else the status and the body.
func answerError(code int, body []byte) error {
	var e struct{ Error string }
	msg := fmt.Sprintf("%d %s: %s", code, http.StatusText(code), strings.TrimSpace(string(body)))
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return &apiStatusError{code: code, msg: msg}
}

// apiStatusError is an answer of the API other than 200.
type apiStatusError struct {
	code int
	msg  string
}

func (e *apiStatusError) Error() string { return e.msg }

// do sends one request to path of the serve at c.addr, with the bearer
// token and hdr; ctx bounds it. Nothing answering is an error that asks
// whether serve runs there.
func (c *apiClient) do(ctx context.Context, method, path string, hdr http.Header, body []byte) (*http.Response, error) {
	token := os.Getenv("MCPVISOR_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	base := c.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if hdr != nil {
		req.Header = hdr.Clone()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s%s: %w", method, c.addr, path, context.Cause(ctx))
		}
		return nil, fmt.Errorf("is mcpvisor serve running at %s? %w", c.addr, err)
	}
	return resp, nil
}

// postAPI sends a POST of body (JSON; nil for none) to path, within ctx, and
// returns the answer's status and body, whatever the status: a refusal
// has a body that says why.
func (c *apiClient) postAPI(ctx context.Context, path string, body []byte) (int, []byte, error) {
	var hdr http.Header
	if body != nil {
		hdr = http.Header{"Content-Type": {"application/json"}}
	}
	resp, err := c.do(ctx, http.MethodPost, path, hdr, body)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer of %s: %w", c.addr, err)
	}
	return resp.StatusCode, b, nil
}

// getJSON is get, the body decoded into v.
func (c *apiClient) getJSON(ctx context.Context, path string, v any) error {
	body, err := c.get(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("unexpected answer from %s%s: %w", c.addr, path, err)
	}
	return nil
}

// show fetches path and writes it to w: as it came with raw, else decoded
// into a T and given to print.
func show[T any](ctx context.Context, c *apiClient, w io.Writer, path string, raw bool, print func(io.Writer, T) error) error {
	if raw {
		body, err := c.get(ctx, path)
		if err == nil {
			_, err = w.Write(body)
		}
		return err
	}
	var v T
	if err := c.getJSON(ctx, path, &v); err != nil {
		return err
	}
	return print(w, v)
}
