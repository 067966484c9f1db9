package dashboard

import (
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/guard"
)

// get sends method path to srv with the given headers ("Host" sets the
// Host), and returns the response and its body.
func get(t *testing.T, srv *httptest.Server, method, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func newServer(t *testing.T, token string) (*httptest.Server, *[]string) {
	var others []string
	g := guard.New(guard.Options{Token: token})
	h := New(g, token != "", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		others = append(others, r.URL.Path)
		http.NotFound(w, r)
	})))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, &others
}

// The page and its files load without the token, each with its type, the
// policy and an ETag a browser revalidates with (304); the page has no
// inline script, style or handler for the policy to refuse, and every
// file it names is served; the page says whether the API wants a token.
func TestPageAndFiles(t *testing.T) {
	srv, others := newServer(t, "s3cret")
	resp, page := get(t, srv, "GET", "/")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for k, want := range map[string]string{
		"Content-Security-Policy": ContentSecurityPolicy,
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Cache-Control":           "no-cache",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("GET / %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(ContentSecurityPolicy, "script-src 'self';") || strings.Contains(ContentSecurityPolicy, "unsafe") {
		t.Errorf("the policy allows more than this origin's scripts: %s", ContentSecurityPolicy)
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>[^<]*`).FindAllString(page, -1) {
		if !strings.Contains(tag, ` src="/ui/`) || !strings.HasSuffix(tag, ">") {
			t.Errorf("the page has an inline script: %q", tag)
		}
	}
	for _, bad := range []*regexp.Regexp{regexp.MustCompile(`\sstyle=`), regexp.MustCompile(`<style`), regexp.MustCompile(`\son[a-z]+=`), regexp.MustCompile(`(?i)https?://`)} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("the page has %q, which the policy refuses or which reaches elsewhere", m)
		}
	}
	named := regexp.MustCompile(`(?:src|href)="(/[^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(named) < 3 {
		t.Fatalf("the page names %d files: %v", len(named), named)
	}
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
	for _, m := range named {
		p := m[1]
		resp, body := get(t, srv, "GET", p)
		ext := p[strings.LastIndex(p, "."):]
		if resp.StatusCode != 200 || body == "" || resp.Header.Get("Content-Type") != types[ext] || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: %d %q, %d bytes", p, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
			continue
		}
		etag := resp.Header.Get("ETag")
		if resp, _ := get(t, srv, "GET", p, "If-None-Match", etag); etag == "" || resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s: %d, want 304", p, etag, resp.StatusCode)
		}
	}
	if resp, body := get(t, srv, "GET", "/ui/auth.json"); resp.StatusCode != 200 || strings.TrimSpace(body) != `{"token":true,"login":false,"session":false}` || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("auth.json with a token: %d %q", resp.StatusCode, body)
	}
	open, _ := newServer(t, "")
	if _, body := get(t, open, "GET", "/ui/auth.json"); strings.TrimSpace(body) != `{"token":false,"login":false,"session":false}` {
		t.Errorf("auth.json without a token: %q", body)
	}
	if resp, _ := get(t, srv, "HEAD", "/"); resp.StatusCode != 200 {
		t.Errorf("HEAD /: %d", resp.StatusCode)
	}
	if len(*others) != 0 {
		t.Errorf("the dashboard's own paths reached the other handler: %v", *others)
	}
}

// What is not the dashboard's goes to the other handler (behind the
// whole guard: 401 without the token); a POST to the page is a 405; a
// rebinding Host or a foreign Origin is refused on the page as on the
// API, token or not.
func TestRefusals(t *testing.T) {
	srv, others := newServer(t, "s3cret")
	for _, c := range []struct {
		method, path string
		hdr          []string
		status       int
	}{
		{"GET", "/nope", nil, 401},
		{"GET", "/ui/", nil, 401},
		{"GET", "/ui/nope.js", []string{"Authorization", "Bearer s3cret"}, 404},
		{"POST", "/", nil, 405},
		{"GET", "/", []string{"Host", "evil.example"}, 403},
		{"GET", "/ui/app.js", []string{"Host", "evil.example"}, 403},
		{"GET", "/", []string{"Origin", "https://evil.example"}, 403},
		{"GET", "/ui/auth.json", []string{"Origin", "https://evil.example"}, 403},
	} {
		resp, body := get(t, srv, c.method, c.path, c.hdr...)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s %v: %d %q, want %d", c.method, c.path, c.hdr, resp.StatusCode, body, c.status)
		}
	}
	if got := strings.Join(*others, ","); got != "/ui/nope.js" {
		t.Errorf("the other handler saw %q", got)
	}
}

// The embedded files stay small: the whole dashboard, uncompressed, is
// under 64 KiB.
func TestSizeBudget(t *testing.T) {
	if n := Size(); n == 0 || n > 64<<10 {
		t.Fatalf("the dashboard's files take %d bytes, budget 64 KiB", n)
	}
	t.Logf("dashboard files: %d bytes", Size())
}

// Size is the total size in bytes of the embedded files.
func Size() int {
	n := 0
	entries, _ := fs.ReadDir(assets, "assets")
	for _, e := range entries {
		info, _ := e.Info()
		n += int(info.Size())
	}
	return n
}

// A client that accepts gzip gets each file gzipped (its own ETag, a
// conditional request of it a 304), the same bytes once decompressed;
// one that does not, or refuses it with q=0, gets it as it is. Both are
// told the answer varies by Accept-Encoding.
func TestGzip(t *testing.T) {
	srv, _ := newServer(t, "")
	for _, p := range []string{"/", Prefix + "app.js", Prefix + "app.css"} {
		plainResp, plain := get(t, srv, "GET", p, "Accept-Encoding", "identity")
		if plainResp.Header.Get("Content-Encoding") != "" || plainResp.Header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("%s without gzip: Content-Encoding %q, Vary %q", p, plainResp.Header.Get("Content-Encoding"), plainResp.Header.Get("Vary"))
		}
		for _, ae := range []string{"gzip", "br, gzip;q=0.8", "GZIP"} {
			resp, body := get(t, srv, "GET", p, "Accept-Encoding", ae)
			if resp.Header.Get("Content-Encoding") != "gzip" || len(body) >= len(plain) {
				t.Fatalf("%s with %q: Content-Encoding %q, %d bytes (plain %d)", p, ae, resp.Header.Get("Content-Encoding"), len(body), len(plain))
			}
			zr, err := gzip.NewReader(strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			un, err := io.ReadAll(zr)
			if err != nil || string(un) != plain {
				t.Fatalf("%s gzipped does not decompress to the file: %v", p, err)
			}
			if resp.Header.Get("ETag") == plainResp.Header.Get("ETag") {
				t.Fatalf("%s: the gzipped and plain answers share the ETag %s", p, resp.Header.Get("ETag"))
			}
			if r304, _ := get(t, srv, "GET", p, "Accept-Encoding", ae, "If-None-Match", resp.Header.Get("ETag")); r304.StatusCode != http.StatusNotModified {
				t.Fatalf("%s: a conditional request of the gzipped file: %d", p, r304.StatusCode)
			}
		}
		for _, refused := range []string{"gzip;q=0, identity", "gzip; Q=0.000", "gzip;q=0.0000"} {
			if resp, _ := get(t, srv, "GET", p, "Accept-Encoding", refused); resp.Header.Get("Content-Encoding") != "" {
				t.Fatalf("%s: gzip refused (%q) was sent", p, refused)
			}
		}
	}
}
