// Package adminclient is the client of mcpvisor serve's admin API (/api,
// /metrics), beside the API's types in package admin: the address and
// bearer token to reach it, bounded requests, and the API's errors in
// words.
package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Client reaches the admin API of a running mcpvisor serve: its address
// and bearer token (TokenFile's, else $MCPVISOR_TOKEN_FILE's, else
// $MCPVISOR_TOKEN's, else — when serve asks for one — StoredToken's).
type Client struct {
	Addr, TokenFile string
}

// StoredToken, if set, gives a Client's token when no file or variable
// does: the admin token of mcpvisor login --gateway for addr, refreshed
// when it is due ("" when there is none). The CLI sets it (cmdutil);
// it is a variable, not a field, so that a Client stays a comparable
// value.
var StoredToken func(ctx context.Context, addr string) (string, error)

// Timeout bounds one request to the API.
const Timeout = 10 * time.Second

// Get fetches path and returns the body of a 200 answer. Anything else is
// an error that says what happened in words: nothing answering at the
// address, or the API's own error message (a 404's "no server named …").
func (c *Client) Get(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	resp, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", c.Addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, AnswerError(resp.StatusCode, body)
	}
	return body, nil
}

// AnswerError is the error of an answer other than 200 whose body is
// body: the API's own message if it gave one in JSON ({"error": …}),
// else the status and the body.
func AnswerError(code int, body []byte) error {
	var e struct{ Error string }
	msg := fmt.Sprintf("%d %s: %s", code, http.StatusText(code), strings.TrimSpace(string(body)))
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return &StatusError{Code: code, msg: msg}
}

// StatusError is an answer of the API other than 200.
type StatusError struct {
	Code int // the HTTP status
	msg  string
}

func (e *StatusError) Error() string { return e.msg }

// Do sends one request to path of the serve at c.Addr, with the bearer
// token and hdr; ctx bounds it. Nothing answering is an error that asks
// whether serve runs there.
func (c *Client) Do(ctx context.Context, method, path string, hdr http.Header, body []byte) (*http.Response, error) {
	token, err := c.token(ctx)
	if err != nil {
		return nil, err
	}
	stored := false
	if token == "" && StoredToken != nil {
		if _, ok := wantsStored.Load(c.Addr); ok {
			if token, err = StoredToken(ctx, c.Addr); err != nil {
				return nil, err
			}
			stored = true
		}
	}
	resp, err := c.send(ctx, method, path, hdr, body, token)
	// Given no token, a serve that asks for one (team identity: a Bearer
	// challenge) gets the gateway login's, if there is one; the address
	// is remembered, so that this process's later requests send it at
	// once. A serve that asks for none never has the store opened.
	if err == nil && token == "" && !stored && StoredToken != nil && resp.StatusCode == http.StatusUnauthorized &&
		strings.HasPrefix(strings.ToLower(resp.Header.Get("Www-Authenticate")), "bearer") {
		tok, terr := StoredToken(ctx, c.Addr)
		if terr != nil {
			resp.Body.Close()
			return nil, terr
		}
		if tok != "" {
			resp.Body.Close()
			wantsStored.Store(c.Addr, true)
			return c.send(ctx, method, path, hdr, body, tok)
		}
	}
	return resp, err
}

// wantsStored holds the addresses whose serve asked for a token this
// process had only from StoredToken.
var wantsStored sync.Map

// send sends one request with token ("" for none).
func (c *Client) send(ctx context.Context, method, path string, hdr http.Header, body []byte, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL(path), bytes.NewReader(body))
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
			return nil, fmt.Errorf("%s %s%s: %w", method, c.Addr, path, context.Cause(ctx))
		}
		return nil, fmt.Errorf("is mcpvisor serve running at %s? %w", c.Addr, err)
	}
	return resp, nil
}

// token is the bearer token c sends: TokenFile's (trimmed), else
// $MCPVISOR_TOKEN_FILE's, else $MCPVISOR_TOKEN's; "" for none (then Do
// may send StoredToken's).
func (c *Client) token(ctx context.Context) (string, error) {
	file, what := c.TokenFile, "--token-file"
	if file == "" {
		file, what = os.Getenv("MCPVISOR_TOKEN_FILE"), "$MCPVISOR_TOKEN_FILE"
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("%s %s is empty", what, file)
		}
		return tok, nil
	}
	return os.Getenv("MCPVISOR_TOKEN"), nil
}

// URL is the URL of path on the serve at c.Addr (http:// unless Addr
// names a scheme).
func (c *Client) URL(path string) string {
	base := c.Addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return strings.TrimSuffix(base, "/") + path
}

// HTTPClient is an HTTP client whose every request carries c's bearer
// token, for a client that makes its own requests to serve (an MCP SDK's,
// on a server's endpoint). Unlike Do, it leaves errors as net/http says
// them.
func (c *Client) HTTPClient() (*http.Client, error) {
	token, err := c.token(context.Background())
	if err != nil {
		return nil, err
	}
	// serve's endpoints do not redirect: a redirect is answered as it
	// came, and the token goes nowhere else.
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if token == "" {
		return &http.Client{CheckRedirect: noRedirect}, nil
	}
	return &http.Client{Transport: bearer{token, http.DefaultTransport}, CheckRedirect: noRedirect}, nil
}

// bearer adds its token to each request it passes to next.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper leaves its request as it came
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Post sends a POST of body (JSON; nil for none) to path, within ctx, and
// returns the answer's status and body, whatever the status: a refusal
// has a body that says why.
func (c *Client) Post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	var hdr http.Header
	if body != nil {
		hdr = http.Header{"Content-Type": {"application/json"}}
	}
	resp, err := c.Do(ctx, http.MethodPost, path, hdr, body)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer of %s: %w", c.Addr, err)
	}
	return resp.StatusCode, b, nil
}

// GetJSON is Get, the body decoded into v.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	body, err := c.Get(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("unexpected answer from %s%s: %w", c.Addr, path, err)
	}
	return nil
}

// Act sends an action to the API, bounded by timeout (passed on as the
// action's own ?timeout=, with a margin for the answer), and returns the
// answer's status and body, whatever the status: an action's refusal has
// a body that says why.
func (c *Client) Act(ctx context.Context, path string, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+Timeout)
	defer cancel()
	return c.Post(ctx, path+"?timeout="+url.QueryEscape(timeout.String()), nil)
}
