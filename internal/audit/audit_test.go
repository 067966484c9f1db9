package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// fakeOut is an output whose writes can be held (block) or fail (err).
type fakeOut struct {
	mu    sync.Mutex
	lines [][]byte
	block chan struct{} // if not nil, each write waits for it to close
	err   error
}

func (f *fakeOut) write(b []byte) error {
	f.mu.Lock()
	block := f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.lines = append(f.lines, bytes.Clone(b))
	return nil
}
func (f *fakeOut) reopen() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
func (f *fakeOut) close() error { return nil }
func (f *fakeOut) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}
func (f *fakeOut) got() []wire {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []wire
	for _, l := range f.lines {
		var w wire
		if err := json.Unmarshal(l, &w); err != nil {
			panic(err)
		}
		out = append(out, w)
	}
	return out
}

func open(t testing.TB, o Options) *Log {
	t.Helper()
	l, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func closeLog(t testing.TB, l *Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// N concurrent Adds while the queue keeps up are N lines in the file,
// each record once, numbered 1…N.
func TestExactlyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l := open(t, Options{File: path})
	const G, per = 8, 400
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range per {
				if !l.Add(Record{Identity: fmt.Sprint("u", g), Target: fmt.Sprint(i), Outcome: "ok"}) {
					t.Error("Add dropped a record with the queue keeping up")
				}
			}
		})
	}
	wg.Wait()
	closeLog(t, l)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	seqs := map[uint64]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var w wire
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		seen[w.Identity+"/"+w.Target]++
		seqs[w.Seq] = true
	}
	if len(seen) != G*per || len(seqs) != G*per {
		t.Fatalf("%d distinct records, %d distinct seqs; want %d", len(seen), len(seqs), G*per)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("record %s written %d times", k, n)
		}
	}
	if s := l.Stats(); s.Written != G*per || s.Dropped != 0 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A tiny queue and a writer that is held: Adds never block, written +
// dropped = added, Add's false answers are the drops, and the drops are
// logged once (not per record).
func TestOverload(t *testing.T) {
	out := &fakeOut{block: make(chan struct{})}
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	l := open(t, Options{out: out, Queue: 4, Logger: logger})
	const N = 1000
	refused := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range N {
			if !l.Add(Record{Target: fmt.Sprint(i), Outcome: "ok"}) {
				refused++
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Add blocked behind a held writer")
	}
	close(out.block)
	closeLog(t, l)
	s := l.Stats()
	if s.Written+s.Dropped != N || s.Dropped != uint64(refused) || refused < N-6 {
		t.Fatalf("stats %+v, %d refused; want written + dropped = %d and nearly all dropped", s, refused, N)
	}
	if len(out.got()) != int(s.Written) {
		t.Fatalf("%d lines, %d written", len(out.got()), s.Written)
	}
	logMu.Lock()
	defer logMu.Unlock()
	// Logged twice: at the first drop, and at Close the drops since.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var sum uint64
	for _, line := range lines {
		var n uint64
		_, after, _ := strings.Cut(line, " dropped=")
		fmt.Sscan(after, &n)
		sum += n
	}
	if len(lines) != 2 || sum != s.Dropped {
		t.Fatalf("drops logged %d times, %d in all; want twice (the first, then the rest at Close), %d in all:\n%s", len(lines), sum, s.Dropped, logs.String())
	}
}

// Adds racing Close: every record is written or counted dropped, none
// left in the queue unaccounted for.
func TestAddRacingClose(t *testing.T) {
	for round := range 30 {
		l := open(t, Options{out: &fakeOut{}, Queue: 64})
		var added atomic.Uint64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					added.Add(1)
					l.Add(Record{})
				}
			})
		}
		waitWritten(t, l, 1)
		closeLog(t, l)
		close(stop)
		wg.Wait()
		if s := l.Stats(); s.Written+s.Dropped != added.Load() || s.Queued != 0 {
			t.Fatalf("round %d: %d added, stats %+v: some record neither written nor dropped", round, added.Load(), s)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

// Drops are logged once per interval, each time with the count since the
// last.
func TestDropsLoggedPerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &fakeOut{block: make(chan struct{})}
		var logs bytes.Buffer
		l := open(t, Options{out: out, Queue: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		defer closeLog(t, l)
		defer close(out.block)
		l.Add(Record{}) // taken by the writer, which is held
		synctest.Wait()
		l.Add(Record{}) // fills the queue
		for range 50 {
			l.Add(Record{})
		}
		time.Sleep(dropLogEvery / 2)
		for range 7 {
			l.Add(Record{})
		}
		if n := strings.Count(logs.String(), "records dropped"); n != 1 {
			t.Fatalf("%d drop logs in the first interval; want 1:\n%s", n, logs.String())
		}
		time.Sleep(dropLogEvery / 2)
		for range 5 {
			l.Add(Record{})
		}
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "dropped=1 ") || !strings.Contains(lines[1], "dropped=57 dropped_total=58") {
			t.Fatalf("drop logs:\n%s\nwant dropped=1, then, an interval later, dropped=57 dropped_total=58", logs.String())
		}
	})
}

// Offer takes a record as Add does, but one it refuses (the queue full,
// the Log closed) is not counted as dropped: its caller writes it
// elsewhere.
func TestOfferCountsNoDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &fakeOut{block: make(chan struct{})}
		l := open(t, Options{out: out, Queue: 1})
		l.Add(Record{}) // taken by the writer, which is held
		synctest.Wait()
		if !l.Offer(Record{}) { // fills the queue
			t.Fatal("an Offer with room refused")
		}
		if l.Offer(Record{}) {
			t.Fatal("an Offer to a full queue taken")
		}
		if d := l.Stats().Dropped; d != 0 {
			t.Fatalf("an Offer refused counted %d dropped, want 0", d)
		}
		l.Add(Record{})
		if d := l.Stats().Dropped; d != 1 {
			t.Fatalf("an Add refused counted %d dropped, want 1", d)
		}
		close(out.block)
		closeLog(t, l)
		if l.Offer(Record{}) || l.Stats().Dropped != 1 {
			t.Fatalf("an Offer to a closed Log: taken, or counted (%+v)", l.Stats())
		}
		if s := l.Stats(); s.Written != 2 {
			t.Fatalf("stats %+v, want the held record and the offered one written", s)
		}
	})
}

// Fail-closed: Accepting is false while the queue is full and while the
// writer fails, and true again when either recovers; without
// FailClosed it is always true.
func TestFailClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &fakeOut{block: make(chan struct{})}
		l := open(t, Options{out: out, Queue: 2, FailClosed: true})
		open := open(t, Options{out: &fakeOut{block: out.block}, Queue: 1})
		if !l.Accepting() {
			t.Fatal("not accepting at the start")
		}
		l.Add(Record{})
		open.Add(Record{})
		synctest.Wait() // the writers hold one each
		l.Add(Record{})
		l.Add(Record{})
		open.Add(Record{})
		if l.Accepting() || !open.Accepting() {
			t.Fatalf("queue full: accepting %v (fail-closed), %v (not); want false, true", l.Accepting(), open.Accepting())
		}
		out.setErr(errors.New("disk full"))
		close(out.block)
		synctest.Wait()
		if l.Accepting() || l.Stats().Failed != 3 {
			t.Fatalf("writer failing: accepting %v, stats %+v", l.Accepting(), l.Stats())
		}
		out.setErr(nil)
		time.Sleep(retryEvery)
		synctest.Wait()
		if !l.Accepting() {
			t.Fatal("writer recovered, still not accepting")
		}
		l.Add(Record{})
		closeLog(t, l)
		closeLog(t, open)
		if s := l.Stats(); s.Written != 1 || s.Failed != 3 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// Past MaxSize the file is rotated: file.1 … file.MaxFiles kept (the
// newest records), older ones gone, every file 0600, in directories made.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "audit.jsonl")
	l := open(t, Options{File: path, MaxSize: 400, MaxFiles: 2})
	const N = 40
	for i := range N {
		l.Add(Record{Target: fmt.Sprintf("tool-%02d", i), Outcome: "ok"})
	}
	closeLog(t, l)
	var seqs []uint64
	for _, p := range []string{path + ".2", path + ".1", path} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || fi.Size() > 400 {
			t.Fatalf("%s: mode %v size %d; want 0600, ≤ 400", p, fi.Mode().Perm(), fi.Size())
		}
		b, _ := os.ReadFile(p)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var w wire
			if err := json.Unmarshal([]byte(line), &w); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, w.Seq)
		}
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s.3: %v; want none", path, err)
	}
	for i := range seqs {
		if seqs[i] != seqs[0]+uint64(i) {
			t.Fatalf("seqs across the files %v: want consecutive", seqs)
		}
	}
	if seqs[len(seqs)-1] != N || len(seqs) >= N {
		t.Fatalf("seqs %v: want the newest, up to %d, and the oldest gone", seqs, N)
	}
}

// An existing file of looser mode is made 0600 and appended to.
func TestExistingFileTightened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := open(t, Options{File: path})
	l.Add(Record{Outcome: "ok"})
	closeLog(t, l)
	fi, _ := os.Stat(path)
	b, _ := os.ReadFile(path)
	if fi.Mode().Perm() != 0o600 || !strings.HasPrefix(string(b), "{}\n{\"seq\":1") {
		t.Fatalf("mode %v, content %q", fi.Mode().Perm(), b)
	}
}

// Close writes what is queued; with a held writer it gives up when its
// context ends, counts the rest dropped, and the writer ends once its
// write returns.
func TestCloseDrainsBounded(t *testing.T) {
	out := &fakeOut{}
	l := open(t, Options{out: out, Queue: 2000})
	for range 1000 {
		l.Add(Record{})
	}
	closeLog(t, l)
	if s := l.Stats(); s.Written != 1000 || len(out.got()) != 1000 {
		t.Fatalf("Close drained %+v", s)
	}
	if l.Add(Record{}) || l.Stats().Dropped != 1 {
		t.Fatal("an Add after Close was taken")
	}

	held := &fakeOut{block: make(chan struct{})}
	l = open(t, Options{out: held, Queue: 100})
	for range 50 {
		l.Add(Record{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.Close(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Close with a held writer: %v after %v", err, time.Since(start))
	}
	close(held.block)
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer outlived its held write")
	}
	if s := l.Stats(); s.Written+s.Dropped != 50 || s.Written > 1 {
		t.Fatalf("stats after an aborted Close %+v; want written + dropped = 50, at most 1 written", s)
	}
}

// A follower gets the last records, then each new one, and its stream
// ends when the Log closes.
func TestFollow(t *testing.T) {
	l := open(t, Options{out: &fakeOut{}})
	for i := range 3 {
		l.Add(Record{Server: "s", Target: fmt.Sprint(i), Outcome: "ok"})
	}
	waitWritten(t, l, 3)
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/audit?follow=1&limit=2", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	next := func() wire {
		t.Helper()
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		var w wire
		if err := json.Unmarshal(line, &w); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		return w
	}
	if a, b := next(), next(); a.Seq != 2 || b.Seq != 3 {
		t.Fatalf("past lines %d, %d; want 2, 3", a.Seq, b.Seq)
	}
	l.Add(Record{Server: "s", Target: "new", Outcome: "ok"})
	if w := next(); w.Seq != 4 || w.Target != "new" {
		t.Fatalf("followed line %+v", w)
	}
	closeLog(t, l)
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after Close: %q, %v; want the stream ended", rest, err)
	}
}

// A follower that does not read never holds the writer up: it is dropped
// and told it lagged.
func TestSlowFollowerDoesNotBlockAdd(t *testing.T) {
	l := open(t, Options{out: &fakeOut{}, Queue: 8192})
	_, fl := l.recent(filter{}, 0, 0, true) // never reads
	const N = 3 * followerBuffer
	for range N {
		l.Add(Record{})
	}
	closeLog(t, l) // would wait forever if the writer waited for fl
	if s := l.Stats(); s.Written != N {
		t.Fatalf("stats %+v", s)
	}
	select {
	case <-fl.lagged:
	default:
		t.Fatal("the slow follower was not dropped")
	}
	if len(fl.lines) != followerBuffer {
		t.Fatalf("the follower holds %d lines; want its buffer, %d", len(fl.lines), followerBuffer)
	}
}

// Over HTTP, a lagged follower's stream ends with {"lagged":true,"seq":S}.
func TestLaggedLine(t *testing.T) {
	l := open(t, Options{out: &fakeOut{}})
	defer closeLog(t, l)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/api/audit?follow=1", nil)
	done := make(chan struct{})
	go func() { defer close(done); l.Handler().ServeHTTP(rec, req) }()
	for {
		l.mu.Lock()
		n := len(l.followers)
		var fl *follower
		for f := range l.followers {
			fl = f
		}
		l.mu.Unlock()
		if n == 1 {
			l.mu.Lock()
			delete(l.followers, fl)
			close(fl.lagged)
			l.mu.Unlock()
			break
		}
		time.Sleep(time.Millisecond)
	}
	<-done
	if got := rec.Body.String(); got != `{"lagged":true,"seq":0}`+"\n" {
		t.Fatalf("body %q", got)
	}
}

// waitWritten waits, for at most 10 s, until l has written n records.
func waitWritten(t *testing.T, l *Log, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Written < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d records written in 10 s; want %d", l.Stats().Written, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The handler's filters, limit and after; bad queries are refused.
func TestHandlerQuery(t *testing.T) {
	l := open(t, Options{out: &fakeOut{}})
	defer closeLog(t, l)
	for i := range 10 {
		l.Add(Record{Server: []string{"a", "b"}[i%2], Identity: "alice", Outcome: []string{"ok", "denied"}[i%3/2]})
	}
	waitWritten(t, l, 10) // the handler shows what was written
	get := func(q string) (int, []wire) {
		rec := httptest.NewRecorder()
		l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/audit?"+q, nil))
		var ws []wire
		for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
			var w wire
			if json.Unmarshal([]byte(line), &w) == nil && w.Seq != 0 {
				ws = append(ws, w)
			}
		}
		return rec.Code, ws
	}
	seqs := func(ws []wire) string {
		var s []string
		for _, w := range ws {
			s = append(s, fmt.Sprint(w.Seq))
		}
		return strings.Join(s, ",")
	}
	for q, want := range map[string]string{
		"":                          "1,2,3,4,5,6,7,8,9,10",
		"limit=3":                   "8,9,10",
		"limit=0":                   "",
		"after=7":                   "8,9,10",
		"server=a":                  "1,3,5,7,9",
		"server=a&outcome=denied":   "3,9",
		"identity=bob":              "",
		"server=b&limit=2&after=2":  "8,10",
		"follow=0&server=b&limit=1": "10",
		"identity=alice&outcome=ok": "1,2,4,5,7,8,10",
	} {
		if code, ws := get(q); code != 200 || seqs(ws) != want {
			t.Errorf("?%s: %d %s; want 200 %s", q, code, seqs(ws), want)
		}
	}
	for _, q := range []string{"limit=-1", "limit=x", "after=-2", "follow=maybe"} {
		if code, _ := get(q); code != http.StatusBadRequest {
			t.Errorf("?%s: %d; want 400", q, code)
		}
	}
	rec := httptest.NewRecorder()
	l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/audit", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// A nil Log does nothing, and its handler says audit is not configured.
func TestNilLog(t *testing.T) {
	var l *Log
	if !l.Add(Record{}) || !l.Accepting() || l.Stats() != (Stats{}) || l.Close(context.Background()) != nil {
		t.Fatal("a nil Log is not a no-op")
	}
	rec := httptest.NewRecorder()
	l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/audit", nil))
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), `"error":"audit is not configured"`) {
		t.Fatalf("nil handler: %d %s", rec.Code, rec.Body.String())
	}
}

// Open refuses what it cannot use, clearly.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "none given"},
		{Options{File: "-", Arguments: "some"}, `audit arguments "some"`},
		{Options{File: "-", Queue: -1}, "negative"},
		{Options{File: filepath.Join(dir, "x", "audit")}, ""},
		{Options{File: dir}, "audit file"},
	} {
		l, err := Open(tc.o)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.o, err)
			}
			closeLog(t, l)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.o, err, tc.want)
		}
	}
}

// SetIdentity takes who from a verified identity.
func TestSetIdentity(t *testing.T) {
	var r Record
	r.SetIdentity((&identity.Identity{Kind: identity.Token, Issuer: "https://idp", Subject: "alice", ClientID: "cli", UID: -1}).Finish())
	if r.Identity != "alice" || r.Issuer != "https://idp" || r.Kind != "token" || r.Client != "cli" {
		t.Fatalf("%+v", r)
	}
	r.SetIdentity(nil)
	if r.Identity != "" || r.Issuer != "" || r.Kind != "" || r.Client != "" {
		t.Fatalf("nil identity: %+v", r)
	}
}

// A followed stream with nothing to say sends an empty line every
// keepalive, and ends when the client goes.
func TestFollowKeepalive(t *testing.T) {
	old := keepalive
	keepalive = 20 * time.Millisecond
	t.Cleanup(func() { keepalive = old })
	l := open(t, Options{out: &fakeOut{}})
	defer closeLog(t, l)
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?follow", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	for range 3 {
		if line, err := r.ReadString('\n'); line != "\n" || err != nil {
			t.Fatalf("keepalive %q, %v", line, err)
		}
	}
	resp.Body.Close()
	for { // the client gone, its follower goes too
		l.mu.Lock()
		n := len(l.followers)
		l.mu.Unlock()
		if n == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the follower outlived its client")
		}
		time.Sleep(time.Millisecond)
	}
}

// A line: its keys, RFC 3339 time with milliseconds in UTC, duration in
// milliseconds.
func TestLine(t *testing.T) {
	r := Record{
		Time:     time.Date(2026, 12, 5, 6, 7, 8, 123456789, time.FixedZone("x", 3600)),
		Identity: "alice", Issuer: "https://idp", Kind: "token", Client: "cli", Endpoint: "/mcp",
		Session: "s1", Server: "gh", Method: "tools/call", Target: "search", Outcome: "denied",
		Code: -32001, Reason: "rule 3", Duration: 1500 * time.Microsecond,
		Arguments: json.RawMessage(`{"q": "x"}`),
	}
	b, err := r.Line(7, ArgsFull)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":7,"time":"2026-12-05T05:07:08.123Z","identity":"alice","issuer":"https://idp","kind":"token","client":"cli","endpoint":"/mcp","session":"s1","server":"gh","method":"tools/call","target":"search","outcome":"denied","code":-32001,"reason":"rule 3","duration_ms":1.5,"arguments":{"q":"x"}}` + "\n"
	if string(b) != want {
		t.Fatalf("line\n%s\nwant\n%s", b, want)
	}
	b, _ = (&Record{Outcome: "ok"}).Line(1, ArgsDigest)
	if string(b) != `{"seq":1,"time":"0001-01-01T00:00:00.000Z","outcome":"ok","duration_ms":0}`+"\n" {
		t.Fatalf("empty record: %s", b)
	}
}

// The argument modes.
func TestArguments(t *testing.T) {
	a := json.RawMessage(`{"a": 1, "b": [1.50, "x", true, null], "c": {"d": "secret"}}`)
	reordered := json.RawMessage(`{"c":{"d":"secret"},"b":[1.50,"x",true,null],"a":1}`)
	other := json.RawMessage(`{"c":{"d":"secreT"},"b":[1.50,"x",true,null],"a":1}`)
	line := func(raw json.RawMessage, mode string) wire {
		b, err := (&Record{Arguments: raw}).Line(1, mode)
		if err != nil {
			t.Fatal(err)
		}
		var w wire
		json.Unmarshal(b, &w)
		return w
	}
	d1, d2, d3 := line(a, ArgsDigest), line(reordered, ArgsDigest), line(other, ArgsDigest)
	if len(d1.ArgsSHA256) != 64 || d1.ArgsSHA256 != d2.ArgsSHA256 || d1.ArgsSHA256 == d3.ArgsSHA256 || d1.Arguments != nil {
		t.Fatalf("digests %q %q %q (args %s): want equal across key order, different for other values", d1.ArgsSHA256, d2.ArgsSHA256, d3.ArgsSHA256, d1.Arguments)
	}
	if w := line(a, ArgsOmit); w.Arguments != nil || w.ArgsSHA256 != "" {
		t.Fatalf("omit: %+v", w)
	}
	if w := line(a, ArgsFull); string(w.Arguments) != `{"a":1,"b":[1.50,"x",true,null],"c":{"d":"secret"}}` {
		t.Fatalf("full: %s", w.Arguments)
	}
	if w := line(a, ArgsRedact); string(w.Arguments) != `{"a":"[REDACTED]","b":["[REDACTED]","[REDACTED]",true,null],"c":{"d":"[REDACTED]"}}` {
		t.Fatalf("redact: %s", w.Arguments)
	}
	bad := json.RawMessage(`{"a":`)
	if w := line(bad, ArgsRedact); string(w.Arguments) != `"[REDACTED]"` {
		t.Fatalf("redact of bad JSON: %s", w.Arguments)
	}
	if w := line(bad, ArgsFull); string(w.Arguments) != `"{\"a\":"` {
		t.Fatalf("full of bad JSON: %s", w.Arguments)
	}
	if w := line(bad, ArgsDigest); len(w.ArgsSHA256) != 64 {
		t.Fatalf("digest of bad JSON: %+v", w)
	}
	if w := line(nil, ArgsFull); w.Arguments != nil {
		t.Fatalf("no arguments: %s", w.Arguments)
	}
}

// The cost of one Add, the writer keeping up or not (drops are reported).
func BenchmarkAdd(b *testing.B) {
	l := open(b, Options{out: &fakeOut{block: nil}, Queue: DefaultQueue})
	rec := Record{Time: time.Now(), Identity: "alice", Issuer: "https://idp", Kind: "token", Client: "cli", Endpoint: "/mcp",
		Server: "gh", Method: "tools/call", Target: "search", Outcome: "ok", Duration: time.Millisecond,
		Arguments: json.RawMessage(`{"q":"x"}`)}
	b.ReportAllocs()
	for b.Loop() {
		l.Add(rec)
	}
	b.StopTimer()
	s := l.Stats()
	closeLog(b, l)
	b.ReportMetric(float64(s.Dropped)/float64(b.N), "drops/op")
}

// The cost of one Add that is queued (the writer is waited for, the timer
// stopped, before the queue could fill): the per-request cost while the
// audit keeps up.
func BenchmarkAddQueued(b *testing.B) {
	const q = 1 << 15
	l := open(b, Options{out: &fakeOut{}, Queue: q})
	rec := Record{Time: time.Now(), Identity: "alice", Issuer: "https://idp", Kind: "token", Client: "cli", Endpoint: "/mcp",
		Server: "gh", Method: "tools/call", Target: "search", Outcome: "ok", Duration: time.Millisecond,
		Arguments: json.RawMessage(`{"q":"x"}`)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%(q/2) == 0 {
			b.StopTimer()
			for l.Stats().Queued > 0 {
				time.Sleep(100 * time.Microsecond)
			}
			b.StartTimer()
		}
		l.Add(rec)
	}
	b.StopTimer()
	s := l.Stats()
	closeLog(b, l)
	b.ReportMetric(float64(s.Dropped)/float64(b.N), "drops/op")
}

// A record counted as written is in the ring already: whoever read the
// count (a test, /metrics) then asks /api/audit finds it there.
func TestWrittenIsInTheRing(t *testing.T) {
	l := open(t, Options{out: &fakeOut{}})
	defer closeLog(t, l)
	const n = 3000
	done := make(chan struct{})
	deadline := time.Now().Add(20 * time.Second)
	go func() {
		defer close(done)
		for i := range n {
			l.Add(Record{Server: "s", Target: fmt.Sprint(i), Outcome: "ok"})
			for l.Stats().Queued > 100 && time.Now().Before(deadline) { // never dropped
				runtime.Gosched()
			}
		}
	}()
	for {
		w := l.Stats().Written
		l.mu.Lock()
		var newest uint64
		if l.n > 0 {
			newest = l.ring[(l.head+l.n-1)%len(l.ring)].seq
		}
		l.mu.Unlock()
		if newest < w {
			t.Fatalf("%d records counted as written; the ring's newest is %d", w, newest)
		}
		if w == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d written in 20 s", w, n)
		}
	}
	<-done
}
