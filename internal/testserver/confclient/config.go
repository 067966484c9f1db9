// Package confclient is the client the official MCP conformance suite
// launches in client mode to test mcpvisor as the client of the suite's
// servers. The suite runs it as `conformance-client URL` with the scenario
// in MCP_CONFORMANCE_SCENARIO (and MCP_CONFORMANCE_PROTOCOL_VERSION,
// MCP_CONFORMANCE_CONTEXT); it writes an mcpvisor config with one remote
// server "s" at URL, runs `mcpvisor serve` on it (the binary named by
// MCPVISOR_BIN), logs in with `mcpvisor login s` when serve says the
// server needs a login, and makes the scenario's calls through serve's
// /servers/s/mcp as an MCP client. What the suite's server sees is what
// mcpvisor sends on its own behalf.
//
// The same binary is the "browser" of `mcpvisor login`: with BrowseEnv
// set, it GETs the URL it is given and follows the redirects, which is
// how the suite's authorization server approves (a 302 to the loopback
// redirect_uri of the login).
package confclient

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment of the harness.
const (
	// BinEnv names the mcpvisor binary to run.
	BinEnv = "MCPVISOR_BIN"
	// BrowseEnv, when "1", makes the harness a browser: it GETs its last
	// argument, following redirects, and exits.
	BrowseEnv = "CONFORMANCE_CLIENT_BROWSE"

	scenarioEnv = "MCP_CONFORMANCE_SCENARIO"
	versionEnv  = "MCP_CONFORMANCE_PROTOCOL_VERSION"
	contextEnv  = "MCP_CONFORMANCE_CONTEXT"

	// secretEnv carries a scenario's client secret to serve, which reads
	// it through the config's ${env:…} reference.
	secretEnv = "CONFORMANCE_CLIENT_SECRET"
)

// cimdURL is the Client ID Metadata Document URL the suite's basic-cimd
// scenario expects as the client_id (it never fetches it).
const cimdURL = "https://conformance-test.local/client-metadata.json"

// scenarioContext is MCP_CONFORMANCE_CONTEXT: what a scenario gives its
// client beyond the URL.
type scenarioContext struct {
	Name             string     `json:"name"`
	ClientID         string     `json:"client_id"`
	ClientSecret     string     `json:"client_secret"`
	PrivateKeyPEM    string     `json:"private_key_pem"`
	SigningAlgorithm string     `json:"signing_algorithm"`
	ToolCalls        []toolCall `json:"toolCalls"`
}

type toolCall struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

func parseContext(s string) (scenarioContext, error) {
	var c scenarioContext
	if s == "" {
		return c, nil
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return c, fmt.Errorf("%s is not a JSON object: %v", contextEnv, err)
	}
	return c, nil
}

// clientCredentials reports whether scenario uses the client credentials
// grant (the oauth-client-credentials extension): no user, no login.
func clientCredentials(scenario string) bool {
	return strings.HasPrefix(scenario, "auth/client-credentials-")
}

// writeConfig writes, in dir, the mcpvisor config for the scenario with
// its server at url, and returns its path and the environment serve
// needs for the config's references. The default config first: no
// "protocol"; an "oauth" block only where the scenario gives the client
// something (pre-registered credentials, a key, the CIMD URL).
func writeConfig(dir, scenario, url string, sc scenarioContext) (path string, env []string, err error) {
	server := map[string]any{"url": url}
	oauth := map[string]any{}
	if scenario == "auth/basic-cimd" {
		oauth["clientMetadataUrl"] = cimdURL
	}
	if sc.ClientID != "" {
		oauth["clientId"] = sc.ClientID
	}
	if sc.ClientSecret != "" {
		oauth["clientSecret"] = "${env:" + secretEnv + "}"
		env = append(env, secretEnv+"="+sc.ClientSecret)
		// Both scenarios that give a secret (pre-registration,
		// client-credentials-basic) advertise only client_secret_basic.
		oauth["tokenEndpointAuthMethod"] = "client_secret_basic"
	}
	if sc.PrivateKeyPEM != "" {
		key := filepath.Join(dir, "client-key.pem")
		if err := os.WriteFile(key, []byte(sc.PrivateKeyPEM), 0o600); err != nil {
			return "", nil, err
		}
		oauth["privateKey"] = "${file:" + key + "}"
		oauth["tokenEndpointAuthMethod"] = "private_key_jwt"
		if sc.SigningAlgorithm != "" {
			oauth["signingAlgorithm"] = sc.SigningAlgorithm
		}
	}
	if clientCredentials(scenario) {
		oauth["grant"] = "client_credentials"
	}
	if len(oauth) > 0 {
		server["oauth"] = oauth
	}
	b, err := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"s": server}}, "", "  ")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, "config.json")
	return path, env, os.WriteFile(path, b, 0o600)
}
