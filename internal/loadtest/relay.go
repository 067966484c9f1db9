package loadtest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// RawRelayHandler is the benchmark's relay baseline: the least any HTTP to
// stdio relay must do per request, and nothing more. It reads the POST body,
// decodes its JSON-RPC envelope, sends the request to the server behind c
// under a fresh id, and answers the server's response under the client's id
// as application/json. No sessions, no routing, no timeouts, no checks: it
// measures what the machine charges for one more process hop, so that a
// real relay can be judged against both the bare-handler floor and this.
//
// A 2026-07-28 request (loadtest.AppendModernCall's) reaches the server as
// mcpvisor forwards it to a legacy server: without the
// "io.modelcontextprotocol/protocolVersion" member of params._meta, its
// clientCapabilities kept (see relayLine). That is all it does for the
// revision: it checks no Mcp-Protocol-Version, Mcp-Method or Mcp-Name
// header and no _meta, and does not add the "resultType":"complete" that
// mcpvisor puts in such a request's result, so its reply is some 24 bytes
// smaller than mcpvisor's — a comparison with mcpvisor favours it slightly.
func RawRelayHandler(c *StdioConn) http.Handler {
	bufs := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := bufs.Get().(*bytes.Buffer)
		defer bufs.Put(buf)
		buf.Reset()
		if _, err := buf.ReadFrom(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(buf.Bytes(), &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(req.ID) == 0 { // a notification: nothing comes back
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var line []byte
		reply, err := c.call(r.Context(), func(id int64) []byte {
			line = relayLine(line[:0], id, req.Method, req.Params)
			return line
		}, make(chan []byte, 1))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		var resp struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(reply, &resp); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out := append(line[:0], `{"jsonrpc":"2.0","id":`...)
		out = append(out, req.ID...)
		if len(resp.Error) != 0 {
			out = append(out, `,"error":`...)
			out = append(out, resp.Error...)
		} else {
			out = append(out, `,"result":`...)
			out = append(out, resp.Result...)
		}
		out = append(out, '}')
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(out)
	})
}

// modernVersionMember is the version member of a 2026-07-28 request's
// params._meta, as AppendModernCall writes it (a member followed by
// another).
var modernVersionMember = []byte(`"io.modelcontextprotocol/protocolVersion":"` + ModernVersion + `",`)

// relayLine appends the request line (newline included) that
// RawRelayHandler sends the server: method and params under id. If params
// hold modernVersionMember, those bytes are left out, as mcpvisor leaves
// the version key out of what it forwards to a legacy server; nothing else
// changes. It matches bytes, parsing nothing, so it is for the load
// client's requests only: elsewhere the bytes could match an arguments
// member of that name, or the tail of a key holding an escaped quote, and
// those would lose a member.
func relayLine(dst []byte, id int64, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"method":`...)
	dst = strconv.AppendQuote(dst, method)
	if len(params) != 0 {
		dst = append(dst, `,"params":`...)
		if i := bytes.Index(params, modernVersionMember); i >= 0 {
			dst = append(dst, params[:i]...)
			params = params[i+len(modernVersionMember):]
		}
		dst = append(dst, params...)
	}
	return append(dst, "}\n"...)
}
