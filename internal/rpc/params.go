package rpc

import (
	"bytes"
	"encoding/json"
)

// The few params a relay routes on, read without decoding the rest.

// ProgressToken returns the raw progress token in params: the
// "progressToken" member itself (the form of a notifications/progress), or
// else "_meta"."progressToken" (the form of a request that asks for
// progress). It returns nil if params is not a JSON object or has neither.
// The result aliases params.
func ProgressToken(params json.RawMessage) json.RawMessage {
	s, e := progressTokenSpan(params)
	if e == 0 {
		return nil
	}
	return params[s:e:e]
}

// ReplaceProgressToken returns params with the progress token (found as
// ProgressToken finds it) replaced by token, and the token it replaced. If
// params carries none, it returns params itself and nil. params is not
// modified. A relay uses it to give each request's token a name unique on
// the backend connection, and to put the client's own token back on the
// notifications/progress it forwards.
func ReplaceProgressToken(params, token json.RawMessage) (out, old json.RawMessage) {
	s, e := progressTokenSpan(params)
	if e == 0 {
		return params, nil
	}
	out = make(json.RawMessage, 0, len(params)-(e-s)+len(token))
	out = append(out, params[:s]...)
	out = appendRaw(out, token)
	out = append(out, params[e:]...)
	return out, params[s:e:e]
}

// CancelledRequestID returns the raw "requestId" of a
// notifications/cancelled params, or nil.
func CancelledRequestID(params json.RawMessage) json.RawMessage {
	return field(params, "requestId")
}

// progressTokenKey is the key of a progress token as it is written
// without escapes; unicodeEscape is the only escape that can spell one
// of its letters.
var (
	progressTokenKey = []byte(`"progressToken"`)
	unicodeEscape    = []byte(`\u`)
)

// progressTokenSpan finds the progress token's position in params; end is
// 0 when there is none. Most params carry none: when they hold neither
// the key's bytes nor a \u escape that could spell it, that is settled
// without a scan.
func progressTokenSpan(d []byte) (start, end int) {
	if !bytes.Contains(d, progressTokenKey) && !bytes.Contains(d, unicodeEscape) {
		return 0, 0
	}
	var tok, meta span
	o := objectAt(d, skipSpace(d, 0), 1)
	for o.next() {
		switch {
		case o.is("progressToken"):
			tok = o.value()
		case o.is("_meta"):
			meta = o.value()
		}
	}
	if o.err != nil || skipSpace(d, o.end) != len(d) {
		return 0, 0
	}
	if !tok.ok() && meta.ok() && d[meta.start] == '{' {
		o = objectAt(d, meta.start, 2)
		for o.next() {
			if o.is("progressToken") {
				tok = o.value()
			}
		}
	}
	return tok.start, tok.end
}

// StringMember returns the string value of a top-level member of the JSON
// object obj, and whether it was there as a string. The rest of obj is
// scanned, not decoded: a relay reads the name or uri it routes on this way.
func StringMember(obj json.RawMessage, name string) (string, bool) {
	v := field(obj, name)
	if v == nil {
		return "", false
	}
	return unquoteSpan(v)
}

// Member returns the raw value of a top-level member of the JSON object
// obj, or nil if obj is not a valid object or has no such member. The
// rest of obj is scanned, not decoded; the result aliases obj.
func Member(obj json.RawMessage, name string) json.RawMessage {
	return field(obj, name)
}

// String returns the value of the JSON string literal v, and whether v
// is one.
func String(v json.RawMessage) (string, bool) {
	if v == nil {
		return "", false
	}
	return unquoteSpan(v)
}

// MembersInto stores in dst the raw values of the top-level members names
// of the JSON object obj, in one scan (nil for a name it lacks); dst must
// be as long as names (a caller's array: nothing is allocated). The values
// alias obj. It reports whether obj is a valid object; when it is not, dst
// is all nil.
func MembersInto(dst []json.RawMessage, obj json.RawMessage, names ...string) bool {
	clear(dst)
	o := objectAt(obj, skipSpace(obj, 0), 1)
	for o.next() {
		for i, n := range names {
			if o.is(n) {
				dst[i] = o.value().of(obj)
			}
		}
	}
	if o.err != nil || skipSpace(obj, o.end) != len(obj) {
		clear(dst)
		return false
	}
	return true
}

// PrependMembers returns the JSON object obj with members — raw
// `"name":value` pairs joined by commas, no trailing comma — added first,
// every other byte of obj kept; obj is not modified. An empty or null obj
// becomes the object of members alone; anything else that is not an
// object is returned as it is.
func PrependMembers(obj json.RawMessage, members []byte) json.RawMessage {
	if len(obj) == 0 || string(obj) == "null" {
		return append(append(append(make(json.RawMessage, 0, len(members)+2), '{'), members...), '}')
	}
	if obj[0] != '{' {
		return obj
	}
	i := skipSpace(obj, 1)
	out := make(json.RawMessage, 0, len(obj)+len(members)+1)
	out = append(out, '{')
	out = append(out, members...)
	if i < len(obj) && obj[i] != '}' {
		out = append(out, ',')
	}
	return append(out, obj[1:]...)
}

// SetMember returns the JSON object obj with its top-level member name set
// to value: replaced where it is, else added first (see PrependMembers).
func SetMember(obj json.RawMessage, name string, value json.RawMessage) json.RawMessage {
	if out, ok := ReplaceMember(obj, name, value); ok {
		return out
	}
	m := appendString(make([]byte, 0, len(name)+len(value)+3), name)
	m = append(m, ':')
	return PrependMembers(obj, appendRaw(m, value))
}

// ReplaceMember returns obj with the value of its top-level member name
// replaced by value (raw JSON), leaving every other byte as it was, and
// whether the member was found. obj is not modified.
func ReplaceMember(obj json.RawMessage, name string, value json.RawMessage) (json.RawMessage, bool) {
	o := objectAt(obj, skipSpace(obj, 0), 1)
	var v span
	for o.next() {
		if o.is(name) {
			v = o.value()
		}
	}
	if o.err != nil || skipSpace(obj, o.end) != len(obj) || !v.ok() {
		return obj, false
	}
	out := make(json.RawMessage, 0, len(obj)-(v.end-v.start)+len(value))
	out = append(out, obj[:v.start]...)
	out = appendRaw(out, value)
	out = append(out, obj[v.end:]...)
	return out, true
}

// DropMetaKeys returns params with the members of params._meta named
// one of keys left out, and _meta itself when nothing else is in it; the
// rest of params is kept byte for byte. It returns params itself (no copy)
// when _meta has no such member, or params or its _meta is not a valid
// object. params is not modified.
func DropMetaKeys(params json.RawMessage, keys ...string) json.RawMessage {
	out, _ := EditParams(params, "", nil, keys...)
	return out
}

// EditParams is ReplaceMember and DropMetaKeys in one scan and one copy:
// params with the value of its top-level member name (if name is not "")
// replaced by value, and the members of its _meta named one of metaKeys
// left out (_meta itself when nothing else is in it); the rest is kept
// byte for byte. ok is false when params is not a valid object (it is
// returned as it is) or has no member name (only _meta is edited); params
// itself comes back when there is nothing to change. params is not
// modified.
func EditParams(params json.RawMessage, name string, value json.RawMessage, metaKeys ...string) (out json.RawMessage, ok bool) {
	d := params
	o := objectAt(d, skipSpace(d, 0), 1)
	ks, meta, val := -1, span{}, span{}
	for o.next() {
		switch {
		case o.is("_meta"):
			ks, meta = o.kstart, o.value()
		case name != "" && o.is(name):
			val = o.value()
		}
	}
	if o.err != nil || skipSpace(d, o.end) != len(d) {
		return params, false
	}
	ok = true
	if name != "" && !val.ok() {
		name, ok = "", false // no such member: the _meta edit alone
	}
	// The _meta edit: the span of d it replaces and what goes there.
	metaEdit := span{}
	var kept0 [8]span
	kept := kept0[:0]
	if ks >= 0 && len(metaKeys) > 0 && d[meta.start] == '{' {
		drop := 0
		m := objectAt(d, meta.start, 2)
		for m.next() {
			if metaKeyIn(&m, metaKeys) {
				drop++
			} else {
				kept = append(kept, span{m.kstart, m.end})
			}
		}
		switch {
		case m.err != nil || drop == 0:
		case len(kept) > 0:
			metaEdit = span{meta.start, meta.end}
		default:
			// _meta goes too, with the comma that separated it.
			from, to := ks, meta.end
			j := from
			for j > 0 && isSpace(d[j-1]) {
				j--
			}
			if j > 0 && d[j-1] == ',' {
				from = j - 1
			} else if k := skipSpace(d, to); k < len(d) && d[k] == ',' {
				to = k + 1
			}
			metaEdit = span{from, to}
		}
	}
	if name == "" && !metaEdit.ok() {
		return params, ok
	}
	out = make(json.RawMessage, 0, len(d)+len(value))
	writeMeta := func(out json.RawMessage) json.RawMessage {
		if len(kept) == 0 {
			return out // _meta left out whole
		}
		out = append(out, '{')
		for i, k := range kept {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, d[k.start:k.end]...)
		}
		return append(out, '}')
	}
	at := 0
	// The two edits never overlap: in the order they come in d.
	if name != "" && (!metaEdit.ok() || val.start < metaEdit.start) {
		out = appendRaw(append(out, d[at:val.start]...), value)
		at = val.end
		if metaEdit.ok() {
			out = writeMeta(append(out, d[at:metaEdit.start]...))
			at = metaEdit.end
		}
	} else {
		out = writeMeta(append(out, d[at:metaEdit.start]...))
		at = metaEdit.end
		if name != "" {
			out = appendRaw(append(out, d[at:val.start]...), value)
			at = val.end
		}
	}
	return append(out, d[at:]...), ok
}

// metaKeyIn reports whether the member o is at is named one of keys.
func metaKeyIn(o *object, keys []string) bool {
	k := o.key
	if o.esc {
		var ok bool
		if k, ok = unquoteKey(o.key); !ok {
			return false
		}
	}
	for _, key := range keys {
		if string(k) == key {
			return true
		}
	}
	return false
}

// DropMembers returns the JSON object obj without its top-level members
// named one of names, and without the members of its _meta named one of
// metaKeys (_meta itself too when nothing else is left in it). The members
// kept are copied byte for byte, in their order; only the white space
// between members may change. It returns obj itself (no copy) when there
// is nothing to drop, or obj is not a valid object. obj is not modified.
func DropMembers(obj json.RawMessage, names, metaKeys []string) json.RawMessage {
	d := obj
	// A member kept: its span, and for a _meta with keys dropped, where
	// its value begins and the members of it kept.
	type member struct {
		span
		val  int
		meta []span
	}
	o := objectAt(d, skipSpace(d, 0), 1)
	var kept0 [16]member
	kept := kept0[:0]
	dropped := false
	for o.next() {
		k := member{span: span{o.kstart, o.end}}
		switch {
		case len(names) > 0 && metaKeyIn(&o, names):
			dropped = true
			continue
		case len(metaKeys) > 0 && o.is("_meta") && d[o.start] == '{':
			m := objectAt(d, o.start, 2)
			var inner []span
			drop := 0
			for m.next() {
				if metaKeyIn(&m, metaKeys) {
					drop++
				} else {
					inner = append(inner, span{m.kstart, m.end})
				}
			}
			if m.err == nil && drop > 0 {
				dropped = true
				if len(inner) == 0 {
					continue // _meta left out whole
				}
				k.val, k.meta = o.start, inner
			}
		}
		kept = append(kept, k)
	}
	if o.err != nil || skipSpace(d, o.end) != len(d) || !dropped {
		return obj
	}
	out := make(json.RawMessage, 0, len(d))
	out = append(out, '{')
	for i, k := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		if k.meta == nil {
			out = append(out, d[k.start:k.end]...)
			continue
		}
		// A _meta: its name as it was, its object rewritten.
		out = append(out, d[k.start:k.val]...)
		out = append(out, '{')
		for j, m := range k.meta {
			if j > 0 {
				out = append(out, ',')
			}
			out = append(out, d[m.start:m.end]...)
		}
		out = append(out, '}')
	}
	return append(out, '}')
}
