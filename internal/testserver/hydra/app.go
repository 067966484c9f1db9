package hydra

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// appHandler is the login and consent app Hydra sends the browser to:
// headless, it accepts at once.
//
// Login: the subject is the authorization request's login_hint (else
// Options.DefaultSubject; neither refuses the login).
//
// Consent: it grants the requested scopes, and as the access token's
// audience the requested audience plus every RFC 8707 resource of the
// authorization request (Hydra does not read resource itself), and the
// subject's extra claims (SetClaims) as session.access_token. Hydra does
// not check that audience against the client's: the resource server must.
func (s *Server) appHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		challenge := r.URL.Query().Get("login_challenge")
		var lr struct {
			Skip        bool   `json:"skip"`
			Subject     string `json:"subject"`
			OIDCContext struct {
				LoginHint string `json:"login_hint"`
			} `json:"oidc_context"`
		}
		q := "?login_challenge=" + url.QueryEscape(challenge)
		if err := s.admin(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/login"+q, nil, &lr); err != nil {
			s.appFail(w, "login", err)
			return
		}
		subject := lr.OIDCContext.LoginHint
		switch {
		case lr.Skip:
			subject = lr.Subject
		case subject == "":
			subject = s.defSub
		}
		var red redirect
		if subject == "" {
			err := s.admin(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/login/reject"+q,
				map[string]any{"error": "login_required", "error_description": "no login_hint and no default subject"}, &red)
			if err != nil {
				s.appFail(w, "login", err)
				return
			}
		} else if err := s.admin(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/login/accept"+q,
			map[string]any{"subject": subject, "remember": false}, &red); err != nil {
			s.appFail(w, "login", err)
			return
		}
		http.Redirect(w, r, red.RedirectTo, http.StatusFound)
	})
	mux.HandleFunc("GET /consent", func(w http.ResponseWriter, r *http.Request) {
		challenge := r.URL.Query().Get("consent_challenge")
		var cr struct {
			Subject           string   `json:"subject"`
			RequestedScope    []string `json:"requested_scope"`
			RequestedAudience []string `json:"requested_access_token_audience"`
			RequestURL        string   `json:"request_url"`
		}
		q := "?consent_challenge=" + url.QueryEscape(challenge)
		if err := s.admin(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/consent"+q, nil, &cr); err != nil {
			s.appFail(w, "consent", err)
			return
		}
		aud := slices.Clone(cr.RequestedAudience)
		if u, err := url.Parse(cr.RequestURL); err == nil {
			for _, res := range u.Query()["resource"] {
				if !slices.Contains(aud, res) {
					aud = append(aud, res)
				}
			}
		}
		accept := map[string]any{
			"grant_scope":                 cr.RequestedScope,
			"grant_access_token_audience": aud,
			"remember":                    false,
		}
		if c := s.claimsFor(cr.Subject); c != nil {
			accept["session"] = map[string]any{"access_token": c}
		}
		var red redirect
		if err := s.admin(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/consent/accept"+q, accept, &red); err != nil {
			s.appFail(w, "consent", err)
			return
		}
		http.Redirect(w, r, red.RedirectTo, http.StatusFound)
	})
	mux.HandleFunc("GET /error", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		s.appFail(w, "error page", fmt.Errorf("hydra reported %s: %s", q.Get("error"), q.Get("error_description")))
	})
	return mux
}

type redirect struct {
	RedirectTo string `json:"redirect_to"`
}

func (s *Server) appFail(w http.ResponseWriter, step string, err error) {
	err = fmt.Errorf("hydra login/consent app, %s: %w", step, err)
	s.mu.Lock()
	s.appErr = err
	s.mu.Unlock()
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// admin calls Hydra's admin API with a JSON body (if any) and decodes
// its JSON answer into out (if not nil).
func (s *Server) admin(ctx context.Context, method, path string, body, out any) error {
	var js []byte
	if body != nil {
		var err error
		if js, err = json.Marshal(body); err != nil {
			return err
		}
	}
	status, b, err := send(ctx, s.hc, func() (*http.Request, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(js)
		}
		req, err := http.NewRequestWithContext(ctx, method, s.adminURL+path, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		return req, nil
	})
	if err != nil {
		return fmt.Errorf("hydra admin %s %s: %w", method, redactQuery(path), err)
	}
	if status/100 != 2 {
		return fmt.Errorf("hydra admin %s %s: %d %s: %s", method, redactQuery(path), status, http.StatusText(status), oauthError(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("hydra admin %s %s: decode the answer: %w", method, redactQuery(path), err)
		}
	}
	return nil
}

// conflictAttempts bounds the retries of a request Hydra refused for a
// concurrent write.
const conflictAttempts = 8

// send sends the request newReq makes and reads the answer (at most
// 1 MiB). Hydra's in-memory store takes one write at a time and refuses
// a concurrent one ("Unable to serialize access due to a concurrent
// update"): such an answer is retried, a bounded number of times. The
// harness serializes its own calls (Server.flow); this covers writes of
// clients that talk to Hydra themselves.
func send(ctx context.Context, hc *http.Client, newReq func() (*http.Request, error)) (int, []byte, error) {
	for attempt := 1; ; attempt++ {
		req, err := newReq()
		if err != nil {
			return 0, nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return 0, nil, err
		}
		if resp.StatusCode/100 == 2 || attempt == conflictAttempts || !bytes.Contains(b, []byte("concurrent update")) {
			return resp.StatusCode, b, nil
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
}

// redactQuery drops a path's query (challenges are one-time secrets).
func redactQuery(path string) string {
	if i := bytes.IndexByte([]byte(path), '?'); i >= 0 {
		return path[:i]
	}
	return path
}

// oauthError is an error answer's error and description (OAuth) or
// message (Hydra's admin API), never anything else of the body.
func oauthError(body []byte) string {
	var e struct {
		Error       any    `json:"error"`
		Description string `json:"error_description"`
		Message     string `json:"message"`
		Reason      string `json:"reason"`
	}
	if json.Unmarshal(body, &e) != nil {
		return fmt.Sprintf("(%d bytes, not JSON)", len(body))
	}
	parts := []string{}
	switch v := e.Error.(type) {
	case string:
		parts = append(parts, v)
	case map[string]any: // the admin API's {"error":{"message":…,"reason":…}}
		for _, k := range []string{"status", "message", "reason"} {
			if m, ok := v[k].(string); ok && m != "" {
				parts = append(parts, m)
			}
		}
	}
	for _, p := range []string{e.Description, e.Message, e.Reason} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "(no error in the answer)"
	}
	out := parts[0]
	for _, p := range parts[1:] {
		out += ": " + p
	}
	return out
}
