package rpc

import (
	"bufio"
	"io"
)

const (
	// DefaultMaxLine is the default limit on one message's line: 16 MiB.
	DefaultMaxLine = 16 << 20

	readBufSize = 64 << 10 // the reader's buffer; shorter lines are never copied by it
	headLen     = 4 << 10  // how much of an overlong line is kept to find its id
	keepScratch = 1 << 20  // a longer line's buffer is handed over, not kept
)

// lineReader splits a stream into lines of at most max bytes. A longer line
// is skipped to its end (its first headLen bytes kept) without failing the
// stream.
type lineReader struct {
	br      *bufio.Reader
	max     int
	scratch []byte // assembles lines longer than the bufio buffer
	err     error  // the read error that ended a final, unterminated line
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, readBufSize), max: max}
}

// overlong is a line that exceeded the limit and was skipped.
type overlong struct {
	head []byte // its first headLen bytes (fewer if the limit is lower)
	size int64  // its length without the newline
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
	var head []byte
	for {
		frag, rerr := lr.br.ReadSlice('\n')
		if rerr == nil {
			frag = frag[:len(frag)-1]
		}
		size += int64(len(frag))
		switch {
		case head != nil:
			// skipping
		case size > int64(lr.max):
			head = make([]byte, 0, min(headLen, lr.max+1))
			head = append(head, acc[:min(len(acc), cap(head))]...)
			head = append(head, frag[:min(len(frag), cap(head)-len(head))]...)
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
			if head == nil && len(acc) == 0 {
				return nil, false, nil, rerr
			}
		}
		if head != nil {
			lr.keep(acc)
			return nil, false, &overlong{head: head, size: size}, nil
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
