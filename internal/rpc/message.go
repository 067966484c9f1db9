package rpc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Message is one JSON-RPC 2.0 message, decoded only as far as the envelope.
// Params, Result and Error.Data are the exact bytes of the wire, so unknown
// fields and future methods pass through untouched.
//
// Kinds: a request has Method and ID; a notification has Method and no ID;
// a response has ID, no Method, and Result or Error.
type Message struct {
	// ID is the raw id: a JSON string or number exactly as sent (1, "1"
	// and 1.0 are different ids), "null" in an error response to a line
	// the peer could not read, nil in a notification.
	ID     json.RawMessage
	Method string
	Params json.RawMessage // nil when absent
	Result json.RawMessage // nil when absent
	Error  *Error
}

// IsRequest reports whether m is a request: it has a method and an id.
func (m *Message) IsRequest() bool { return m.Method != "" && len(m.ID) != 0 }

// IsNotification reports whether m is a notification: a method, no id.
func (m *Message) IsNotification() bool { return m.Method != "" && len(m.ID) == 0 }

// IsResponse reports whether m is a response: an id and no method.
func (m *Message) IsResponse() bool { return m.Method == "" && len(m.ID) != 0 }

// Decode decodes one JSON-RPC 2.0 message. White space around it is
// allowed. The Message aliases data (its raw fields are sub-slices with
// their capacity clipped), so data must not change while it is in use.
//
// The error, if any, is a *DecodeError: ParseError for anything that is not
// one valid JSON value, InvalidRequest for valid JSON that is not a
// message — not an object (a batch array included: MCP since 2025-06-18
// has no batches), "jsonrpc" other than "2.0", an id that is not a string,
// number or null, an empty or non-string method, a request with a null id,
// a response without exactly one of result and error, or a malformed error
// object. Members other than the envelope's are ignored; a repeated
// member's last value wins, as in encoding/json.
func Decode(data []byte) (*Message, error) {
	env, err := parseEnvelope(data)
	if err != nil {
		return nil, err
	}
	return env.message(data), nil
}

// span is a value's position in a line; end == 0 means absent (a value
// can never end at 0, the object's '{' comes first).
type span struct{ start, end int }

func (s span) ok() bool { return s.end != 0 }

func (s span) of(d []byte) []byte {
	if s.end == 0 {
		return nil
	}
	return d[s.start:s.end:s.end]
}

// envelope is a parsed message as positions, so the conn can parse a line
// in the reader's buffer and copy it only once it is known to be good.
type envelope struct {
	id, params, result span
	method             string
	hasErr             bool
	errCode            int
	errMsg             string
	errData            span
}

func (e *envelope) message(d []byte) *Message {
	m := &Message{ID: e.id.of(d), Method: e.method, Params: e.params.of(d), Result: e.result.of(d)}
	if e.hasErr {
		m.Error = &Error{Code: e.errCode, Message: e.errMsg, Data: e.errData.of(d)}
	}
	return m
}

func invalidRequest(reason string, id []byte, req bool) *DecodeError {
	return &DecodeError{Code: InvalidRequest, Reason: reason, ID: id, Request: req}
}

func parseError(d []byte, err *syntaxError) *DecodeError {
	id, req, _ := sniff(d)
	return &DecodeError{Code: ParseError, Offset: err.off, Reason: err.msg, ID: id, Request: req}
}

func parseEnvelope(d []byte) (envelope, *DecodeError) {
	var env envelope
	i := skipSpace(d, 0)
	if i == len(d) {
		return env, &DecodeError{Code: ParseError, Offset: i, Reason: "empty message"}
	}
	if d[i] != '{' {
		end, err := skipValue(d, i, 0)
		if err == nil && skipSpace(d, end) != len(d) {
			err = errAt(skipSpace(d, end), "invalid character after top-level value")
		}
		if err != nil {
			return env, parseError(d, err)
		}
		if d[i] == '[' {
			return env, invalidRequest("batch (JSON array) messages are not supported", nil, false)
		}
		return env, invalidRequest("message is not a JSON object", nil, false)
	}

	var jsonrpc, method, errv span
	o := objectAt(d, i, 1)
	for o.next() {
		key := o.key
		if o.esc {
			if k, ok := unquoteKey(o.key); ok {
				key = k
			}
		}
		switch string(key) {
		case "jsonrpc":
			jsonrpc = o.value()
		case "id":
			env.id = o.value()
		case "method":
			method = o.value()
		case "params":
			env.params = o.value()
		case "result":
			env.result = o.value()
		case "error":
			errv = o.value()
		}
	}
	serr := o.err
	if serr == nil && skipSpace(d, o.end) != len(d) {
		serr = errAt(skipSpace(d, o.end), "invalid character after top-level value")
	}
	if serr != nil {
		return env, parseError(d, serr)
	}

	isReq := method.ok() || env.params.ok()
	var id []byte
	if env.id.ok() {
		switch c := d[env.id.start]; {
		case c == '"' || c == '-' || isDigit(c) || c == 'n':
			id = env.id.of(d)
		default:
			return env, invalidRequest("id must be a string, a number or null", nil, isReq)
		}
	}
	if !jsonrpc.ok() {
		return env, invalidRequest(`"jsonrpc" member missing`, id, isReq)
	}
	if v := jsonrpc.of(d); string(v) != `"2.0"` {
		if s, _ := unquoteSpan(v); s != "2.0" {
			return env, invalidRequest(`"jsonrpc" must be "2.0"`, id, isReq)
		}
	}
	if method.ok() {
		v := method.of(d)
		if v[0] != '"' {
			return env, invalidRequest("method must be a string", id, true)
		}
		if raw := v[1 : len(v)-1]; bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
			env.method = internMethod(raw)
		} else {
			env.method, _ = unquote(v, true)
		}
		if env.method == "" {
			return env, invalidRequest("method must not be empty", id, true)
		}
		if env.result.ok() || errv.ok() {
			return env, invalidRequest("a request must not have a result or an error", id, true)
		}
		if env.id.ok() && d[env.id.start] == 'n' {
			return env, invalidRequest("request id must not be null", nil, true)
		}
		if env.params.ok() {
			if c := d[env.params.start]; c != '{' && c != '[' && c != 'n' {
				return env, invalidRequest("params must be an object or an array", id, true)
			}
		}
		return env, nil
	}
	if env.params.ok() {
		return env, invalidRequest("params without a method", id, true)
	}
	if !env.id.ok() {
		return env, invalidRequest("message has neither a method nor an id", nil, false)
	}
	if env.result.ok() == errv.ok() {
		return env, invalidRequest("a response must have exactly one of result and error", id, false)
	}
	if errv.ok() {
		if reason := env.parseErrorObject(d, errv); reason != "" {
			return env, invalidRequest(reason, id, false)
		}
	}
	return env, nil
}

// parseErrorObject reads a response's error member into env. It returns
// why the member is not a JSON-RPC error object, or "".
func (env *envelope) parseErrorObject(d []byte, v span) string {
	if d[v.start] != '{' {
		return "error must be an object"
	}
	env.hasErr = true
	hasCode := false
	o := objectAt(d, v.start, 2)
	for o.next() {
		val := d[o.start:o.end]
		switch {
		case o.is("code"):
			code, err := strconv.ParseInt(string(val), 10, 32)
			if err != nil {
				return "error code must be an integer"
			}
			env.errCode, hasCode = int(code), true
		case o.is("message"):
			s, ok := unquoteSpan(val)
			if !ok {
				return "error message must be a string"
			}
			env.errMsg = s
		case o.is("data"):
			env.errData = o.value()
		}
	}
	if !hasCode {
		return "error code missing"
	}
	return ""
}

func unquoteKey(k []byte) ([]byte, bool) {
	q := make([]byte, 0, len(k)+2)
	q = append(append(append(q, '"'), k...), '"')
	s, ok := unquote(q, true)
	return []byte(s), ok
}

// unquoteSpan returns the string value of v, which must be a valid JSON
// value; ok is false if it is not a string.
func unquoteSpan(v []byte) (string, bool) {
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	return unquote(v, bytes.IndexByte(v, '\\') >= 0)
}

// sniff reads what it can of a line that is not a valid message, or only
// the start of one: the top-level object's members are walked until the
// first one that does not parse. It returns the id if one was read whole
// (a string, number or null), whether a "method" or "params" member was
// seen (the line is a request), and whether "result" or "error" was.
func sniff(d []byte) (id json.RawMessage, request, response bool) {
	o := objectAt(d, skipSpace(d, 0), 1)
	for {
		ok := o.next()
		switch {
		case o.is("method"), o.is("params"):
			request = true
		case o.is("result"), o.is("error"):
			response = true
		case ok && o.is("id"):
			if c := d[o.start]; c == '"' || c == '-' || isDigit(c) || c == 'n' {
				id = o.value().of(d)
			}
		}
		if !ok {
			return id, request, response
		}
	}
}

// internMethod returns the method name, without allocating for the
// methods MCP defines.
func internMethod(b []byte) string {
	switch string(b) {
	case "initialize":
		return "initialize"
	case "ping":
		return "ping"
	case "tools/list":
		return "tools/list"
	case "tools/call":
		return "tools/call"
	case "prompts/list":
		return "prompts/list"
	case "prompts/get":
		return "prompts/get"
	case "resources/list":
		return "resources/list"
	case "resources/templates/list":
		return "resources/templates/list"
	case "resources/read":
		return "resources/read"
	case "resources/subscribe":
		return "resources/subscribe"
	case "resources/unsubscribe":
		return "resources/unsubscribe"
	case "completion/complete":
		return "completion/complete"
	case "logging/setLevel":
		return "logging/setLevel"
	case "sampling/createMessage":
		return "sampling/createMessage"
	case "elicitation/create":
		return "elicitation/create"
	case "roots/list":
		return "roots/list"
	case "notifications/initialized":
		return "notifications/initialized"
	case "notifications/cancelled":
		return "notifications/cancelled"
	case "notifications/progress":
		return "notifications/progress"
	case "notifications/message":
		return "notifications/message"
	case "notifications/tools/list_changed":
		return "notifications/tools/list_changed"
	case "notifications/prompts/list_changed":
		return "notifications/prompts/list_changed"
	case "notifications/resources/list_changed":
		return "notifications/resources/list_changed"
	case "notifications/resources/updated":
		return "notifications/resources/updated"
	case "notifications/roots/list_changed":
		return "notifications/roots/list_changed"
	}
	return string(b)
}

// Encode returns m as one line of JSON, without the newline.
// See AppendTo.
func (m *Message) Encode() []byte {
	return m.AppendTo(make([]byte, 0, 64+len(m.ID)+len(m.Method)+len(m.Params)+len(m.Result)))
}

// AppendTo appends m's JSON encoding to dst. The raw fields are copied as
// they are, except that a newline in one (white space between tokens, as a
// newline cannot stand inside a JSON string) becomes a space, so the
// encoding is always a single line. They must hold valid JSON: everything
// Decode returns does; bytes from elsewhere (json.Marshal output is fine)
// are the caller's to check. An empty ID encodes no id; an empty Params
// no params. A message without a method is a response: Error if set, else
// Result, with an empty Result encoded as {} (MCP's empty result).
func (m *Message) AppendTo(dst []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0"`...)
	if len(m.ID) != 0 {
		dst = append(dst, `,"id":`...)
		dst = appendRaw(dst, m.ID)
	}
	switch {
	case m.Method != "":
		dst = append(dst, `,"method":`...)
		dst = appendString(dst, m.Method)
		if len(m.Params) != 0 {
			dst = append(dst, `,"params":`...)
			dst = appendRaw(dst, m.Params)
		}
	case m.Error != nil:
		dst = append(dst, `,"error":{"code":`...)
		dst = strconv.AppendInt(dst, int64(m.Error.Code), 10)
		dst = append(dst, `,"message":`...)
		dst = appendString(dst, m.Error.Message)
		if len(m.Error.Data) != 0 {
			dst = append(dst, `,"data":`...)
			dst = appendRaw(dst, m.Error.Data)
		}
		dst = append(dst, '}')
	default:
		dst = append(dst, `,"result":`...)
		if len(m.Result) == 0 {
			dst = append(dst, "{}"...)
		} else {
			dst = appendRaw(dst, m.Result)
		}
	}
	return append(dst, '}')
}

// appendRaw appends raw JSON, turning newlines into spaces.
func appendRaw(dst, raw []byte) []byte {
	if bytes.IndexByte(raw, '\n') < 0 {
		return append(dst, raw...)
	}
	n := len(dst)
	dst = append(dst, raw...)
	for i, c := range dst[n:] {
		if c == '\n' {
			dst[n+i] = ' '
		}
	}
	return dst
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b, _ := json.Marshal(s) // escapes, and replaces invalid UTF-8
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
