// Package mempolicy is how mcpvisor keeps its own memory small: the
// collector's setting while it learns its servers' lists and in connect's
// relay, and the trim that gives back to the OS what servers gone dormant
// and requests left behind.
package mempolicy

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// LearnGCPercent is the Go collector's GOGC while mcpvisor learns its
// servers' lists. Learning a thousand servers allocates hundreds of
// megabytes in a few seconds, nearly all garbage; at the default (100)
// the heap grows to twice what is live between collections, and what the
// learned servers keep is strewn over the spans, stack spans and GC
// metadata of that larger heap, resident long after: collecting more
// often keeps about a megabyte less resident at a thousand servers, for
// some CPU while learning runs.
const LearnGCPercent = 25

// WithGCPercent runs f with the collector's GOGC at percent, and puts back
// the setting it found when f returns — unless that one collects as often
// already (a GOGC at or below percent) or never (GOGC=off): it is read
// first (runtime/metrics) and then left untouched. The setting is the
// process's: not for concurrent use (serve and stdio call it once).
func WithGCPercent(percent int, f func()) {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		// GOGC=off reads as -1 here, as a uint64.
		if cur := int64(sample[0].Value.Uint64()); cur < 0 || cur <= int64(percent) {
			f()
			return
		}
	}
	prev := debug.SetGCPercent(percent)
	defer debug.SetGCPercent(prev)
	f()
}

// Relay's collector settings keep connect's heap, two 64 KiB copy buffers
// and little else, from growing before a collection.
const (
	relayGCPercent   = 50
	relayMemoryLimit = 4 << 20
)

// Relay sets the collector for a process that only relays bytes (mcpvisor
// connect): a small heap goal keeps its RSS small.
func Relay() {
	debug.SetGCPercent(relayGCPercent)
	debug.SetMemoryLimit(relayMemoryLimit)
}

// DropExecutablePages drops this process's pages of its own executable
// that are the file's bytes unchanged; see dropExecutablePages. It does
// nothing off Linux.
func DropExecutablePages() { dropExecutablePages() }

// trimWorth is how much the requests served since the last trim must
// have allocated for a trim after them to collect.
const trimWorth = 1 << 20

// A Trimmer gives back to the OS what servers gone dormant held, and what
// requests left behind: the state file's pages that reading and writing
// lists mapped in (release), and the heap they freed (which the Go
// runtime would otherwise keep for a while, up to its next collection's
// goal). The fleet calls Trim when things are quiet, at most every few
// seconds; it costs two collections. After requests only (no dormancy)
// the collections are skipped unless they allocated trimWorth since the
// last trim that collected: a dashboard polling a small fleet does not
// cost a collection every few seconds. The mapped pages go back at every
// trim: the state file's and the executable's (DropExecutablePages,
// about 1 ms). Once quiet, mcpvisor keeps in its RSS only the code and
// read-only data it runs from then on, not what starting, learning,
// running servers and serving requests touched (about 6 of serve's 13 MB
// of code and data at rest; the pages stay in the page cache, and come
// back as they are used: a few hundred minor faults after each trim).
// Its methods are safe to call concurrently.
type Trimmer struct {
	release    func() error // nil: no state file
	log        *slog.Logger
	lastAllocs atomic.Uint64 // the heap's allocation count at the last trim that collected
}

// NewTrimmer returns a Trimmer that calls release (if not nil) at every
// trim to give back the state file's pages, logging its error.
func NewTrimmer(release func() error, log *slog.Logger) *Trimmer {
	return &Trimmer{release: release, log: log}
}

// Trim gives back what it can; dormancy says a server went dormant (its
// memory is worth a collection whatever requests allocated).
func (t *Trimmer) Trim(dormancy bool) {
	// The mapped pages go back at every trim: cheap, no collection.
	defer dropExecutablePages()
	if t.release != nil {
		if err := t.release(); err != nil {
			t.log.Debug("could not release the state file's pages", "err", err)
		}
	}
	if !t.worthIt() && !dormancy {
		return
	}
	// Two collections: the first moves what sync.Pools cache to their
	// victim caches — encoding/json's encoder buffers among them, grown
	// to the largest reply (/api/servers of a thousand servers: half a
	// megabyte) —, the second (FreeOSMemory's) frees it, and its pages go
	// back with the rest.
	runtime.GC()
	debug.FreeOSMemory()
}

// worthIt reports whether the heap allocated trimWorth since the last
// call that said yes (whose count it records).
func (t *Trimmer) worthIt() bool {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	now := s[0].Value.Uint64()
	last := t.lastAllocs.Load()
	if now-last < trimWorth {
		return false
	}
	return t.lastAllocs.CompareAndSwap(last, now)
}
