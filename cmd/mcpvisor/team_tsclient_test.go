package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
	"github.com/mcpvisor/mcpvisor/internal/testserver/hydra"
)

// teamTSCase is one client run of
// internal/testserver/testdata/team-tsclient.mjs (its doc says what
// the fields are).
type teamTSCase struct {
	Grant        string         `json:"grant"`
	Mode         string         `json:"mode"`
	URL          string         `json:"url"`
	Tool         string         `json:"tool"`
	Args         map[string]any `json:"args,omitempty"`
	ClientID     string         `json:"clientId"`
	ClientSecret string         `json:"clientSecret"`
	Issuer       string         `json:"issuer"`
	Scope        string         `json:"scope,omitempty"`
	Audience     string         `json:"audience,omitempty"`
	Redirect     string         `json:"redirect,omitempty"`
	Browser      string         `json:"browser,omitempty"`
}

// teamTSResult is what the script saw in one case.
type teamTSResult struct {
	Version, Text, Error string
	Tools                []string
	Code                 *int
}

// browserServer is the TypeScript client's browser: POST the
// authorization URL to /?subject=NAME, get the redirect's query back.
func browserServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cb, err := headlessBrowser(r.Context(), string(b), r.URL.Query().Get("subject"), hydra.DefaultRedirectURI)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		io.WriteString(w, cb.Encode())
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runTeamTSClient runs the TypeScript SDK v2 client with OAuth on every
// case, in one Node process (each case a client of its own), and returns
// what each saw.
func runTeamTSClient(t *testing.T, cases []teamTSCase) []teamTSResult {
	t.Helper()
	node, _ := node22(t)
	script, err := filepath.Abs("../../internal/testserver/testdata/team-tsclient.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves the SDK from the script's directory upwards: run a
	// copy next to the installed packages.
	dir := testserver.Deps(t, "npm-next")
	copyPath := filepath.Join(dir, "team-tsclient-"+filepath.Base(t.TempDir())+".mjs")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(copyPath)
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	// The cases (with the clients' secrets) go in on stdin, not in the
	// command line.
	cmd := exec.CommandContext(ctx, node, copyPath)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, out)
	}
	var r []teamTSResult
	if err := json.Unmarshal(out, &r); err != nil || len(r) != len(cases) {
		t.Fatalf("the TypeScript client said %q (%v), for %d cases", out, err, len(cases))
	}
	return r
}
