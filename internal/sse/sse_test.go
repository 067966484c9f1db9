package sse

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// readAll reads every event of stream, fed in pieces of n bytes (all at
// once if n <= 0), as "type|id|data" lines, and the error that ended it.
func readAll(t *testing.T, stream string, n, maxEvent int) ([]string, error) {
	t.Helper()
	var src io.Reader = strings.NewReader(stream)
	if n > 0 {
		src = &pieces{s: stream, n: n}
	}
	r := NewReader(src, maxEvent)
	var got []string
	for {
		ev, err := r.Next()
		if errors.Is(err, ErrEventTooLarge) {
			got = append(got, "too large")
			continue
		}
		if err != nil {
			return got, err
		}
		got = append(got, ev.Type+"|"+ev.ID+"|"+string(ev.Data))
	}
}

// pieces returns s n bytes at a time.
type pieces struct {
	s string
	n int
}

func (p *pieces) Read(b []byte) (int, error) {
	if p.s == "" {
		return 0, io.EOF
	}
	k := copy(b, p.s[:min(p.n, len(p.s))])
	p.s = p.s[k:]
	return k, nil
}

// The parsing rules of the HTML standard's event-stream section, each
// read whole and fed a byte at a time (so that every line end, the CRLF
// pair and the byte-order mark fall across reads).
func TestParsesAsTheStandardSays(t *testing.T) {
	cases := []struct {
		name, stream string
		want         []string
	}{
		{"data lines joined with LF", "data: YHOO\ndata: +2\ndata: 10\n\n", []string{"message||YHOO\n+2\n10"}},
		{"the standard's four blocks", ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n",
			[]string{"message|1|first event", "message||second event"}}, // the third has no blank line after it: dropped
		{"an empty data field dispatches an empty event", "data\n\ndata\ndata\n\ndata:\n", []string{"message||", "message||\n"}},
		{"one space after the colon is dropped, no more", "data:test\n\ndata: test\n\ndata:  test\n\n", []string{"message||test", "message||test", "message|| test"}},
		{"CR and CRLF end lines too", "event: a\rdata: 1\r\n\r\nid: 7\rdata: 2\r\r", []string{"a||1", "message|7|2"}},
		{"a byte-order mark leads the stream", "\xEF\xBB\xBFdata: x\n\n", []string{"message||x"}},
		{"the event type, and its reset", "event: lagged\ndata: {}\n\ndata: after\n\n", []string{"lagged||{}", "message||after"}},
		{"no data, no event; the type does not carry over", "event: ping\n\ndata: d\n\n", []string{"message||d"}},
		{"an id persists, an id with NUL is ignored", "id: 5\ndata: a\n\nid: x\x00y\ndata: b\n\nid:\ndata: c\n\n", []string{"message|5|a", "message|5|b", "message||c"}},
		{"comments and unknown fields are ignored", ":keep-alive\nfoo: bar\nDATA: no\ndata: yes\n\n", []string{"message||yes"}},
		{"a field without a colon has an empty value", "data\nevent\n\n", []string{"message||"}},
		{"an event left open at the end is dropped", "data: whole\n\ndata: half", []string{"message||whole"}},
	}
	for _, tc := range cases {
		for _, n := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("%s/pieces of %d", tc.name, n), func(t *testing.T) {
				got, err := readAll(t, tc.stream, n, 1<<20)
				if err != io.EOF {
					t.Fatalf("ended with %v, want io.EOF", err)
				}
				if strings.Join(got, "\n---\n") != strings.Join(tc.want, "\n---\n") {
					t.Errorf("events\n%q\nwant\n%q", got, tc.want)
				}
			})
		}
	}
}

// retry sets the reconnection time only when it is all digits.
func TestRetry(t *testing.T) {
	r := NewReader(strings.NewReader("retry: 1500\nretry: 2s\nretry: -1\ndata: x\n\n"), 1024)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if d, ok := r.Retry(); !ok || d != 1500*time.Millisecond {
		t.Errorf("retry %v %v, want 1.5s", d, ok)
	}
	if d, ok := NewReader(strings.NewReader(""), 1024).Retry(); ok || d != 0 {
		t.Errorf("retry of a stream that set none: %v %v", d, ok)
	}
}

// An event whose data passes the bound is skipped and said so, and the
// events after it are read; a line that no event under the bound could
// hold ends the stream, whatever the pieces it arrives in.
func TestBounds(t *testing.T) {
	big := strings.Repeat("x", 60)
	stream := "data: " + big + "\ndata: " + big + "\n\ndata: small\n\n"
	for _, n := range []int{0, 1, 7} {
		got, err := readAll(t, stream, n, 100)
		if err != io.EOF || strings.Join(got, ",") != "too large,message||small" {
			t.Errorf("pieces of %d: %q, %v", n, got, err)
		}
		got, err = readAll(t, "data: "+strings.Repeat("y", 200)+"\n\ndata: after\n\n", n, 100)
		if err == nil || err == io.EOF || !strings.Contains(err.Error(), "longer than") || len(got) != 0 {
			t.Errorf("pieces of %d, an overlong line: %q, %v", n, got, err)
		}
	}
}

// A stream that breaks mid-event ends with its error, not io.EOF, and
// what was not dispatched is not returned.
func TestBrokenStream(t *testing.T) {
	broken := errors.New("connection reset")
	r := NewReader(io.MultiReader(strings.NewReader("data: one\n\ndata: tw"), iotest.ErrReader(broken)), 1024)
	if ev, err := r.Next(); err != nil || string(ev.Data) != "one" {
		t.Fatalf("first: %q %v", ev.Data, err)
	}
	if ev, err := r.Next(); !errors.Is(err, broken) {
		t.Fatalf("second: %q %v, want the stream's error", ev.Data, err)
	}
}

// LastID follows the id field even when no event is dispatched after it:
// a resumption resumes from it.
func TestLastIDWithoutEvent(t *testing.T) {
	r := NewReader(strings.NewReader("data: a\nid: 1\n\nid: 2\n\n"), 1024)
	if ev, err := r.Next(); err != nil || ev.ID != "1" {
		t.Fatalf("%+v %v", ev, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("%v, want io.EOF", err)
	}
	if id, sent := r.LastID(); id != "2" || !sent {
		t.Errorf("last id %q %v, want 2", id, sent)
	}
	if id, sent := NewReader(strings.NewReader("data: x\n\n"), 1024).LastID(); id != "" || sent {
		t.Errorf("a stream without ids: %q %v", id, sent)
	}
}

// A long stream of distinct events, read in pieces that cut lines and
// events anywhere, gives each event whole, with its own id and type: the
// buffer's refills and moves lose or mix nothing. (Data is reused by the
// next Next: each is checked before it.)
func TestManyEventsAcrossRefills(t *testing.T) {
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "id: %d\nevent: e%d\ndata: {\"n\":%d,\"pad\":%q}\n\n", i, i%3, i, strings.Repeat("p", i%50))
	}
	r := NewReader(&pieces{s: b.String(), n: 613}, 4096)
	for i := range 2000 {
		ev, err := r.Next()
		want := fmt.Sprintf("{\"n\":%d,\"pad\":%q}", i, strings.Repeat("p", i%50))
		if err != nil || ev.ID != fmt.Sprint(i) || ev.Type != fmt.Sprintf("e%d", i%3) || string(ev.Data) != want {
			t.Fatalf("event %d: %+v (%s) %v", i, ev, ev.Data, err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last: %v", err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add("data: a\r\n\r\ndata:b\rid: 3\n\n", 5)
	f.Add("\xEF\xBB\xBFevent: x\ndata\n\n", 1)
	f.Fuzz(func(t *testing.T, stream string, n int) {
		n = int(uint(n)%17) + 1
		whole, errWhole := readAll(t, stream, 0, 64)
		cut, errCut := readAll(t, stream, n, 64)
		// However the stream is cut into reads, the events are the same.
		if strings.Join(whole, "\x00") != strings.Join(cut, "\x00") || (errWhole == io.EOF) != (errCut == io.EOF) {
			t.Fatalf("whole %q (%v), in pieces of %d %q (%v)", whole, errWhole, n, cut, errCut)
		}
	})
}

// An id in an event the stream broke inside is not the last event ID: the
// event was never received, and a resumption from its id would lose it.
func TestLastIDOfAnUnfinishedEventIsNotTaken(t *testing.T) {
	r := NewReader(strings.NewReader("id: 1\ndata: a\n\nid: 2\ndata: part"), 1024)
	if ev, err := r.Next(); err != nil || ev.ID != "1" {
		t.Fatalf("%+v %v", ev, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("%v, want io.EOF", err)
	}
	if id, _ := r.LastID(); id != "1" {
		t.Errorf("LastID after a stream that broke inside event 2: %q, want 1", id)
	}
}
