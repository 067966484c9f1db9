package oauthtest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestFakeVerifiesWhatClientsSend(t *testing.T) {
	s := New(t, Options{})
	const cb = "http://127.0.0.1:1/cb"
	resp, err := http.Post(s.Issuer+"/register", "application/json", strings.NewReader(`{"redirect_uris":["`+cb+`"],"token_endpoint_auth_method":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	verifier := strings.Repeat("v", 43)
	code := func() string {
		q := url.Values{"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {cb}, "state": {"st"},
			"code_challenge": {s256(verifier)}, "code_challenge_method": {"S256"}, "resource": {s.URL}}
		back, err := s.Approve(s.Issuer + "/authorize?" + q.Encode())
		if err != nil || back.Get("state") != "st" || back.Get("iss") != s.Issuer {
			t.Fatalf("approve: %v %v", back, err)
		}
		return back.Get("code")
	}
	exchange := func(code, verifier, resource string) (int, map[string]any) {
		form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {cb}, "client_id": {reg.ClientID},
			"code_verifier": {verifier}, "resource": {resource}}
		resp, err := http.PostForm(s.Issuer+"/token", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if st, out := exchange(code(), strings.Repeat("w", 43), s.URL); st != 400 || out["error"] != "invalid_grant" {
		t.Fatalf("PKCE mismatch: %d %v", st, out)
	}
	if st, out := exchange(code(), verifier, "http://elsewhere/mcp"); st != 400 || out["error"] != "invalid_target" {
		t.Fatalf("resource mismatch: %d %v", st, out)
	}
	c := code()
	st, out := exchange(c, verifier, s.URL)
	tok, _ := out["access_token"].(string)
	if st != 200 || !strings.HasPrefix(tok, "tok-") {
		t.Fatalf("exchange: %d %v", st, out)
	}
	if st, _ := exchange(c, verifier, s.URL); st != 400 {
		t.Fatal("a code was accepted twice")
	}
	// The resource: 401 with resource_metadata without a token, 200 with it.
	r, _ := http.Get(s.URL)
	r.Body.Close()
	if r.StatusCode != 401 || !strings.Contains(r.Header.Get("WWW-Authenticate"), `resource_metadata="`+s.PRMURL()+`"`) {
		t.Fatalf("no token: %d %q", r.StatusCode, r.Header.Get("WWW-Authenticate"))
	}
	req, _ := http.NewRequest("GET", s.URL, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	r, _ = http.DefaultClient.Do(req)
	r.Body.Close()
	if r.StatusCode != 200 || s.Count("resource-ok") != 1 {
		t.Fatalf("with the token: %d", r.StatusCode)
	}
}
