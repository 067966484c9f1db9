package rpc

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

type lineResult struct {
	line  string
	owned bool
	over  *overlong
	err   error
}

func readAll(r io.Reader, max int) []lineResult {
	lr := newLineReader(r, max)
	var out []lineResult
	for {
		line, owned, over, err := lr.next()
		out = append(out, lineResult{string(line), owned, over, err})
		if err != nil {
			return out
		}
	}
}

func TestLineReader(t *testing.T) {
	big := strings.Repeat("b", 3*readBufSize+5) // spans several reader buffers
	in := "a\r\n\n" + big + "\n" + strings.Repeat("o", 5*readBufSize) + "\nlast"
	got := readAll(iotest.OneByteReader(strings.NewReader(in)), 4*readBufSize)
	want := []string{"a", "", big, "<over>", "last", "<EOF>"}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		switch w {
		case "<over>":
			if g.over == nil || g.over.size != 5*readBufSize || g.over.id != nil || g.over.request || g.over.response {
				t.Errorf("result %d: %+v, want the overlong line", i, g.over)
			}
		case "<EOF>":
			if g.err != io.EOF {
				t.Errorf("result %d: err %v, want EOF", i, g.err)
			}
		default:
			if g.line != w || g.err != nil || g.over != nil {
				t.Errorf("result %d: %.20q %v, want %.20q", i, g.line, g.err, w)
			}
		}
	}
}

func TestLineReaderExactLimit(t *testing.T) {
	got := readAll(strings.NewReader("12345\n123456\n"), 5)
	if got[0].line != "12345" || got[0].over != nil {
		t.Errorf("a line of exactly the limit: %+v", got[0])
	}
	if got[1].over == nil || got[1].over.size != 6 {
		t.Errorf("one byte over: %+v", got[1])
	}
}

func TestLineReaderHandsOverBigLines(t *testing.T) {
	big := strings.Repeat("x", 2*keepScratch)
	lr := newLineReader(strings.NewReader(big+"\nsmall\n"), DefaultMaxLine)
	line, owned, _, err := lr.next()
	if err != nil || !owned || len(line) != len(big) {
		t.Fatalf("big line: owned %v len %d err %v", owned, len(line), err)
	}
	if lr.scratch != nil {
		t.Fatal("the reader kept the buffer it handed over")
	}
	if line, _, _, _ := lr.next(); string(line) != "small" {
		t.Fatalf("then %q", line)
	}
}

func TestLineReaderError(t *testing.T) {
	boom := errors.New("boom")
	got := readAll(io.MultiReader(strings.NewReader("one\ntw"), iotest.ErrReader(boom)), 100)
	if len(got) != 3 || got[0].line != "one" || got[1].line != "tw" || got[1].err != nil || got[2].err != boom {
		t.Fatalf("got %+v", got)
	}
}
