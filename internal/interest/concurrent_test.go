package interest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// The book's methods are safe for concurrent use: readers — Replay (to a
// legacy and to a modern connection), Gen, Pinned, Subscribers,
// LogLevels, InstanceSubscriptions, EffectiveLogLevel, Sync — run while
// sessions subscribe, unsubscribe, set levels and end, and reloads
// sweep. Besides the race detector's word, every read holds to what the
// book promises:
//
//   - a server's generation never goes back: each reader sees it only
//     grow, but for 0 (no record);
//   - Replay returns the generation of what it told: when Gen is still
//     that, the connection was told the current state;
//   - a session that ended is gone from every read begun after its End
//     returned, and what it asks after its end is never recorded: no
//     read ever sees it.
func TestBookConcurrentUse(t *testing.T) {
	const sessions, rounds, readers = 4, 1000, 3
	b := New(discard)
	shared, per := &server{name: "shared"}, &server{name: "per", perSession: true}
	gone := &removable{server: server{name: "gone"}}
	servers := []Server{shared, per, gone}
	session := func(i int) string { return fmt.Sprintf("S%d", i) }
	uriOf := func(i int) string { return fmt.Sprintf("file:///%d", i) }
	const late = "file:///late" // asked only by sessions that ended
	var ended [sessions]atomic.Bool

	var writers, others, reading sync.WaitGroup
	reading.Add(readers)   // the writers begin once every reader read once
	var reads atomic.Int64 // rounds of reads begun before every session ended
	for i := range sessions {
		writers.Go(func() {
			reading.Wait()
			sess, uri := session(i), uriOf(i)
			for n := range rounds {
				for _, s := range servers {
					b.Subscribe(s, sess, instOf(s, sess), uri)
					b.SetLogLevel(s, sess, instOf(s, sess), logLevels[n%len(logLevels)])
					if n%3 == 0 {
						b.Unsubscribe(s, sess, uri)
						b.SetLogLevel(s, sess, instOf(s, sess), "")
					}
				}
			}
			for _, s := range servers { // what End is to forget
				b.Subscribe(s, sess, instOf(s, sess), uri)
				b.SetLogLevel(s, sess, instOf(s, sess), "info")
			}
			b.End(sess)
			ended[i].Store(true)
			for _, s := range servers {
				b.Subscribe(s, sess, instOf(s, sess), late)
				b.SetLogLevel(s, sess, instOf(s, sess), "debug")
			}
		})
	}
	stop := make(chan struct{})
	others.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if n == rounds/2 {
				gone.removed.Store(true)
			}
			b.Sweep()
		}
	})
	for range readers {
		others.Go(func() {
			first := true
			last := map[Server]uint64{}
			checkGen := func(s Server, g uint64) {
				if g != 0 && g < last[s] {
					t.Errorf("%s: gen %d after %d: it went back", s.Name(), g, last[s])
				}
				last[s] = max(last[s], g)
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				var over [sessions]bool // ended before this round's reads
				for i := range sessions {
					over[i] = ended[i].Load()
				}
				endedURI := func(u string) bool { // asked only by a session over
					for j := range sessions {
						if over[j] && u == uriOf(j) {
							return true
						}
					}
					return false
				}
				endedSeen := func(what string, sess string) {
					if sess == "" {
						return
					}
					var i int
					if _, err := fmt.Sscanf(sess, "S%d", &i); err != nil || over[i] {
						t.Errorf("%s: session %q, which ended before the read", what, sess)
					}
				}
				for _, s := range servers {
					checkGen(s, b.Gen(s))
					for i := range sessions {
						key := ""
						if s.Config().PerSession() {
							key = session(i)
						}
						for _, modern := range []bool{false, true} {
							c := newToldConn(modern)
							gen := b.Replay(context.Background(), s, key, c)
							checkGen(s, gen)
							toldCurrent(t, b, s, key, c, gen)
							uris, _ := c.state()
							for _, u := range uris {
								if u == late || endedURI(u) {
									t.Errorf("%s: replayed %s, asked by a session that ended before the replay", s.Name(), u)
								}
							}
						}
						if slices.Contains(b.InstanceSubscriptions(s, instOf(s, session(i))), late) {
							t.Errorf("%s: an ended session's subscription is recorded", s.Name())
						}
						_ = b.EffectiveLogLevel(s, instOf(s, session(i)))
						if b.Pinned(s, key) && key != "" && over[i] {
							t.Errorf("%s: the instance of ended session %s is pinned", s.Name(), key)
						}
						b.Sync(newToldConn(true), s, instOf(s, session(i)))
					}
					for i := range sessions {
						for _, sess := range b.Subscribers(s, uriOf(i)) {
							endedSeen(s.Name()+": subscriber", sess)
						}
					}
					if subs := b.Subscribers(s, late); len(subs) != 0 {
						t.Errorf("%s: sessions %v subscribed after they ended", s.Name(), subs)
					}
					for sess := range b.LogLevels(s) {
						endedSeen(s.Name()+": log level of", sess)
					}
				}
				if first {
					first = false
					reading.Done()
				} else if slices.Contains(over[:], false) {
					reads.Add(1)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	others.Wait()
	t.Logf("%d rounds of reads begun before every session ended", reads.Load())
	b.Sweep()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.servers) != 0 {
		t.Fatalf("every session ended and the book still holds %d servers' records", len(b.servers))
	}
}
