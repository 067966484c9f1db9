package rpc

import "encoding/json"

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

// progressTokenSpan finds the progress token's position in params; end is
// 0 when there is none.
func progressTokenSpan(d []byte) (start, end int) {
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
	d := params
	o := objectAt(d, skipSpace(d, 0), 1)
	ks, meta := -1, span{}
	for o.next() {
		if o.is("_meta") {
			ks, meta = o.kstart, o.value()
		}
	}
	if o.err != nil || skipSpace(d, o.end) != len(d) || ks < 0 || d[meta.start] != '{' {
		return params
	}
	has := func(o *object) bool {
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
	// One scan of _meta: the members kept (a few, as a rule: on the
	// stack), and whether any goes.
	var kept0 [8]span
	kept := kept0[:0]
	drop := 0
	m := objectAt(d, meta.start, 2)
	for m.next() {
		if has(&m) {
			drop++
		} else {
			kept = append(kept, span{m.kstart, m.end})
		}
	}
	if m.err != nil || drop == 0 {
		return params
	}
	keep := len(kept)
	before, after := d[:ks], d[meta.end:]
	out := make(json.RawMessage, 0, len(d))
	if keep == 0 {
		// _meta goes too, with the comma that separated it.
		j := len(before)
		for j > 0 && isSpace(before[j-1]) {
			j--
		}
		if j > 0 && before[j-1] == ',' {
			before = before[:j-1]
		} else if k := skipSpace(after, 0); k < len(after) && after[k] == ',' {
			after = after[k+1:]
		}
		out = append(out, before...)
		return append(out, after...)
	}
	out = append(out, d[:meta.start]...)
	out = append(out, '{')
	for i, k := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, d[k.start:k.end]...)
	}
	out = append(out, '}')
	return append(out, after...)
}
