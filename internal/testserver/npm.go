package testserver

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// NPMRegistry is a fake npm registry on 127.0.0.1 serving the packages
// a test publishes to it: for tests of what npm finds and installs,
// without the real registry. It serves packuments (GET /<name>, the name
// escaped or not) and tarballs, nothing else.
type NPMRegistry struct {
	URL string

	mu       sync.Mutex
	packs    map[string]*packument
	tarballs map[string][]byte // by URL path
	gets     map[string]int    // packument requests, by name
}

type packument struct {
	Name     string                     `json:"name"`
	DistTags map[string]string          `json:"dist-tags"`
	Versions map[string]json.RawMessage `json:"versions"`
}

// NPMPackage is a package to publish.
type NPMPackage struct {
	Name, Version string
	// Bin maps each bin's name to its file in the package.
	Bin map[string]string
	// Files holds the package's files by path (package.json is made);
	// bin files are made executable.
	Files map[string]string
	// NotLatest leaves the latest tag where it was.
	NotLatest bool
}

// NewNPMRegistry starts a registry, closed when the test ends.
func NewNPMRegistry(tb testing.TB) *NPMRegistry {
	r := &NPMRegistry{packs: map[string]*packument{}, tarballs: map[string][]byte{}, gets: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(srv.Close)
	r.URL = srv.URL + "/"
	return r
}

func (r *NPMRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tgz, ok := r.tarballs[req.URL.Path]; ok {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(tgz)
		return
	}
	name := strings.TrimPrefix(req.URL.Path, "/")
	p, ok := r.packs[name]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"Not found"}`))
		return
	}
	r.gets[name]++
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p)
}

// Requests counts the packument requests for name so far.
func (r *NPMRegistry) Requests(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[name]
}

// Publish adds p (its version becomes latest unless p.NotLatest).
func (r *NPMRegistry) Publish(tb testing.TB, p NPMPackage) {
	tb.Helper()
	manifest := map[string]any{"name": p.Name, "version": p.Version}
	if len(p.Bin) > 0 {
		manifest["bin"] = p.Bin
	}
	pj, err := json.Marshal(manifest)
	if err != nil {
		tb.Fatal(err)
	}
	tgz, err := tarball(pj, p)
	if err != nil {
		tb.Fatal(err)
	}
	base := p.Name[strings.LastIndexByte(p.Name, '/')+1:]
	path := "/" + p.Name + "/-/" + base + "-" + p.Version + ".tgz"
	sum512 := sha512.Sum512(tgz)
	sum1 := sha1.Sum(tgz)
	manifest["dist"] = map[string]string{
		"tarball":   strings.TrimSuffix(r.URL, "/") + path,
		"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum512[:]),
		"shasum":    hex.EncodeToString(sum1[:]),
	}
	manifest["_id"] = p.Name + "@" + p.Version
	version, err := json.Marshal(manifest)
	if err != nil {
		tb.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pk := r.packs[p.Name]
	if pk == nil {
		pk = &packument{Name: p.Name, DistTags: map[string]string{}, Versions: map[string]json.RawMessage{}}
		r.packs[p.Name] = pk
	}
	pk.Versions[p.Version] = version
	if !p.NotLatest || pk.DistTags["latest"] == "" {
		pk.DistTags["latest"] = p.Version
	}
	r.tarballs[path] = tgz
}

// tarball packs p as npm does: every file under package/.
func tarball(packageJSON []byte, p NPMPackage) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	files := map[string]string{"package.json": string(packageJSON)}
	for k, v := range p.Files {
		files[k] = v
	}
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		mode := int64(0o644)
		for _, b := range p.Bin {
			if strings.TrimPrefix(b, "./") == name {
				mode = 0o755
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + name, Mode: mode, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Env is the environment for npm to use this registry and the npm cache
// cache, and nothing of the user's npm configuration (no ~/.npmrc, no
// npm_config_* variables of the test's environment): mcpvisor's
// environment with those set.
func (r *NPMRegistry) Env(cache string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(strings.ToLower(kv), "npm_config_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"npm_config_registry="+r.URL,
		"npm_config_cache="+cache,
		"npm_config_userconfig="+os.DevNull,
		"npm_config_update_notifier=false",
		"npm_config_audit=false",
		"npm_config_fund=false",
	)
}

// NodeMCPServer is a minimal MCP server in Node (the standard library
// only) for an npm package's bin: it answers initialize, tools/list
// (one tool, "whoami") and tools/call, whose text is JSON telling its
// version, its arguments, whether npm started it (npm_lifecycle_event is
// set) and the value of FIXTURE_ECHO; anything else gets method not
// found. It exits when its stdin ends.
func NodeMCPServer(version string) string {
	return `#!/usr/bin/env node
const version = ` + strconvQuote(version) + `;
const out = (m) => process.stdout.write(JSON.stringify(m) + "\n");
require("readline").createInterface({ input: process.stdin })
  .on("line", (line) => {
    let m;
    try { m = JSON.parse(line); } catch { return; }
    if (m.id === undefined || m.id === null) return;
    switch (m.method) {
      case "initialize":
        return out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion,
          capabilities: { tools: {} }, serverInfo: { name: "npm-fixture", version } } });
      case "tools/list":
        return out({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "whoami", inputSchema: { type: "object" } }] } });
      case "tools/call":
        return out({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: JSON.stringify({
          version, args: process.argv.slice(2), viaNpm: !!process.env.npm_lifecycle_event,
          echo: process.env.FIXTURE_ECHO || "" }) }] } });
      default:
        return out({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no method " + m.method } });
    }
  })
  .on("close", () => process.exit(0));
`
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
