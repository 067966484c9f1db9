package testserver

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// httpFront serves the fixture over HTTP (-http): each POST carries one
// JSON-RPC message, handed to the same loop stdin feeds; a request's
// response comes back as the POST's JSON body, a notification gets 202.
// What the fixture sends on its own (notifications, its requests to the
// client) has nowhere to go and is dropped. It is the simplest direct
// HTTP path to the fixture, for tools that speak MCP over HTTP only (the
// official conformance suite), with no gateway in between.
type httpFront struct {
	s   *server
	log *log.Logger
	seq atomic.Int64

	lineMu sync.Mutex // one message handled at a time, as stdin's loop does

	mu      sync.Mutex
	waiting map[string]chan json.RawMessage // by the id given to the fixture
}

// serveHTTP serves the fixture configured cfg at cfg.httpAddr until the
// process ends, and returns the exit code.
func serveHTTP(cfg config, logger *log.Logger) int {
	f := &httpFront{log: logger, waiting: map[string]chan json.RawMessage{}}
	f.s = newServer(cfg, f, logger)
	defer f.s.stop()
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		logger.Printf("-http: %v", err)
		return 1
	}
	logger.Printf("serving MCP over HTTP at %s", ln.Addr())
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		logger.Printf("-http: %v", err)
	}
	return 1
}

// Write takes one line the fixture writes (write sends each message in
// one Write): a response goes to the POST waiting for it.
func (f *httpFront) Write(line []byte) (int, error) {
	var m incoming
	if json.Unmarshal(bytes.TrimSpace(line), &m) == nil && m.Method == "" && m.ID != nil {
		f.mu.Lock()
		ch := f.waiting[idKey(m.ID)]
		delete(f.waiting, idKey(m.ID))
		f.mu.Unlock()
		if ch != nil {
			ch <- append(json.RawMessage(nil), bytes.TrimSpace(line)...)
		}
	}
	return len(line), nil
}

func (f *httpFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "the fixture takes POSTs only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil {
		f.handle(body) // the loop answers a parse error with id null, dropped
		writeJSON(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: one JSON-RPC message object per POST"}}`)
		return
	}
	id, isRequest := msg["id"]
	if _, hasMethod := msg["method"]; !isRequest || !hasMethod || !validID(id) {
		f.handle(body)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// The fixture sees an id of the front's own: two clients may send
	// the same one.
	ours := json.RawMessage(strconv.Quote("http-" + strconv.FormatInt(f.seq.Add(1), 10)))
	ch := make(chan json.RawMessage, 1)
	f.mu.Lock()
	f.waiting[idKey(ours)] = ch
	f.mu.Unlock()
	msg["id"] = ours
	line, _ := json.Marshal(msg)
	f.handle(line)
	select {
	case resp := <-ch:
		var out map[string]json.RawMessage
		_ = json.Unmarshal(resp, &out)
		out["id"] = id
		b, _ := json.Marshal(out)
		writeJSON(w, string(b))
	case <-r.Context().Done():
		f.mu.Lock()
		delete(f.waiting, idKey(ours))
		f.mu.Unlock()
	}
}

// handle hands one message to the fixture's loop.
func (f *httpFront) handle(line []byte) {
	f.lineMu.Lock()
	defer f.lineMu.Unlock()
	f.s.handleLine(line)
}

func writeJSON(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, body)
}
