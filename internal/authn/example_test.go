package authn_test

import (
	"errors"
	"net/http"

	"github.com/mcpvisor/mcpvisor/internal/authn"
	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// A guard in front of an MCP endpoint: the token from the request, its
// verification, the scopes the endpoint needs, the challenges.
func Example() {
	const public = "https://mcp.example.com"
	v, err := authn.New(authn.Options{
		Issuer:    "https://as.example.com",
		Audiences: []string{public + "/mcp"},
	})
	if err != nil {
		panic(err)
	}
	defer v.Close()
	prm := public + authn.MetadataPath("/mcp")
	need := []string{"mcp"}
	var serveMCP http.Handler = http.NotFoundHandler() // the MCP endpoint itself

	mux := http.NewServeMux()
	mux.Handle(authn.MetadataPath("/mcp"), authn.Metadata{
		Resource:             public + "/mcp",
		AuthorizationServers: []string{"https://as.example.com"},
		ScopesSupported:      need,
	}.Handler())
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		tok, err := authn.Extract(r)
		if err == nil && tok == "" {
			(&authn.Challenge{ResourceMetadata: prm, Scopes: need}).Write(w)
			return
		}
		var id *identity.Identity
		if err == nil {
			id, err = v.Verify(r.Context(), tok)
		}
		var e *authn.Error
		if errors.As(err, &e) {
			e.Challenge(prm, need).Write(w) // 400, 401 or 503 + Retry-After
			return
		}
		if !id.HasScopes(need) {
			(&authn.Challenge{Error: authn.CodeInsufficientScope, Description: "more scope needed",
				Scopes: need, ResourceMetadata: prm}).Write(w)
			return
		}
		serveMCP.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), id)))
	})
	_ = mux
}
