package diag

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/authn"
	"github.com/mcpvisor/mcpvisor/internal/config"
)

// authReport is doctor's account of the config's team identity: the
// issuer, whether its metadata and keys can be fetched from here, and
// what a static token means beside it.
type authReport struct {
	Issuer     string `json:"issuer"`
	PublicURL  string `json:"publicUrl"`
	AdminScope string `json:"adminScope"`
	// Reachable: the issuer's metadata and JWKS were fetched (as serve
	// does at its start); else Error says why not.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// DashboardClientID is the dashboard's login client ("": none).
	DashboardClientID string `json:"dashboardClientId,omitempty"`
	// StaticToken says what a static token is under auth.
	StaticToken string `json:"staticToken"`
	// StaticTokenSet: MCPVISOR_TOKEN is set in doctor's environment (a
	// serve started from it takes it).
	StaticTokenSet bool `json:"staticTokenSet"`
}

// staticTokenNote is what doctor says of a static token with auth.
const staticTokenNote = "a static token (serve --token-file, MCPVISOR_TOKEN), if one is set, is an admin credential: " +
	"whoever holds it administers this gateway (the admin API, /metrics, the dashboard), with no identity of their own; " +
	"it is not accepted on the MCP endpoints"

// fetchTimeout bounds doctor's fetch of the issuer's metadata and keys.
const fetchTimeout = 10 * time.Second

// checkAuth reports on a's team identity: it fetches the issuer's
// metadata and keys as serve does (authn's Prefetch), within
// fetchTimeout.
func checkAuth(ctx context.Context, a *config.AuthConfig) *authReport {
	rep := &authReport{Issuer: a.Issuer, PublicURL: a.PublicURL, AdminScope: a.AdminScope, DashboardClientID: a.DashboardClientID,
		StaticToken: staticTokenNote, StaticTokenSet: os.Getenv("MCPVISOR_TOKEN") != ""}
	v, err := authn.New(authn.Options{Issuer: a.Issuer, Audiences: []string{a.PublicURL}, Algorithms: a.Algorithms, JWKSURL: a.JWKSURL})
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	if err := v.Prefetch(ctx); err != nil {
		rep.Error = err.Error()
		return rep
	}
	rep.Reachable = true
	return rep
}

func printAuth(w io.Writer, r *authReport) {
	fmt.Fprintf(w, "Team identity (auth): issuer %s, public URL %s, admin scope %s\n", r.Issuer, r.PublicURL, r.AdminScope)
	if r.Reachable {
		fmt.Fprintln(w, "  issuer: its metadata and keys (JWKS) are reachable from here")
	} else {
		fmt.Fprintf(w, "  WARNING issuer: its metadata or keys (JWKS) cannot be fetched from here, and serve refuses every request (503) until it can: %s\n", r.Error)
	}
	if r.DashboardClientID != "" {
		fmt.Fprintf(w, "  dashboard login: client %s (redirect URI %s/ui/callback)\n", r.DashboardClientID, r.PublicURL)
	} else {
		fmt.Fprintln(w, "  dashboard login: none (set auth.dashboardClientId); the dashboard asks for a token")
	}
	fmt.Fprintf(w, "  NOTE %s.\n", r.StaticToken)
	if r.StaticTokenSet {
		fmt.Fprintln(w, "  MCPVISOR_TOKEN is set in this environment: a serve started from it holds such an admin credential.")
	}
	fmt.Fprintln(w)
}
