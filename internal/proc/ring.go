package proc

import (
	"strings"
	"sync"
)

// Ring keeps the last lines written to it, bounded both by a number of lines
// and by a number of bytes, whichever is reached first. It is safe for
// concurrent use and readable while the process runs.
type Ring struct {
	mu       sync.Mutex
	lines    []string // circular, len == maxLines once full
	start    int      // index of the oldest line
	n        int      // lines held
	bytes    int      // bytes held (sum of len of held lines)
	maxLines int
	maxBytes int
	dropped  int64 // lines dropped to stay within bounds
}

// Default bounds of a Ring created with zero limits.
const (
	DefaultRingLines = 200
	DefaultRingBytes = 64 << 10
)

// NewRing returns a Ring that holds at most maxLines lines and maxBytes bytes;
// a zero or negative limit takes its default (200 lines, 64 KiB). A single
// line longer than maxBytes is kept truncated to maxBytes.
func NewRing(maxLines, maxBytes int) *Ring {
	if maxLines <= 0 {
		maxLines = DefaultRingLines
	}
	if maxBytes <= 0 {
		maxBytes = DefaultRingBytes
	}
	return &Ring{lines: make([]string, maxLines), maxLines: maxLines, maxBytes: maxBytes}
}

// Add appends one line (without its newline).
func (r *Ring) Add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(line) > r.maxBytes {
		line = line[:r.maxBytes]
	}
	for r.n > 0 && (r.n == r.maxLines || r.bytes+len(line) > r.maxBytes) {
		r.bytes -= len(r.lines[r.start])
		r.lines[r.start] = ""
		r.start = (r.start + 1) % r.maxLines
		r.n--
		r.dropped++
	}
	r.lines[(r.start+r.n)%r.maxLines] = line
	r.n++
	r.bytes += len(line)
}

// Lines returns a copy of the held lines, oldest first.
func (r *Ring) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, r.n)
	for i := range r.n {
		out[i] = r.lines[(r.start+i)%r.maxLines]
	}
	return out
}

// Tail returns the last k held lines joined by newlines (all when k <= 0).
func (r *Ring) Tail(k int) string {
	lines := r.Lines()
	if k > 0 && len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, "\n")
}

// Dropped reports how many lines were discarded to stay within bounds.
func (r *Ring) Dropped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}
