// Package audit is mcpvisor's audit log: one JSON line for every call and
// every denial, written by one goroutine from a bounded queue so that a
// request never waits for the disk, to a rotating file or to stdout, and
// kept in memory (the last RingSize records) for the admin API's
// /api/audit.
//
// A line's keys are snake_case and stable:
//
//	seq          the record's number in this process (1, 2, …)
//	time         when it happened, RFC 3339 in UTC with milliseconds
//	identity     the subject (sub) of who made the request
//	issuer       its issuer; kind its identity kind (token, local, static)
//	client       the OAuth client the token was issued to (client_id)
//	endpoint     /mcp, /servers/{name}/mcp, stdio or socket
//	session      the MCP session, if any
//	server       the server the request went to
//	method       the JSON-RPC method (tools/call, …)
//	target       the tool, the prompt or the resource URI
//	outcome      ok, error, denied, limited, timeout, cancelled, …
//	code         the JSON-RPC error code, if any
//	reason       why a request was denied, in full (the client is only
//	             ever told "not permitted")
//	duration_ms  how long the request took, in milliseconds (float)
//	arguments    the arguments, as configured (Options.Arguments):
//	             in full, or redacted
//	arguments_sha256  the digest of the arguments, when so configured
//
// Empty fields are left out, but for outcome and duration_ms.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// Record is one call or denial.
type Record struct {
	Time time.Time
	// Identity is the subject (sub) of who made the request; Issuer and
	// Kind are its issuer and identity kind, Client the OAuth client the
	// token was issued to (client_id).
	Identity, Issuer, Kind, Client string
	// Endpoint is where the request came: "/mcp", "/servers/x/mcp",
	// "stdio", "socket".
	Endpoint string
	// Session is the MCP session ("": none).
	Session string
	// Server is the server the request went to; Method its JSON-RPC
	// method; Target the tool, prompt or resource URI.
	Server, Method, Target string
	// Outcome is "ok", "error", "denied", "limited", "timeout",
	// "cancelled", ….
	Outcome string
	// Code is the JSON-RPC error code (0: none).
	Code int
	// Reason is the full reason of a denial.
	Reason string
	// Duration is how long the request took.
	Duration time.Duration
	// Arguments are the request's arguments as they came (JSON). The Log
	// reads them after Add returns: the caller must not change them.
	// (A Record travels as JSON between replicas: none stay none.)
	Arguments json.RawMessage `json:",omitempty"`
}

// SetIdentity fills r's Identity, Issuer, Kind and Client from id (nil:
// leaves them empty, an anonymous request).
func (r *Record) SetIdentity(id *identity.Identity) {
	if id == nil {
		r.Identity, r.Issuer, r.Kind, r.Client = "", "", "", ""
		return
	}
	r.Identity, r.Issuer, r.Kind, r.Client = id.Subject, id.Issuer, string(id.Kind), id.ClientID
}

// Argument modes (Options.Arguments).
const (
	// ArgsOmit leaves the arguments out.
	ArgsOmit = "omit"
	// ArgsRedact keeps their structure — objects, arrays, keys, booleans
	// and nulls — and replaces every string and number with "[REDACTED]":
	// what a call looked like, never what it said. (Guessing which
	// strings are secrets, as package redact does for command lines, is
	// no promise for arbitrary tool arguments.)
	ArgsRedact = "redact"
	// ArgsDigest writes the hex SHA-256 of the arguments' canonical JSON
	// (object keys sorted, no insignificant space, numbers as written) as
	// arguments_sha256: the same arguments have the same digest whatever
	// the order of their keys, and nothing of them can be read back.
	ArgsDigest = "digest"
	// ArgsFull writes the arguments as they came (compacted).
	ArgsFull = "full"
)

// Redacted replaces every string and number under ArgsRedact.
const Redacted = "[REDACTED]"

// wire is a record as written.
type wire struct {
	Seq        uint64          `json:"seq"`
	Time       string          `json:"time"`
	Identity   string          `json:"identity,omitempty"`
	Issuer     string          `json:"issuer,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Client     string          `json:"client,omitempty"`
	Endpoint   string          `json:"endpoint,omitempty"`
	Session    string          `json:"session,omitempty"`
	Server     string          `json:"server,omitempty"`
	Method     string          `json:"method,omitempty"`
	Target     string          `json:"target,omitempty"`
	Outcome    string          `json:"outcome"`
	Code       int             `json:"code,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	DurationMS float64         `json:"duration_ms"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	ArgsSHA256 string          `json:"arguments_sha256,omitempty"`
}

// timeLayout is RFC 3339 with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Line is the record r, numbered seq, as one JSON line (with its
// newline), its arguments handled by mode.
func (r *Record) Line(seq uint64, mode string) ([]byte, error) {
	w := wire{
		Seq: seq, Time: r.Time.UTC().Format(timeLayout),
		Identity: r.Identity, Issuer: r.Issuer, Kind: r.Kind, Client: r.Client,
		Endpoint: r.Endpoint, Session: r.Session, Server: r.Server, Method: r.Method, Target: r.Target,
		Outcome: r.Outcome, Code: r.Code, Reason: r.Reason,
		DurationMS: float64(r.Duration.Microseconds()) / 1000,
	}
	if len(bytes.TrimSpace(r.Arguments)) > 0 {
		switch mode {
		case ArgsOmit:
		case ArgsFull:
			w.Arguments = full(r.Arguments)
		case ArgsRedact:
			w.Arguments = redacted(r.Arguments)
		default: // ArgsDigest
			w.ArgsSHA256 = Digest(r.Arguments)
		}
	}
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// CheckArguments is an error for a mode that is none of ArgsOmit,
// ArgsRedact, ArgsDigest, ArgsFull ("" is ArgsDigest).
func CheckArguments(mode string) error {
	switch mode {
	case "", ArgsOmit, ArgsRedact, ArgsDigest, ArgsFull:
		return nil
	}
	return fmt.Errorf("audit arguments %q: want omit, redact, digest or full", mode)
}

// full is raw compacted, or, if it is not JSON, raw as a JSON string.
func full(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil {
		return b.Bytes()
	}
	s, _ := json.Marshal(string(raw))
	return s
}

// decode is raw decoded, numbers kept as written.
func decode(raw json.RawMessage) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return nil, false
	}
	return v, true
}

// Digest is the hex SHA-256 of raw's canonical JSON (keys sorted, no
// space, numbers as written), or of raw's bytes if it is not JSON.
func Digest(raw json.RawMessage) string {
	b := []byte(raw)
	if v, ok := decode(raw); ok {
		if c, err := json.Marshal(v); err == nil { // map keys come sorted
			b = c
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// redacted is raw with every string and number replaced by Redacted
// (Redacted itself, as a string, if raw is not JSON).
func redacted(raw json.RawMessage) json.RawMessage {
	v, ok := decode(raw)
	if !ok {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	b, err := json.Marshal(redactValue(v))
	if err != nil {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	return b
}

func redactValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = redactValue(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = redactValue(e)
		}
		return v
	case string, json.Number:
		return Redacted
	}
	return v // bool, nil
}
