package proc

import (
	"testing"
)

func TestParseStat(t *testing.T) {
	line := []byte("4242 (my (weird) prog) S 17 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
	st, ok := parseStat(line)
	if !ok {
		t.Fatal("parse failed")
	}
	if st.pid != 4242 || st.state != 'S' || st.ppid != 17 || st.pgrp != 4242 || st.session != 4242 || st.startTime != 987654 || st.rss != 10 {
		t.Fatalf("parsed %+v", st)
	}
	for _, bad := range []string{"", "12 (x", "x (y) S 1 2 3", "12 (x) S 1"} {
		if _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}
