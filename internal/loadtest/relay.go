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
			line = append(line[:0], `{"jsonrpc":"2.0","id":`...)
			line = strconv.AppendInt(line, id, 10)
			line = append(line, `,"method":`...)
			line = strconv.AppendQuote(line, req.Method)
			if len(req.Params) != 0 {
				line = append(line, `,"params":`...)
				line = append(line, req.Params...)
			}
			return append(line, "}\n"...)
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
