package logbuf

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// Every field a reader is served comes back as it was added: seq, time
// (the same instant, shown the same), line, pid and session — lines with
// multi-byte UTF-8, empty lines, lines with and without session keys,
// lines cut to the byte bound — from every read.
func TestLinesRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 28, 13, 39, 10, 123456789, time.Local)
	in := []Entry{
		{Line: "plain", PID: 4242, Time: at},
		{Line: "", PID: 1, Time: at.Add(time.Nanosecond)},
		{Line: "héllo wörld — ✓ 𝄞 日本語", PID: 1 << 30, Session: "sess-ümlaut-🙂", Time: at.Add(time.Second)},
		{Line: "no pid, no session", Time: at.Add(-time.Hour)},
		{Line: "\x00 bytes \t and \\ escapes \"", Session: "s", PID: 7, Origin: 1<<63 + 5, Time: at.Add(time.Minute)},
		{Line: "", Session: "only-a-session", Origin: 3, Time: time.Date(1969, 7, 20, 20, 17, 40, 1, time.Local)},
		{Line: "far", Time: time.Date(2999, 1, 1, 0, 0, 0, 999999999, time.Local)},
		{Line: "now"}, // Add sets the time
	}
	b := New(Options{})
	before := time.Now()
	for _, e := range in {
		b.Add(e)
	}
	after := time.Now()
	got := b.After(0)
	if len(got.Entries) != len(in) || got.Dropped != 0 || got.Last != uint64(len(in)) {
		t.Fatalf("After(0): %d entries, dropped %d, last %d", len(got.Entries), got.Dropped, got.Last)
	}
	for i, e := range got.Entries {
		w := in[i]
		w.Seq = uint64(i + 1)
		if w.Time.IsZero() {
			if e.Time.Before(before.Round(0)) || e.Time.After(after.Round(0)) {
				t.Errorf("entry %d: time %v, not when it was added (%v..%v)", i, e.Time, before, after)
			}
			w.Time = e.Time
		}
		if e.Seq != w.Seq || !e.Time.Equal(w.Time) || e.Line != w.Line || e.PID != w.PID || e.Session != w.Session || e.Origin != w.Origin {
			t.Errorf("entry %d = %+v, want %+v", i, e, w)
		}
		gj, _ := json.Marshal(e)
		wj, _ := json.Marshal(w)
		if string(gj) != string(wj) {
			t.Errorf("entry %d served as %s, want %s", i, gj, wj)
		}
	}
	// The other reads decode the same.
	if p := b.Tail(3); len(p.Entries) != 3 || p.Entries[0].Line != in[5].Line || p.Entries[0].Session != in[5].Session || p.Entries[1].Line != "far" {
		t.Fatalf("Tail(3) = %+v", p.Entries)
	}
	if p := b.Since(at.Add(time.Second)); lines(p) != "3:héllo wörld — ✓ 𝄞 日本語 5:\x00 bytes \t and \\ escapes \" 7:far 8:now" {
		t.Fatalf("Since = %q", lines(p))
	}

	// A line cut to the byte bound, its session key counted.
	b = New(Options{MaxBytes: 12})
	b.Add(Entry{Line: "ab日本語", Session: "xyz", PID: 9})
	b.Add(Entry{Line: strings.Repeat("é", 10), Session: ""})
	p := b.After(0)
	if lines(p) != "2:éééééé" || p.Dropped != 1 {
		t.Fatalf("cut lines: %q dropped %d", lines(p), p.Dropped)
	}
	b = New(Options{MaxBytes: 12})
	b.Add(Entry{Line: "ab日本語", Session: "xyz", PID: 9})
	if e := b.After(0).Entries[0]; e.Line != "ab日本" || e.Session != "xyz" || e.PID != 9 {
		t.Fatalf("a line cut beside its session key: %+v", e)
	}
}

// A busy buffer discards its oldest lines from the front of its bytes and
// reuses the room: over many times its bound of lines, every read still
// gives the newest lines in order, and the room it keeps stays within a
// small multiple of what the lines take.
func TestBusyBufferReusesRoom(t *testing.T) {
	const maxBytes = 4 << 10
	b := New(Options{MaxLines: 100, MaxBytes: maxBytes})
	for i := range 20000 {
		b.Add(Entry{Line: fmt.Sprintf("line %d %s", i, strings.Repeat("x", i%97)), PID: i, Session: strings.Repeat("s", i%3)})
		if i%997 != 0 {
			continue
		}
		p := b.Tail(1000)
		if len(p.Entries) == 0 || p.Entries[len(p.Entries)-1].Seq != uint64(i+1) || p.Last != uint64(i+1) {
			t.Fatalf("after %d lines: %d kept, last %d", i+1, len(p.Entries), p.Last)
		}
		size := 0
		for k, e := range p.Entries {
			if want := p.Entries[len(p.Entries)-1].Seq - uint64(len(p.Entries)-1-k); e.Seq != want || e.PID != int(e.Seq-1) {
				t.Fatalf("after %d lines: entry %d is %+v, want seq %d", i+1, k, e, want)
			}
			size += len(e.Line) + len(e.Session)
		}
		if size > maxBytes || len(p.Entries) > 100 {
			t.Fatalf("after %d lines: %d lines of %d bytes kept, beyond the bounds", i+1, len(p.Entries), size)
		}
		if c := cap(b.data); c > 4*maxBytes {
			t.Fatalf("after %d lines: room for %d bytes kept, for at most %d bytes of lines", i+1, c, maxBytes)
		}
	}
}

// What a dormant server's buffer costs: one that kept the line or two a
// server writes as it starts and stops holds them in one small
// allocation, not in a ring of entries beside a string each.
func TestQuietBufferMemory(t *testing.T) {
	per := testserver.HeapPer(make([]*Buffer, 1000), func(i int) *Buffer {
		b := New(Options{})
		b.Add(Entry{Line: fmt.Sprintf("mcp-fixture[%d]: client initialized", 100000+i), PID: 100000 + i, Origin: 1})
		b.Add(Entry{Line: fmt.Sprintf("mcp-fixture[%d]: stdin closed; exiting with code 0", 100000+i), PID: 100000 + i, Origin: 1})
		return b
	})
	t.Logf("a buffer of two lines: %.0f bytes", per)
	// The Buffer (96 B; its epoch is made when asked for) and its lines
	// (one 128-B allocation): 224 B. A ring of two 80-B entries and the
	// two lines' strings took 272 B beside a 144-B Buffer and its 16-B
	// epoch (432 B).
	if per > 240 {
		t.Errorf("a buffer of two lines costs %.0f bytes of heap, want ≤ 240", per)
	}
}
