package gateway

import (
	"encoding/json"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/mcpvisor/mcpvisor/internal/clientbook"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A client's identity — its name and version — is what it says it is:
//
//   - a legacy client (2025-11-25 and earlier) says it once, in
//     initialize's params.clientInfo (an Implementation: name, version),
//     for the whole session;
//   - a modern client (2026-07-28) says it in every request, in
//     params._meta["io.modelcontextprotocol/clientInfo"], the same
//     Implementation, optional ("Clients SHOULD include
//     io.modelcontextprotocol/clientInfo on every request":
//     docs/specification/2026-07-28/basic/index.mdx, General fields, _meta,
//     Per-request protocol fields, in the modelcontextprotocol repository).
//
// A client that says nothing is named by its session's hint — what
// launched it, as the front knows it (StdioOptions.ClientHint) — and
// failing that clientbook.Unknown. The spec calls both self-reported,
// "intended for display, logging, and debugging": mcpvisor only shows and
// counts them (Gateway.Clients), and decides nothing by them.
//
// Every name is client-controlled, so it is normalized and bounded before
// it is kept: letters and digits (any script, lower-cased), '.', '_' and
// '-' are kept, any run of other characters — spaces, punctuation,
// control characters — becomes one '-', and the result is cut at
// clientbook.MaxNameLen bytes (a version at clientbook.MaxVersionLen,
// '+' kept too); at most maxIdentScan bytes of the JSON string are read.
// The fleet bounds how many names a server keeps.

// maxIdentScan bounds the bytes of a client's JSON string read to
// normalize its name or version: a huge name costs no more than a short
// one.
const maxIdentScan = 1024

// clientIdent is who a session's client is, normalized (nil: not given).
type clientIdent struct {
	name, version []byte // from initialize's clientInfo
	hint          []byte // SetClientHint's
}

// SetClientHint names the session's client when it names itself nowhere
// (no clientInfo at initialize, none in a modern request's _meta): hint
// is normalized like a clientInfo name, and "" clears it. A name the
// client gives wins over it. Safe to call at any time, concurrently.
func (s *Session) SetClientHint(hint string) {
	h := normalizedIdent(nil, []byte(hint), false, false)
	s.updateIdent(func(id *clientIdent) { id.hint = h })
}

// setClientInfo records the clientInfo a legacy client gave at
// initialize (an Implementation object; nil or not an object: none).
func (s *Session) setClientInfo(info json.RawMessage) {
	name, version := identOf(nil, nil, info)
	s.updateIdent(func(id *clientIdent) {
		id.name = clone(name)
		id.version = clone(version)
	})
}

// clone is a copy of b (nil for an empty b).
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// updateIdent replaces the session's identity by a copy changed by edit.
func (s *Session) updateIdent(edit func(*clientIdent)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var id clientIdent
	if old := s.ident.Load(); old != nil {
		id = *old
	}
	edit(&id)
	s.ident.Store(&id)
}

// clientIdentity is the name and version a request of w is counted
// under: for a modern request, mo's (Modern.clientIdentity) — mo is its
// _meta as the request's call began, read by the caller then, for a held
// call's later rounds replace it while it runs; for a session, the
// clientInfo of its initialize, else its hint; else none (an empty name,
// which the client book counts as clientbook.Unknown). A modern request's
// name is written in nb, its version in vb (no allocation: the book
// copies what it keeps).
func (w sender) clientIdentity(mo *Modern, nb, vb []byte) (name, version []byte) {
	if mo != nil {
		return mo.clientIdentity(nb, vb)
	}
	if w.sess != nil {
		return w.sess.ownIdentity()
	}
	return nil, nil
}

// ownIdentity is what s itself knows of its client: the clientInfo of its
// initialize, else its hint, else none. (Not recursive through
// Modern.clientIdentity, so that the buffers of a request's identity stay
// on its stack.)
func (s *Session) ownIdentity() (name, version []byte) {
	id := s.ident.Load()
	switch {
	case id == nil:
		return nil, nil
	case len(id.name) > 0:
		return id.name, id.version
	}
	return id.hint, nil
}

// clientIdentity is the name and version of a modern request's client,
// appended to nb and vb: the clientInfo of its _meta, else the identity
// of the connection it came on (a stdio client's session: its hint).
func (mo *Modern) clientIdentity(nb, vb []byte) (name, version []byte) {
	if name, version = identOf(nb, vb, mo.ClientInfo); len(name) > 0 {
		return name, version
	}
	if mo.client != nil {
		return mo.client.ownIdentity()
	}
	return nil, nil
}

// adoptIdentity makes s (a session mcpvisor holds on a modern request's
// behalf) count its requests under the identity of that request, mo.
func (s *Session) adoptIdentity(mo *Modern) {
	var nb [clientbook.MaxNameLen]byte
	var vb [clientbook.MaxVersionLen]byte
	name, version := mo.clientIdentity(nb[:0], vb[:0])
	s.updateIdent(func(id *clientIdent) {
		id.name = clone(name)
		id.version = clone(version)
	})
}

// identOf is the normalized name and version of the Implementation info,
// appended to nb and vb; empty when info has none (or is not an object).
func identOf(nb, vb []byte, info json.RawMessage) (name, version []byte) {
	if len(info) == 0 || info[0] != '{' {
		return nil, nil
	}
	var v [2]json.RawMessage
	rpc.MembersInto(v[:], info, "name", "version")
	return normalizedIdent(nb, v[0], true, false), normalizedIdent(vb, v[1], true, true)
}

// normalizedIdent appends to dst the normalized form (see the top of this
// file) of s — a JSON string if quoted is set (anything else is empty),
// else plain text — as a version if version is set, else as a name.
func normalizedIdent(dst, s []byte, quoted, version bool) []byte {
	limit := clientbook.MaxNameLen
	if version {
		limit = clientbook.MaxVersionLen
	}
	start := len(dst)
	if quoted {
		if len(s) < 2 || s[0] != '"' {
			return dst
		}
		s = s[1:]
	}
	s = s[:min(len(s), maxIdentScan)]
	sep := false // a run of characters not kept is pending
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if quoted {
			switch s[0] {
			case '"':
				s = nil // the end of the string
				continue
			case '\\':
				r, n = unescape(s)
			}
		}
		s = s[n:]
		keep := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-' || (version && r == '+')
		if !keep {
			sep = true
			continue
		}
		r = unicode.ToLower(r)
		need := utf8.RuneLen(r)
		if sep && len(dst) > start {
			need++
		}
		if len(dst)-start+need > limit {
			break
		}
		if sep && len(dst) > start {
			dst = append(dst, '-')
		}
		sep = false
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// unescape reads the JSON escape at the start of s (s[0] is '\\'): the
// character it stands for and its length. A \u escape of half a
// surrogate pair is taken with its other half when that follows; one that
// is malformed or cut off (by maxIdentScan) is utf8.RuneError, a
// character normalizing drops.
func unescape(s []byte) (rune, int) {
	if len(s) < 2 {
		return utf8.RuneError, len(s)
	}
	switch s[1] {
	case 'u':
		if len(s) < 6 {
			return utf8.RuneError, len(s) // cut off
		}
		r, ok := hex4(s[2:])
		if !ok {
			return utf8.RuneError, 2
		}
		if utf16.IsSurrogate(r) && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, ok := hex4(s[8:]); ok {
				if c := utf16.DecodeRune(r, lo); c != utf8.RuneError {
					return c, 12
				}
			}
		}
		if utf16.IsSurrogate(r) {
			return utf8.RuneError, 6
		}
		return r, 6
	case '"', '\\', '/':
		return rune(s[1]), 2
	}
	return utf8.RuneError, 2 // \b \f \n \r \t: control characters
}

// hex4 is the value of the four hexadecimal digits at the start of s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
