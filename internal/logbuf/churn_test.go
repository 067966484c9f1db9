package logbuf

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Followers under concurrent Add, with lines of many sizes so
// that the discarded room is reused: every line read is the one its Seq
// names, whole, and Dropped plus the lines read account for every
// sequence number, with no gap.
func TestFollowersUnderChurn(t *testing.T) {
	b := New(Options{MaxLines: 50, MaxBytes: 4 << 10})
	const total = 20000
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; i <= total; i++ {
			b.Add(Entry{Line: fmt.Sprintf("%d:%s", i, strings.Repeat("x", i%300)), PID: i, Session: strings.Repeat("s", i%7)})
		}
		b.Close()
	})
	check := func(e Entry) error {
		want := fmt.Sprintf("%d:%s", e.Seq, strings.Repeat("x", int(e.Seq)%300))
		if e.Line != want || e.PID != int(e.Seq) || e.Session != strings.Repeat("s", int(e.Seq)%7) {
			return fmt.Errorf("seq %d read as %q pid %d session %q", e.Seq, e.Line[:min(20, len(e.Line))], e.PID, e.Session)
		}
		return nil
	}
	for f := range 4 {
		wg.Go(func() {
			var seen uint64
			held := []Entry{}
			for {
				p, err := b.Wait(context.Background(), seen)
				if err == ErrClosed {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
				next := seen + p.Dropped
				for _, e := range p.Entries {
					next++
					if e.Seq != next {
						t.Errorf("follower %d: seq %d after %d (dropped %d)", f, e.Seq, seen, p.Dropped)
						return
					}
					if err := check(e); err != nil {
						t.Errorf("follower %d: %v", f, err)
						return
					}
				}
				held = append(held, p.Entries...)
				seen = next
				if f%2 == 0 {
					time.Sleep(time.Microsecond)
				}
				_ = b.Tail(10)
				_ = b.Since(time.Now().Add(-time.Millisecond))
			}
			if seen != total {
				t.Errorf("follower %d ended at %d, want %d", f, seen, total)
			}
			// Lines read long ago are intact: reads return copies.
			for _, e := range held {
				if err := check(e); err != nil {
					t.Errorf("follower %d, later: %v", f, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
