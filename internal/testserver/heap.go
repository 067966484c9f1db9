package testserver

import (
	"runtime"
	"runtime/metrics"
)

// LiveHeap is the heap a collection, run now, finds live: the second of
// two, so that what sync.Pools held until the first is gone too.
func LiveHeap() int64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// HeapPer is the live heap, in bytes, that each of items holds when made
// by build (items[i] = build(i)): the least of three measures, each over
// all of items, which are cleared before each and hold the last one's
// after. The slice itself is not counted.
func HeapPer[T any](items []T, build func(i int) T) float64 {
	measure := func() float64 {
		clear(items)
		before := LiveHeap()
		for i := range items {
			items[i] = build(i)
		}
		after := LiveHeap()
		runtime.KeepAlive(items)
		return float64(after-before) / float64(len(items))
	}
	return min(measure(), measure(), measure())
}
