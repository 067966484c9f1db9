// Package dashboard serves mcpvisor's web dashboard on the serve
// listener: one self-contained page (GET /) and its script, style sheet
// and icon (GET /ui/...), embedded in the binary — no CDN, no build step,
// nothing fetched from elsewhere — that shows every server live from the
// admin API (package admin) and acts on them through it.
//
// The page and its files hold no secret and no data, so they load without
// the bearer token (a browser sends no Authorization header when it
// navigates), behind the guard's Host and Origin checks
// (guard.AllowPublic). Everything they show comes from /api/*, behind the
// whole guard: the page asks for the token when one is configured, keeps
// it in the tab's sessionStorage (never in a URL or a cookie) and sends it
// in the Authorization header of each fetch, the live event and log
// streams included (read with fetch, not EventSource, which cannot send
// headers). Every reply carries a Content-Security-Policy that allows
// scripts, styles and connections to this origin only, and no framing.
package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/guard"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is the policy of every reply: the page's script,
// style sheet and icon come from this origin only (no inline script or
// style), its fetches go to this origin only, and it may not be framed.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Prefix is the path under which the page's files are served.
const Prefix = "/ui/"

// file is one embedded asset, with what its replies carry.
type file struct {
	body  []byte
	ctype string
	etag  string
	// gz is body gzipped, served to a client that accepts it (nil when
	// that is not smaller); gzETag is its ETag.
	gz     []byte
	gzETag string
}

// Handler serves the dashboard. It is safe for concurrent use and never
// changes after New.
type Handler struct {
	guard *guard.Guard
	// other serves every path that is not the dashboard's (a 404 behind
	// the whole guard, in serve).
	other http.Handler
	files map[string]file // by request path: "/" and Prefix+name
	token bool
	// logins are the team identity's logins under way (login.go).
	logins *logins
}

// New returns the dashboard, checked by g (Host and Origin; the token is
// the API's). Paths other than / and the page's own files go to other.
func New(g *guard.Guard, tokenRequired bool, other http.Handler) *Handler {
	h := &Handler{guard: g, other: other, files: map[string]file{}, token: tokenRequired, logins: newLogins()}
	types := map[string]string{
		".html": "text/html; charset=utf-8",
		".js":   "text/javascript; charset=utf-8",
		".css":  "text/css; charset=utf-8",
		".svg":  "image/svg+xml",
	}
	entries, _ := fs.ReadDir(assets, "assets")
	for _, e := range entries {
		body, _ := fs.ReadFile(assets, "assets/"+e.Name())
		sum := sha256.Sum256(body)
		f := file{body: body, ctype: types[path.Ext(e.Name())], etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		if b.Len() < len(body) {
			f.gz, f.gzETag = b.Bytes(), `"`+hex.EncodeToString(sum[:8])+`-gz"`
		}
		if e.Name() == "index.html" {
			h.files["/"] = f
			continue
		}
		h.files[Prefix+e.Name()] = f
	}
	return h
}

// ServeHTTP serves GET and HEAD of / and the page's files, each with its
// ETag (a conditional request gets a 304) and Cache-Control: no-cache, so
// that a browser revalidates and an upgraded mcpvisor is never shown with
// a stale script. Prefix+"auth.json" says whether the API wants a token
// ({"token":true}), so that the page asks for one before its first call;
// any 401 of the API says as much. Any other path goes to other.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	f, ok := h.files[p]
	login := p == LoginPath || p == CallbackPath || p == LogoutPath
	if !ok && p != Prefix+"auth.json" && !login {
		h.other.ServeHTTP(w, r)
		return
	}
	if !h.guard.AllowPublic(w, r) {
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	if login {
		want := http.MethodGet
		if p == LogoutPath {
			want = http.MethodPost
		}
		if r.Method != want {
			hdr.Set("Allow", want)
			http.Error(w, "method not allowed: "+p+" takes "+want, http.StatusMethodNotAllowed)
			return
		}
		switch p {
		case LoginPath:
			h.beginLogin(w, r)
		case CallbackPath:
			h.callback(w, r)
		default:
			h.logout(w, r)
		}
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: the dashboard is read with GET", http.StatusMethodNotAllowed)
		return
	}
	if !ok { // auth.json
		hdr.Set("Cache-Control", "no-store")
		hdr.Set("Content-Type", "application/json")
		_, _ = w.Write(h.authState(r))
		return
	}
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Type", f.ctype)
	body, etag := f.body, f.etag
	if f.gz != nil {
		hdr.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Values("Accept-Encoding")) {
			body, etag = f.gz, f.gzETag
			hdr.Set("Content-Encoding", "gzip")
		}
	}
	hdr.Set("ETag", etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// authState is auth.json: whether the API wants a token ("token"),
// whether the dashboard logs in at the issuer ("login", with team
// identity and auth.dashboardClientId) and whether r's session cookie
// names a live session ("session").
func (h *Handler) authState(r *http.Request) []byte {
	st := struct {
		Token   bool `json:"token"`
		Login   bool `json:"login"`
		Session bool `json:"session"`
		// ClientID is the dashboard's public client, which mcpvisor
		// login --gateway uses by default (a public client's id is no
		// secret).
		ClientID string `json:"clientId,omitempty"`
	}{Token: h.token}
	if c := h.guard.Team().Config(); c != nil {
		st.Token = true
		st.Login = c.DashboardClientID != ""
		st.ClientID = c.DashboardClientID
		if sid := c.SessionID(r); sid != "" {
			_, st.Session = h.guard.Team().Sessions().Lookup(sid)
		}
	}
	b, _ := json.Marshal(st)
	return append(b, '\n')
}

// acceptsGzip reports whether Accept-Encoding values list gzip without
// refusing it (q=0).
func acceptsGzip(values []string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			k, v, _ := strings.Cut(strings.ReplaceAll(params, " ", ""), "=")
			q, err := strconv.ParseFloat(v, 64)
			return !strings.EqualFold(k, "q") || err != nil || q > 0
		}
	}
	return false
}
