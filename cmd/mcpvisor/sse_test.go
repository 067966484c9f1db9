package main

import (
	"io"
	"iter"

	"github.com/mcpvisor/mcpvisor/internal/sse"
)

// sseData is the data of each event of the event stream body, read with
// internal/sse as mcpvisor's own clients read one, until the stream ends;
// a stream that breaks yields its error, last. The data is valid until the
// loop goes on.
func sseData(body io.Reader) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		r := sse.NewReader(body, 64<<20)
		for {
			ev, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(ev.Data, nil) {
				return
			}
		}
	}
}
