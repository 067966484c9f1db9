package fleet

import (
	"context"

	"github.com/mcpvisor/mcpvisor/internal/interest"
)

// What the tests' sessions ask of a server is recorded in the fleet's
// interest book (Options.Interest), as the gateway records it.

// bookOf is f's interest book.
func bookOf(f *Fleet) *interest.Book {
	if c, ok := f.opts.Interest.(*countingInterest); ok {
		return c.Book
	}
	return f.opts.Interest.(*interest.Book)
}

// bookInstance is the key the gateway gives the book for the instance
// serving session (no identity: these tests' sessions have none).
func (s *Server) bookInstance(session string) string {
	if !s.Private() {
		return ""
	}
	return s.InstanceKey(session, nil)
}

func (s *Server) subscribe(session, uri string) {
	bookOf(s.f).Subscribe(s, session, s.bookInstance(session), uri)
}
func (s *Server) unsubscribe(session, uri string) { bookOf(s.f).Unsubscribe(s, session, uri) }
func (s *Server) setLogLevel(session, level string) {
	bookOf(s.f).SetLogLevel(s, session, s.bookInstance(session), level)
}
func (s *Server) subscribers(uri string) []string { return bookOf(s.f).Subscribers(s, uri) }
func (s *Server) instanceSubscriptions(session string) []string {
	return bookOf(s.f).InstanceSubscriptions(s, s.bookInstance(session))
}

// endSession ends session as the gateway does: the fleet forgets what it
// asked (the interest book's End) and ends what it held.
func (f *Fleet) endSession(ctx context.Context, session string) {
	f.EndSession(ctx, session)
}

// replay is what a new process of the instance keyed key is told.
func (s *Server) replay(key string) (uris []string, level string) {
	b := bookOf(s.f)
	return b.InstanceSubscriptions(s, key), b.EffectiveLogLevel(s, key)
}
