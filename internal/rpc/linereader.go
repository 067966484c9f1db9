package rpc

import (
	"bufio"
	"io"
)

const (
	// DefaultMaxLine is the default limit on one message's line: 16 MiB.
	DefaultMaxLine = 16 << 20

	readBufSize = 64 << 10 // the reader's buffer; shorter lines are never copied by it
	headLen     = 4 << 10  // the longest id read from an overlong line
	keepScratch = 1 << 20  // a longer line's buffer is handed over, not kept
)

// lineReader splits a stream into lines of at most max bytes. A longer line
// is skipped to its end without failing the stream, and skimmed on the way
// for its envelope (see skim): memory stays bounded by max, whatever the
// line's length.
type lineReader struct {
	br      *bufio.Reader
	max     int
	scratch []byte // assembles lines longer than the bufio buffer
	err     error  // the read error that ended a final, unterminated line
	skim    skim   // reads the envelope of the line being skipped
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, readBufSize), max: max}
}

// overlong is a line that exceeded the limit and was skipped, with what
// its skim found.
type overlong struct {
	size int64  // its length without the newline
	id   []byte // its top-level id (a string, number or null), if any
	// request: it has a top-level "method" or "params"; response: a
	// "result" or "error" (the skim stops once it has the id and either).
	request, response bool
}

// next returns the next line without its "\n" (or "\r\n"). Unless owned,
// line aliases the reader's buffers and is valid only until the next call;
// an owned line belongs to the caller. A line over the limit comes back as
// over instead, with line nil. A final line without a newline is returned
// before the error that ended it. err is io.EOF at the end of the stream,
// else the read error.
func (lr *lineReader) next() (line []byte, owned bool, over *overlong, err error) {
	if lr.err != nil {
		return nil, false, nil, lr.err
	}
	acc := lr.scratch[:0]
	var size int64
	skipping := false
	for {
		frag, rerr := lr.br.ReadSlice('\n')
		if rerr == nil {
			frag = frag[:len(frag)-1]
		}
		size += int64(len(frag))
		switch {
		case skipping:
			if !lr.skim.done() {
				lr.skim.feed(frag)
			}
		case size > int64(lr.max):
			skipping = true
			lr.skim.reset()
			lr.skim.feed(acc)
			lr.skim.feed(frag)
			acc = acc[:0]
		case rerr == nil && len(acc) == 0:
			return trimCR(frag), false, nil, nil
		default:
			acc = append(acc, frag...)
		}
		if rerr == bufio.ErrBufferFull {
			continue
		}
		if rerr != nil {
			lr.err = rerr
			if !skipping && len(acc) == 0 {
				return nil, false, nil, rerr
			}
		}
		if skipping {
			lr.keep(acc)
			sk := &lr.skim
			return nil, false, &overlong{size: size, id: sk.id, request: sk.request, response: sk.response}, nil
		}
		owned = cap(acc) > keepScratch
		if owned {
			lr.scratch = nil
		} else {
			lr.scratch = acc
		}
		return trimCR(acc), owned, nil, nil
	}
}

func (lr *lineReader) keep(acc []byte) {
	if cap(acc) > keepScratch {
		acc = nil
	}
	lr.scratch = acc[:0]
}

func trimCR(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\r' {
		return b[:n-1]
	}
	return b
}
