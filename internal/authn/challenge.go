package authn

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Challenge is a refusal of a request's credentials (RFC 6750 §3, MCP
// authorization): the status, the WWW-Authenticate challenge and a small
// JSON body.
type Challenge struct {
	// Status is the HTTP status; 0 means the one Error implies (400
	// invalid_request, 403 insufficient_scope, else 401).
	Status int
	// Error and Description are RFC 6750's error and error_description;
	// both empty for a request that carried no token (§3.1).
	Error, Description string
	// Scopes are the scopes the request needs; with insufficient_scope,
	// every scope the operation needs, in one challenge.
	Scopes []string
	// ResourceMetadata is the URL of the protected resource metadata
	// (RFC 9728 §5.1).
	ResourceMetadata string
	// RetryAfter, with status 503, is sent as Retry-After (seconds).
	RetryAfter time.Duration
}

// Header is the WWW-Authenticate value: Bearer resource_metadata="…",
// scope="…", error="…", error_description="…" (each only when set).
func (c *Challenge) Header() string {
	var b strings.Builder
	b.WriteString("Bearer")
	sep := " "
	add := func(name, val string) {
		if val == "" {
			return
		}
		b.WriteString(sep)
		b.WriteString(name)
		b.WriteString(`="`)
		b.WriteString(quote(val))
		b.WriteString(`"`)
		sep = ", "
	}
	add("resource_metadata", c.ResourceMetadata)
	add("scope", strings.Join(c.Scopes, " "))
	add("error", c.Error)
	add("error_description", c.Description)
	return b.String()
}

// Write answers the request: status, WWW-Authenticate (not with 503),
// Cache-Control: no-store, and {"error":…,"error_description":…}.
func (c *Challenge) Write(w http.ResponseWriter) {
	status := c.Status
	if status == 0 {
		status = statusOf(c.Error)
	}
	h := w.Header()
	if status == http.StatusServiceUnavailable {
		secs := int((c.RetryAfter + time.Second - 1) / time.Second)
		if secs < 1 {
			secs = 1
		}
		h.Set("Retry-After", strconv.Itoa(secs))
	} else {
		h.Set("WWW-Authenticate", c.Header())
	}
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "application/json")
	code := c.Error
	if code == "" {
		if status == http.StatusServiceUnavailable {
			code = "temporarily_unavailable"
		} else {
			code = "unauthorized"
		}
	}
	body, _ := json.Marshal(struct {
		Error       string `json:"error"`
		Description string `json:"error_description,omitempty"`
	}{code, c.Description})
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// quote escapes s for an HTTP quoted-string: '"' and '\' get a
// backslash; control characters (CR, LF, …), which a quoted-string cannot
// hold and which would split the header, become spaces. RFC 6750 limits
// error_description and scope to printable ASCII, so non-ASCII becomes
// '?'.
func quote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			b.WriteByte(' ')
		case c >= 0x80:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
