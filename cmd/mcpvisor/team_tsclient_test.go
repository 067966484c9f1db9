package main

import (
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

// teamTSResult is what internal/testserver/testdata/team-tsclient.mjs
// reports.
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

// runTeamTSClient runs the TypeScript SDK v2 client with OAuth: grant
// "client_credentials" or "authorization_code", mode "legacy" or "pin",
// against url, calling tool with args; env configures its client.
func runTeamTSClient(t *testing.T, env []string, grant, mode, url, tool, args string) teamTSResult {
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
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, copyPath, grant, mode, url, tool, args)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client (%s %s %s): %v\n%s", grant, mode, url, err, out)
	}
	var r teamTSResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the TypeScript client said %q: %v", out, err)
	}
	return r
}
