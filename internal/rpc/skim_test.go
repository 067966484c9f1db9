package rpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// skimPieces skims line fed in pieces of n bytes (the whole line if n <= 0).
func skimPieces(line []byte, n int) *skim {
	s := &skim{}
	s.reset()
	if n <= 0 {
		n = len(line) + 1
	}
	for len(line) > 0 && !s.done() {
		k := min(n, len(line))
		s.feed(line[:k])
		line = line[k:]
	}
	return s
}

var skimPieceSizes = []int{1, 2, 3, 5, 8, 13, 64, 0}

func TestSkim(t *testing.T) {
	long := strings.Repeat("x", maxSkimID)
	for _, tc := range []struct {
		line          string
		id            string // "" for none
		request, resp bool
	}{
		{`{"jsonrpc":"2.0","id":5,"result":{}}`, `5`, false, true},
		{`{"result":{"id":1},"jsonrpc":"2.0","id":5}`, `5`, false, true},
		{`{"result":"a \"id\":7 \\","id":"x\"y"}`, `"x\"y"`, false, true},
		{`{"\u0069d":3,"method":"m"}`, `3`, true, false},
		{`{"\u0069\u0064":3,"res\u0075lt":0}`, `3`, false, true},
		{`{"method":"m","params":{"id":9}}`, ``, true, false},
		{`{"params":[{"id":9}],"jsonrpc":"2.0","id":"s-1","method":"x"}`, `"s-1"`, true, false},
		{`[{"id":1}]`, ``, false, false},
		{`"{\"id\":1}"`, ``, false, false},
		{`{"id":{"x":1},"result":1}`, ``, false, true},
		{`{"id":[1],"result":1}`, ``, false, true},
		{`{"id":true,"result":1}`, ``, false, true},
		{`{"id":null,"error":{"code":1,"message":"m"}}`, `null`, false, true},
		{`{"id":-1.5e3,"result":[]}`, `-1.5e3`, false, true},
		{" \t{ \"id\" :\t12 , \"result\":1 }", `12`, false, true},
		{`{"result":[1,2,{"a":"]}\"["}],"id":4}`, `4`, false, true},
		{`{"result":"\\\\","id":4}`, `4`, false, true},
		{`{"result":"\\\"","id":4}`, `4`, false, true},
		{`{"result":"\\","id":4}`, `4`, false, true},
		{`{"result":{"s":"\\\\\"}"},"id":4}`, `4`, false, true},
		{`{"result":"\u0022","id":4}`, `4`, false, true},
		{`{"result":0,"id":1,"id":2}`, `1`, false, true},
		{`{"result":{"method":"x","params":1},"id":1}`, `1`, false, true},
		{`{"a" 1,"id":2,"result":0}`, ``, false, false},
		{`{"a":1}{"id":2,"result":0}`, ``, false, false},
		{`{"result":0}`, ``, false, true},
		{`{"result":0,"id":"` + long[2:] + `"}`, `"` + long[2:] + `"`, false, true},
		{`{"result":0,"id":"` + long[1:] + `"}`, ``, false, true},
		{`{"result":0,"id":1` + strings.Repeat("0", maxSkimID) + `}`, ``, false, true},
		{`{"` + strings.Repeat("i", 100) + `":1,"result":0}`, ``, false, true},
		{`{}`, ``, false, false},
		{``, ``, false, false},
	} {
		for _, n := range skimPieceSizes {
			s := skimPieces([]byte(tc.line), n)
			if string(s.id) != tc.id || s.request != tc.request || s.response != tc.resp {
				t.Errorf("%.80s in pieces of %d: id %.20s request %v response %v, want %.20s %v %v",
					tc.line, n, s.id, s.request, s.response, tc.id, tc.request, tc.resp)
			}
		}
	}
}

// The skim agrees with a full parse of the line (sniff, which walks the
// whole object when it is valid), in pieces of any size, on random
// JSON-RPC lines with nested "id" members, escapes and white space.
func TestSkimMatchesFullParse(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		line := randomLine(rng)
		if !json.Valid(line) {
			t.Fatalf("generated invalid JSON: %s", line)
		}
		id, req, resp := sniff(line)
		for _, n := range []int{1 + rng.IntN(40), 0} {
			s := skimPieces(line, n)
			if !bytes.Equal(s.id, id) {
				t.Fatalf("line %d in pieces of %d: id %s, want %s\n%s", i, n, s.id, id, line)
			}
			if s.request && !req || s.response && !resp ||
				s.id == nil && (s.request != req || s.response != resp) ||
				(s.request || s.response) != (req || resp) {
				t.Fatalf("line %d in pieces of %d: request %v response %v, want %v %v\n%s", i, n, s.request, s.response, req, resp, line)
			}
		}
	}
}

func randomLine(rng *rand.Rand) []byte {
	var members []string
	add := func(k, v string) { members = append(members, randomKey(rng, k)+ws(rng)+":"+ws(rng)+v) }
	add("jsonrpc", `"2.0"`)
	switch rng.IntN(4) {
	case 0:
		add("method", `"tools/call"`)
		add("params", randomValue(rng, 0))
	case 1:
		add("result", randomValue(rng, 0))
	case 2:
		add("error", `{"code":-1,"message":`+randomString(rng)+`,"data":`+randomValue(rng, 0)+`}`)
	}
	if rng.IntN(5) > 0 {
		ids := []string{`1`, `42`, `-7`, `0.5`, `null`, `"a"`, `"s\"1"`, `"\\"`, `"id"`, `1e3`}
		add("id", ids[rng.IntN(len(ids))])
	}
	for range rng.IntN(3) {
		add(fmt.Sprintf("x%d", rng.IntN(100)), randomValue(rng, 0))
	}
	rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return []byte(ws(rng) + "{" + ws(rng) + strings.Join(members, ws(rng)+","+ws(rng)) + ws(rng) + "}" + ws(rng))
}

func randomKey(rng *rand.Rand, k string) string {
	if k == "id" && rng.IntN(4) == 0 {
		return `"\u0069d"`
	}
	return `"` + k + `"`
}

func ws(rng *rand.Rand) string {
	return []string{"", "", "", " ", "\t", "\r", "  "}[rng.IntN(7)]
}

func randomString(rng *rand.Rand) string {
	parts := []string{`a`, `id`, `"id":1`, `\"`, `\\`, `\\\"`, `\/`, `\u0022`, `\u005c`, `{`, `}`, `[`, `]`, `,`, `:`, `é`, ` `}
	var b strings.Builder
	b.WriteByte('"')
	for range rng.IntN(8) {
		p := parts[rng.IntN(len(parts))]
		if p == `"id":1` {
			p = `\"id\":1`
		}
		b.WriteString(p)
	}
	b.WriteByte('"')
	return b.String()
}

func randomValue(rng *rand.Rand, depth int) string {
	n := 4
	if depth < 4 {
		n = 7
	}
	switch rng.IntN(n) {
	case 0:
		return randomString(rng)
	case 1:
		return []string{`0`, `-1.5e+3`, `123`, `0.25`}[rng.IntN(4)]
	case 2:
		return []string{`true`, `false`, `null`}[rng.IntN(3)]
	case 3:
		return `"id"`
	case 4, 5:
		var members []string
		for range rng.IntN(4) {
			k := []string{"id", "method", "result", "params", "error", "k", `\u0069d`}[rng.IntN(7)]
			members = append(members, `"`+k+`"`+ws(rng)+":"+ws(rng)+randomValue(rng, depth+1))
		}
		return "{" + strings.Join(members, ","+ws(rng)) + "}"
	default:
		var elems []string
		for range rng.IntN(4) {
			elems = append(elems, randomValue(rng, depth+1))
		}
		return "[" + ws(rng) + strings.Join(elems, ","+ws(rng)) + "]"
	}
}

// FuzzSkim: the skim never depends on how the line is cut into pieces, and
// on a valid object with at most one top-level id it finds sniff's id.
func FuzzSkim(f *testing.F) {
	for _, s := range []string{
		`{"result":{"id":1},"jsonrpc":"2.0","id":5}`,
		`{"result":"a \"id\":7 \\","id":"x\"y"}`,
		`{"\u0069d":3,"method":"m"}`,
		`{"result":[1,2,{"a":"]}\"["}],"id":4}`,
		`{"a" 1,"id":2}`,
	} {
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, line []byte, n uint8) {
		whole := skimPieces(line, 0)
		cut := skimPieces(line, int(n))
		if !bytes.Equal(whole.id, cut.id) || whole.request != cut.request || whole.response != cut.response {
			t.Fatalf("in pieces of %d: %s %v %v; whole: %s %v %v", n, cut.id, cut.request, cut.response, whole.id, whole.request, whole.response)
		}
		if len(whole.id) > maxSkimID {
			t.Fatalf("kept an id of %d bytes", len(whole.id))
		}
		if !json.Valid(line) || topLevelIDs(line) > 1 {
			return
		}
		if id, _, _ := sniff(line); len(id) <= maxSkimID && !bytes.Equal(whole.id, id) {
			t.Fatalf("id %s, sniff %s", whole.id, id)
		}
	})
}

func topLevelIDs(d []byte) int {
	o := objectAt(d, skipSpace(d, 0), 1)
	n := 0
	for o.next() {
		if o.is("id") {
			n++
		}
	}
	return n
}

// special8's lowest mark is the first byte skipString must stop at, in any
// word: skipString jumps to it without looking at the bytes between.
// Words are drawn from bytes around each boundary (control characters,
// the quote, the backslash, their neighbours, bytes with the top bit
// set), so that every borrow the subtractions can make is tried.
func TestSpecial8FirstMarkIsExact(t *testing.T) {
	pool := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"', '"' + 1, '\\' - 1, '\\', '\\' + 1, 'a', 0x7f, 0x80, 0x9f, 0xa0, 0xa1, 0xdc, 0xe2, 0xff}
	rng := rand.New(rand.NewPCG(1, 2))
	var w [8]byte
	for range 1_000_000 {
		for k := range w {
			w[k] = pool[rng.IntN(len(pool))]
		}
		first := 8
		for k, c := range w {
			if !strPlain[c] {
				first = k
				break
			}
		}
		m := special8(binary.LittleEndian.Uint64(w[:]))
		if got := bits.TrailingZeros64(m) / 8; got != first {
			t.Fatalf("word % x: first special byte %d, lowest mark at %d (mask %#x)", w, first, got, m)
		}
	}
}
