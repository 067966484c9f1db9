package diag

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/authn/authntest"
)

func writeAuthConfig(t *testing.T, issuer, extra string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.json")
	body := `{"auth": {"issuer": "` + issuer + `", "publicUrl": "https://mcp.example.com"` + extra + `}, "mcpServers": {"a": {"command": "x"}}}`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// With auth, doctor names the issuer, fetches its metadata and keys as
// serve does, and says that a static token is an admin credential.
func TestDoctorAuthIssuerReachable(t *testing.T) {
	iss := authntest.Start(t, authntest.Options{})
	t.Setenv("MCPVISOR_TOKEN", "s3cret-static")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	cfg := writeAuthConfig(t, iss.URL, `, "dashboardClientId": "dash"`)
	out, err := run(t, "doctor", "--state-dir", t.TempDir(), "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Team identity (auth): issuer " + iss.URL + ", public URL https://mcp.example.com, admin scope mcpvisor:admin",
		"its metadata and keys (JWKS) are reachable from here",
		"dashboard login: client dash",
		"is an admin credential: whoever holds it administers this gateway",
		"MCPVISOR_TOKEN is set in this environment",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret-static") {
		t.Error("doctor shows the static token")
	}
	if iss.JWKSFetches() == 0 {
		t.Error("doctor did not fetch the issuer's keys")
	}

	out, err = run(t, "doctor", "--json", "--state-dir", t.TempDir(), "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var rep doctorJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if a := rep.Auth; a == nil || !a.Reachable || a.Issuer != iss.URL || !a.StaticTokenSet || !strings.Contains(a.StaticToken, "admin credential") {
		t.Errorf("doctor --json auth = %+v", rep.Auth)
	}
}

// An issuer that does not answer is a warning that says why.
func TestDoctorAuthIssuerUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	t.Setenv("MCPVISOR_TOKEN", "")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	out, err := run(t, "doctor", "--state-dir", t.TempDir(), "--config", writeAuthConfig(t, "http://"+addr, ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"WARNING issuer: its metadata or keys (JWKS) cannot be fetched", "dashboard login: none", "is an admin credential"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MCPVISOR_TOKEN is set") {
		t.Errorf("doctor says a token is set when none is:\n%s", out)
	}
}
