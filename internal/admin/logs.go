package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/logbuf"
)

// Logs is the body of GET /api/servers/{name}/logs.
type Logs struct {
	Server string `json:"server"`
	// Lines are the kept stderr lines asked for, oldest first, as kept:
	// the fleet redacted each as it was captured, with the config of the
	// launch that wrote it (a reload may have changed the one in force).
	Lines []logbuf.Entry `json:"lines"`
	// Dropped counts the lines the request reached that are no longer
	// kept, all older than the first listed (logbuf.Page.Dropped: with
	// since, every discarded line once one was written at or after it).
	Dropped uint64 `json:"dropped"`
}

// DefaultLogTail is how many lines GET /api/servers/{name}/logs lists
// when the request asks neither since nor tail.
const DefaultLogTail = 100

// ParseSince reads the since parameter of GET /api/servers/{name}/logs:
// a Go duration (10m: that long before now) or an RFC 3339 time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since: bad value %q: want a duration (10m, 1h30m) or an RFC 3339 time (2026-11-26T10:00:00Z)", s)
}

// readLogs is the read a request's query asks of buf: since a time
// (?since), the newest n lines (?tail), the newest n since a time (both),
// else the newest DefaultLogTail.
func readLogs(buf *logbuf.Buffer, q url.Values, now time.Time) (logbuf.Page, error) {
	tail := DefaultLogTail
	if q.Has("tail") {
		n, err := strconv.Atoi(q.Get("tail"))
		if err != nil || n < 0 {
			return logbuf.Page{}, fmt.Errorf("tail: bad value %q: want a number of lines", q.Get("tail"))
		}
		tail = n
	}
	if !q.Has("since") {
		return buf.Tail(tail), nil
	}
	since, err := ParseSince(q.Get("since"), now)
	if err != nil {
		return logbuf.Page{}, err
	}
	p := buf.Since(since)
	if q.Has("tail") {
		if len(p.Entries) > tail {
			p.Entries, p.Dropped = p.Entries[len(p.Entries)-tail:], 0
		}
		p.Dropped = min(p.Dropped, uint64(tail-len(p.Entries)))
	}
	return p, nil
}

// logs serves GET /api/servers/{name}/logs: the server's kept stderr
// lines as JSON (Logs), or, with ?follow or Accept: text/event-stream, as
// Server-Sent Events, then every new one as it is written; both serve the
// lines as kept (Logs.Lines: redacted when captured). Each line is an
// SSE message whose data is the logbuf.Entry and whose id is
// "EPOCH-SEQ" (the buffer's epoch and the line's seq); lines a follower
// missed because the buffer discarded them are counted in an
// "event: dropped" with data {"dropped":N}. A stream resumed with the
// Last-Event-ID of a line of this buffer continues after it, whatever the
// query; one of another buffer (another run of mcpvisor) gets every kept
// line. The stream ends when the client leaves, the handler is closed or
// the event log closes (liveStream), or when the buffer is closed because
// the server was removed from the configuration (logbuf.Registry.Remove):
// then after the lines written before, with an "event: end" whose data is
// a LogEnd.
func (h *Handler) logs(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	var buf *logbuf.Buffer
	if h.opts.Logs != nil {
		buf = h.opts.Logs(s.Name())
	}
	if buf == nil {
		h.writeStatusJSON(w, http.StatusNotFound, map[string]string{"error": "logs are not kept"})
		return
	}
	page, err := readLogs(buf, r.URL.Query(), time.Now())
	if err != nil {
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if !wantsStream(r) {
		h.writeJSON(w, Logs{Server: s.Name(), Lines: append([]logbuf.Entry{}, page.Entries...), Dropped: page.Dropped})
		return
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		epoch, n, _ := strings.Cut(last, "-")
		seq, err := strconv.ParseUint(n, 10, 64)
		if epoch != buf.Epoch() || err != nil || seq > page.Last {
			seq = 0 // none of this buffer's lines seen
		}
		page = buf.After(seq)
	}
	var done <-chan struct{}
	if h.log != nil {
		done = h.log.Done()
	}
	first := func(w io.Writer) error { return writeLogPage(w, buf.Epoch(), page) }
	pos := page.Last
	h.liveStream(w, r, done, first, func(ctx context.Context) (piece, bool) {
		p, err := buf.Wait(ctx, pos)
		switch {
		case errors.Is(err, logbuf.ErrClosed):
			end := LogEnd{Reason: "removed", Message: "server " + s.Name() + " was removed from the configuration"}
			return func(w io.Writer) error { return writeLogEnd(w, end) }, false
		case err != nil:
			return nil, true
		}
		pos = p.Last
		return func(w io.Writer) error { return writeLogPage(w, buf.Epoch(), p) }, true
	})
}

// LogEnd is the data of the "event: end" that ends a stream of
// GET /api/servers/{name}/logs when no more lines will come.
type LogEnd struct {
	// Reason says why: "removed", the server was removed from the
	// configuration.
	Reason string `json:"reason"`
	// Message says it to a person.
	Message string `json:"message"`
}

func writeLogEnd(w io.Writer, end LogEnd) error {
	data, err := json.Marshal(end)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: end\ndata: %s\n\n", data)
	return err
}

// writeLogPage writes a page of lines as SSE messages, after an
// "event: dropped" if the page says lines were missed.
func writeLogPage(w io.Writer, epoch string, p logbuf.Page) error {
	if p.Dropped > 0 {
		if _, err := fmt.Fprintf(w, "event: dropped\ndata: {\"dropped\":%d}\n\n", p.Dropped); err != nil {
			return err
		}
	}
	for _, e := range p.Entries {
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %s-%d\ndata: %s\n\n", epoch, e.Seq, data); err != nil {
			return err
		}
	}
	return nil
}
