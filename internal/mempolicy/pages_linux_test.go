package mempolicy

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// Only the executable's mappings that hold the file's bytes unchanged are
// dropped: not a writable one, not a read-only one with a written page
// (relocated data of a position-independent build), in memory or swapped
// out, not another file's.
func TestCleanMappings(t *testing.T) {
	const smaps = `00400000-00800000 r-xp 00000000 fe:00 1   /bin/mcpvisor
Size:               4096 kB
Rss:                2048 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
00800000-00900000 r--p 00400000 fe:00 1   /bin/mcpvisor
Size:               1024 kB
Anonymous:             8 kB
VmFlags: rd mr mw me
00900000-00a00000 r--p 00500000 fe:00 1   /bin/mcpvisor
Anonymous:             0 kB
7e000000-7e080000 r--p 00600000 fe:00 1   /bin/mcpvisor
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  8 kB
00a00000-00b00000 rw-p 00600000 fe:00 1   /bin/mcpvisor
Anonymous:             0 kB
00b00000-00c00000 r-xp 00000000 fe:00 2   /lib/other.so
Anonymous:             0 kB
00c00000-00d00000 rw-p 00000000 00:00 0
Anonymous:           512 kB
7f0000000000-7f0000001000 r--p 00000000 fe:00 1   /bin/mcpvisor
`
	got := cleanMappings(strings.NewReader(smaps), "/bin/mcpvisor")
	want := []span{{0x400000, 0x800000}, {0x900000, 0xa00000}, {0x7f0000000000, 0x7f0000001000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cleanMappings = %x, want %x", got, want)
	}
}

// The process goes on working after its pages were dropped, and the
// executable's RSS it counts goes down.
func TestDropExecutablePages(t *testing.T) {
	pageInExecutable(t)
	before := procStatusKB(os.Getpid(), "RssFile")
	dropExecutablePages()
	after := procStatusKB(os.Getpid(), "RssFile")
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after dropping the executable's pages", before, after)
	}
	if s := strings.Repeat("x", 3); s != "xxx" { // code runs again, paged back in
		t.Fatal(s)
	}
}

// A trim drops the executable's pages too: after servers went dormant,
// after requests that allocated enough for its collections, and after
// requests that did not (it skips the collections only). A quiet mcpvisor
// keeps in its RSS only what it runs since.
func TestATrimDropsExecutablePages(t *testing.T) {
	tr := NewTrimmer(nil, slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		name     string
		dormancy bool
		garbage  int
	}{{"dormancy", true, 0}, {"requests worth collections", false, 2 * trimWorth}, {"requests", false, 0}} {
		trimSink = make([]byte, c.garbage) // requests' garbage
		trimSink = nil
		pageInExecutable(t)
		before := procStatusKB(os.Getpid(), "RssFile")
		tr.Trim(c.dormancy)
		after := procStatusKB(os.Getpid(), "RssFile")
		if after >= before {
			t.Errorf("%s: RssFile %d kB before, %d kB after a trim", c.name, before, after)
		}
		if s := strings.Repeat("x", 3); s != "xxx" { // code runs again, paged back in
			t.Fatal(s)
		}
	}
}

// pageInExecutable maps every page of the executable's clean mappings
// into this process — reading them through /proc/self/mem faults them
// in — so that a drop has the whole binary to drop, whatever ran before.
// Without it, a case that follows another drop starts near the floor,
// and the pages the runtime touches meanwhile (the race detector's, a
// collection's) can outweigh what is left to drop.
func pageInExecutable(t *testing.T) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	spans := cleanMappings(smaps, exe)
	smaps.Close()
	if len(spans) == 0 {
		t.Fatal("no clean mapping of the executable to page in")
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	buf := make([]byte, 64<<10)
	for _, s := range spans {
		for at := s.start; at < s.end; at += uint64(len(buf)) {
			n := min(uint64(len(buf)), s.end-at)
			if _, err := mem.ReadAt(buf[:n], int64(at)); err != nil {
				t.Fatalf("paging in %#x: %v", at, err)
			}
		}
	}
}

// procStatusKB reads a "Name: N kB" field of /proc/PID/status, or -1.
func procStatusKB(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err == nil {
				return n
			}
		}
	}
	return -1
}
