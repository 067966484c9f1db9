package telemetry

import (
	"sync/atomic"
	"time"
)

// OperationBuckets are the bucket bounds, in seconds, of the call duration
// histogram: the ExplicitBucketBoundaries the OpenTelemetry semantic
// conventions for MCP give mcp.server.operation.duration.
var OperationBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

// StartBuckets are the bucket bounds, in seconds, of the spawn and wake
// duration histograms: from a fast native server (a few milliseconds) to
// an npx download (tens of seconds).
var StartBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// layout is the bucket bounds of histograms, shared by all of them.
type layout struct {
	durs []time.Duration // upper bounds, ascending (le)
	secs []float64       // the same, in seconds, as exposed
}

func newLayout(bounds []float64) *layout {
	l := &layout{secs: bounds, durs: make([]time.Duration, len(bounds))}
	for i, b := range bounds {
		l.durs[i] = time.Duration(b * float64(time.Second))
	}
	return l
}

var (
	operationLayout = newLayout(OperationBuckets)
	startLayout     = newLayout(StartBuckets)
)

// Histogram counts durations into fixed buckets. Observe is safe to call
// concurrently with itself and with Snapshot, and allocates nothing.
type Histogram struct {
	l      *layout
	counts []atomic.Uint64 // per bucket (not cumulative); the last is +Inf
	sum    atomic.Int64    // nanoseconds
}

func newHistogram(l *layout) *Histogram {
	return &Histogram{l: l, counts: make([]atomic.Uint64, len(l.durs)+1)}
}

// Observe counts d (a negative d counts as 0).
func (h *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	h.counts[h.l.bucket(d)].Add(1)
	h.sum.Add(int64(d))
}

// bucket is the index of the bucket that counts d (len(l.durs): +Inf).
func (l *layout) bucket(d time.Duration) int {
	i := 0
	for i < len(l.durs) && d > l.durs[i] {
		i++
	}
	return i
}

// HistogramSnapshot is a histogram's state, as the Prometheus text format
// exposes it.
type HistogramSnapshot struct {
	Bounds     []float64 // upper bounds in seconds, +Inf left out
	Cumulative []uint64  // per bound, then +Inf: observations ≤ the bound
	Count      uint64
	Sum        float64 // seconds
}

// Snapshot reads h. Observations made while it reads may be counted in
// some buckets and not yet in others; Count is the +Inf bucket, so the
// snapshot is always consistent with itself.
func (h *Histogram) Snapshot() HistogramSnapshot {
	counts := make([]uint64, len(h.counts))
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
	}
	return snapshotOfCounts(h.l, counts, h.sum.Load())
}

// snapshotOfCounts is the snapshot of a histogram of layout l with counts per
// bucket (made cumulative in place) and sum in nanoseconds.
func snapshotOfCounts(l *layout, counts []uint64, sum int64) HistogramSnapshot {
	s := HistogramSnapshot{Bounds: l.secs, Cumulative: counts}
	for i := range counts {
		s.Count += counts[i]
		counts[i] = s.Count
	}
	s.Sum = time.Duration(sum).Seconds()
	return s
}
