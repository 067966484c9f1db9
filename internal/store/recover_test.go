package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// startHolder runs this test binary as another process holding path.
func startHolder(t *testing.T, path string) (*exec.Cmd, io.WriteCloser, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("holder said %q (%v)", line, err)
	}
	return cmd, stdin, cmd.Process.Pid
}

func corruptFiles(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func assertNoCorruptFiles(t *testing.T, path string) {
	t.Helper()
	if m := corruptFiles(t, path); len(m) != 0 {
		t.Errorf("files moved aside: %v", m)
	}
}

// fill writes n servers of 20 tools of about 1 KB: a file of many pages.
func fill(t testing.TB, s *Store, n int) map[string]string {
	t.Helper()
	entries := make([]Entry, n)
	want := make(map[string]string, n)
	for i := range entries {
		name := fmt.Sprintf("server-%04d", i)
		entries[i] = Entry{Server: name, Hash: hashOf(i), Lists: realisticLists(i, 20, 1024)}
		want[name] = hashOf(i)
	}
	if err := s.PutMany(entries); err != nil {
		t.Fatal(err)
	}
	return want
}

func hashOf(i int) string { return fmt.Sprintf("%064x", i*7919+1) }

// recovers opens a damaged file and checks that Open logged it, moved it
// aside unchanged and started an empty, working store.
func recovers(t *testing.T, path string) {
	t.Helper()
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs testserver.Buffer
	s, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open of a damaged file failed: %v", err)
	}
	defer s.Close()
	aside := corruptFiles(t, path)
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v, want one file", aside)
	}
	if got, _ := os.ReadFile(aside[0]); !bytes.Equal(got, damaged) {
		t.Error("the file moved aside differs from the damaged file")
	}
	if !strings.Contains(logs.String(), "moved aside") || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("log does not report the recovery:\n%s", logs.String())
	}
	if names := s.Servers(); len(names) != 0 {
		t.Errorf("fresh store has servers %v", names)
	}
	if err := s.PutLists("a", "h", sample); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lists("a", "h"); !ok {
		t.Error("fresh store does not keep an entry")
	}
	if err := s.AppendEvent(Event{Type: "ready"}); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptGarbage(t *testing.T) {
	for name, content := range map[string][]byte{
		"text":       []byte("this is not a bbolt file\n"),
		"random 64K": randomBytes(64 << 10),
		"zeros 16K":  make([]byte, 16<<10),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			recovers(t, path)
		})
	}
}

func TestCorruptTruncated(t *testing.T) {
	// hwm is where the pages the file uses end (the file may extend past it).
	for name, cut := range map[string]func(hwm int64) int64{
		"half":             func(hwm int64) int64 { return hwm / 2 },
		"last page cut":    func(hwm int64) int64 { return hwm - 4096 },
		"last byte cut":    func(hwm int64) int64 { return hwm - 1 },
		"inside meta page": func(int64) int64 { return 100 },
		"meta pages only":  func(int64) int64 { return 2 * 4096 },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			s := open(t, path, Options{})
			fill(t, s, 50)
			s.Close()
			if err := os.Truncate(path, cut(highWaterMark(t, path))); err != nil {
				t.Fatal(err)
			}
			recovers(t, path)
		})
	}
}

// Pages past the meta pages overwritten: the header checks pass, bbolt or
// the walk at Open panics, and Open recovers.
func TestCorruptScribbledPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, Options{})
	fill(t, s, 50)
	s.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(data[2*4096:], randomBytes(len(data)-2*4096))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := preflight(path); err != nil {
		t.Fatalf("preflight already rejects the file (%v): the test would not reach bbolt", err)
	}
	recovers(t, path)
}

func TestUnreadableStatePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	var logs testserver.Buffer
	s, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open with a directory at the state path: %v", err)
	}
	defer s.Close()
	if aside := corruptFiles(t, path); len(aside) != 1 {
		t.Errorf("moved aside: %v", aside)
	}
	if err := s.PutLists("a", "h", sample); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFailsWhenDirCannotBeMade(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(filepath.Join(file, "state.db"), Options{}); err == nil {
		s.Close()
		t.Fatal("Open under a regular file succeeded")
	}
}

// A file truncated under a running store: the next read faults on a page
// past the end, the fault becomes an error, and the store carries on with
// a fresh file.
func TestFaultWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	var logs testserver.Buffer
	s := open(t, path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	want := fill(t, s, 50)
	if err := os.Truncate(path, 3*4096); err != nil {
		t.Fatal(err)
	}
	if got := s.Load(want); len(got) != 0 {
		t.Errorf("Load from a truncated file returned %d entries", len(got))
	}
	if !strings.Contains(logs.String(), "faulted") {
		t.Errorf("log does not report the fault:\n%s", logs.String())
	}
	if aside := corruptFiles(t, path); len(aside) != 1 {
		t.Errorf("moved aside: %v", aside)
	}
	if err := s.PutLists("a", "h", sample); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	if _, ok := s.Lists("a", "h"); !ok {
		t.Error("entry written after recovery not found")
	}
	s.Close()
	s = open(t, path, Options{})
	if names := s.Servers(); len(names) != 1 || names[0] != "a" {
		t.Errorf("after reopen: servers %v", names)
	}
}

func TestProtect(t *testing.T) {
	err := protect(func() error { panic("invalid page type") })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "invalid page type") {
		t.Errorf("protect(panic) = %v", err)
	}
	sentinel := errors.New("x")
	if err := protect(func() error { return sentinel }); err != sentinel {
		t.Errorf("protect passes errors through: %v", err)
	}
}

// highWaterMark is the end of the last page path's current meta claims.
func highWaterMark(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m0, err0 := readMeta(f, 0)
	if err0 != nil {
		t.Fatal(err0)
	}
	m := m0
	if m1, err := readMeta(f, int64(m0.pageSize)); err == nil && m1.txid > m0.txid {
		m = m1
	}
	if m.pgid < 10 {
		t.Fatalf("only %d pages: the test needs a bigger file", m.pgid)
	}
	return int64(m.pgid) * int64(m.pageSize)
}

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// realisticLists builds n tools of about size bytes each, shaped like
// real tools/list items.
func realisticLists(seed, n, size int) Lists {
	tools := make([]json.RawMessage, n)
	for i := range tools {
		head := fmt.Sprintf(`{"name":"tool_%d_%d","title":"Tool %d","description":"`, seed, i, i)
		tail := `","inputSchema":{"type":"object","properties":{"path":{"type":"string","description":"A path"},` +
			`"limit":{"type":"integer","minimum":1}},"required":["path"]},"annotations":{"readOnlyHint":true}}`
		pad := size - len(head) - len(tail)
		desc := strings.Repeat("Reads a file and returns its contents — ünïcode. ", pad/50+1)[:max(pad, 0)]
		desc = strings.ToValidUTF8(desc, "")
		tools[i] = json.RawMessage(head + desc + tail)
	}
	return Lists{
		Init: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},` +
			`"serverInfo":{"name":"srv","version":"1.2.3"},"instructions":"Call tools."}`),
		Items: map[Kind][]json.RawMessage{Tools: tools, Prompts: {}, Resources: {}},
	}
}
