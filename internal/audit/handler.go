package audit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// entry is a written record as the ring and the followers keep it.
type entry struct {
	seq                       uint64
	server, identity, outcome string
	line                      []byte
}

// filter keeps the entries whose fields are as given ("": any).
type filter struct{ server, identity, outcome string }

func (f filter) keeps(e *entry) bool {
	return (f.server == "" || f.server == e.server) &&
		(f.identity == "" || f.identity == e.identity) &&
		(f.outcome == "" || f.outcome == e.outcome)
}

// followerBuffer is how many lines a follower may be behind before it is
// dropped.
const followerBuffer = 256

// keepalive is how often a followed stream with nothing to say sends an
// empty line.
var keepalive = 15 * time.Second

// follower is an open /api/audit?follow stream.
type follower struct {
	filter
	lines  chan entry
	lagged chan struct{} // closed when it fell behind and was dropped
	ended  chan struct{} // closed when the Log closed
}

// publish keeps e in the ring and gives it to the followers; one whose
// buffer is full is dropped, never waited for.
func (l *Log) publish(e entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[(l.head+l.n)%len(l.ring)] = e
	if l.n < len(l.ring) {
		l.n++
	} else {
		l.head = (l.head + 1) % len(l.ring)
	}
	for f := range l.followers {
		if !f.keeps(&e) {
			continue
		}
		select {
		case f.lines <- e:
		default:
			delete(l.followers, f)
			close(f.lagged)
		}
	}
}

// endFollowers ends every stream (the Log closes).
func (l *Log) endFollowers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	for f := range l.followers {
		delete(l.followers, f)
		close(f.ended)
	}
}

// recent is the last limit entries after seq after that f keeps, oldest
// first, and, with follow, a follower that gets every one after them (nil
// if the Log closed).
func (l *Log) recent(f filter, after uint64, limit int, follow bool) ([]entry, *follower) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []entry
	for i := l.n - 1; i >= 0 && len(out) < limit; i-- {
		e := &l.ring[(l.head+i)%len(l.ring)]
		if e.seq <= after {
			break
		}
		if f.keeps(e) {
			out = append(out, *e)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if !follow || l.ended {
		return out, nil
	}
	fl := &follower{filter: f, lines: make(chan entry, followerBuffer), lagged: make(chan struct{}), ended: make(chan struct{})}
	l.followers[fl] = struct{}{}
	return out, fl
}

func (l *Log) unfollow(f *follower) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.followers, f)
}

// Handler serves GET /api/audit (mounted at any path): the last records,
// oldest first, as JSON lines (application/x-ndjson). Its query:
//
//	limit=N      at most the last N records (default 100, at most RingSize;
//	             0 for none, to follow only new ones)
//	after=SEQ    only records numbered after SEQ
//	follow=1     then every new record as it is written, an empty line
//	             every 15 s when there is none, until the client goes or
//	             the Log closes (the stream ends). A follower that falls
//	             behind by 256 lines gets {"lagged":true,"seq":S} (S the
//	             last line it was sent) as its last line, and may come
//	             back with after=S.
//	server=, identity=, outcome=   only the records with these values
//
// A nil Log's Handler answers 404 {"error":"audit is not configured"}.
func (l *Log) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l == nil {
			httpError(w, http.StatusNotFound, "audit is not configured")
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			httpError(w, http.StatusMethodNotAllowed, "audit: only GET")
			return
		}
		q := r.URL.Query()
		limit := 100
		if s := q.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				httpError(w, http.StatusBadRequest, "audit: limit "+strconv.Quote(s)+": want a number ≥ 0")
				return
			}
			limit = min(n, RingSize)
		}
		var after uint64
		if s := q.Get("after"); s != "" {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				httpError(w, http.StatusBadRequest, "audit: after "+strconv.Quote(s)+": want a record number")
				return
			}
			after = n
		}
		follow := false
		if q.Has("follow") {
			switch s := q.Get("follow"); s {
			case "", "1", "true":
				follow = true
			case "0", "false":
			default:
				httpError(w, http.StatusBadRequest, "audit: follow "+strconv.Quote(s)+": want 1 or 0")
				return
			}
		}
		past, fl := l.recent(filter{q.Get("server"), q.Get("identity"), q.Get("outcome")}, after, limit, follow)
		if fl != nil {
			defer l.unfollow(fl)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		rc := http.NewResponseController(w)
		last := after
		send := func(b []byte) bool {
			// A client that does not read is given up on, not waited for.
			_ = rc.SetWriteDeadline(time.Now().Add(2 * keepalive))
			_, err := w.Write(b)
			return err == nil
		}
		for _, e := range past {
			if !send(e.line) {
				return
			}
			last = e.seq
		}
		if fl == nil {
			return
		}
		_ = rc.Flush()
		tick := time.NewTicker(keepalive)
		defer tick.Stop()
		for {
			select {
			case e := <-fl.lines:
				if !send(e.line) {
					return
				}
				last = e.seq
			case <-tick.C:
				if !send([]byte("\n")) {
					return
				}
			case <-fl.lagged:
				// What it was sent before it was dropped, then the word.
				for {
					select {
					case e := <-fl.lines:
						if !send(e.line) {
							return
						}
						last = e.seq
						continue
					default:
					}
					break
				}
				b, _ := json.Marshal(map[string]any{"lagged": true, "seq": last})
				send(append(b, '\n'))
				return
			case <-fl.ended:
				for {
					select {
					case e := <-fl.lines:
						if !send(e.line) {
							return
						}
						continue
					default:
					}
					return
				}
			case <-r.Context().Done():
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Write(append(b, '\n'))
}
