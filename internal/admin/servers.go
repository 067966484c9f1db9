package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// servers serves GET /api/servers: the Servers of the fleet, indented as
// writeJSON would write it, byte for byte, but encoded one server at a
// time into a bounded buffer, so that what a request holds does not grow
// with the fleet (a thousand servers' reply is over half a megabyte, and
// a dashboard or a script polls it).
func (h *Handler) servers(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	// As reply: the whole reply under one deadline.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	b := bufio.NewWriterSize(w, 32<<10)
	if err := h.encodeServers(b); err != nil {
		// The status and part of the body are gone: end the reply
		// short, so that the client sees a broken reply, not a
		// truncated document it could take for whole.
		panic(http.ErrAbortHandler)
	}
	_ = b.Flush()
}

// serversHead is how writeJSON's Servers begins, up to its servers.
const serversHead = "{\n  \"servers\": "

// encodeServers writes what json.MarshalIndent(v, "", "  ") writes for
// the Servers of h, and a newline, one server at a time.
func (h *Handler) encodeServers(w io.Writer) error {
	var one bytes.Buffer
	enc := json.NewEncoder(&one)
	// A server is an element of the servers array: two levels deep.
	enc.SetIndent("    ", "  ")
	var werr, encErr error
	write := func(b []byte) {
		if werr == nil {
			_, werr = w.Write(b)
		}
	}
	write([]byte(serversHead))
	n := 0
	tot := eachStatus(h.f, h.opts.Clients, func(st *fleet.Status) error {
		if n == 0 {
			write([]byte("[\n    "))
		} else {
			write([]byte(",\n    "))
		}
		n++
		one.Reset()
		if encErr = enc.Encode(st); encErr != nil {
			return encErr
		}
		write(bytes.TrimSuffix(one.Bytes(), []byte("\n"))) // Encode's own newline
		return werr
	})
	if err := errors.Join(encErr, werr); err != nil {
		return err
	}
	// The rest of the document, as MarshalIndent has it: an empty
	// servers array stands in for the one written above.
	rest := Servers{Servers: []fleet.Status{}, Totals: tot}
	if h.opts.Collisions != nil {
		rest.Collisions = h.opts.Collisions()
	}
	if h.opts.HeldCalls != nil {
		rest.HeldCalls = h.opts.HeldCalls()
	}
	b, err := json.MarshalIndent(rest, "", "  ")
	if err != nil {
		return err
	}
	tail, ok := bytes.CutPrefix(b, []byte(serversHead+"[]"))
	if !ok {
		return errors.New("Servers does not begin with its servers")
	}
	if n == 0 {
		write([]byte("null")) // a nil slice, as Snapshot has it
	} else {
		write([]byte("\n  ]"))
	}
	write(tail)
	write([]byte("\n"))
	return werr
}
