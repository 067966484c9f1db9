//go:build unix

package testserver

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fileLines waits until the file at path has at least n lines and returns
// them all.
func fileLines(t *testing.T, path string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		b, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(b) == 0 {
			lines = nil
		}
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d lines after %v, want %d: %q", path, len(lines), waitLong, n, b)
		}
		time.Sleep(20 * time.Millisecond) // polling for lines to come
	}
}

var (
	lockedLine = regexp.MustCompile(`^locked pid=(\d+) time=(\S+)$`)
	failedLine = regexp.MustCompile(`^flock failed pid=(\d+) time=(\S+) err=(.+)$`)
)

// parseLockLine checks line against re and returns its pid and time.
func parseLockLine(t *testing.T, re *regexp.Regexp, line string) (int, time.Time) {
	t.Helper()
	m := re.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("line %q does not match %s", line, re)
	}
	pid, _ := strconv.Atoi(m[1])
	at, err := time.Parse(time.RFC3339Nano, m[2])
	if err != nil {
		t.Fatalf("line %q: time: %v", line, err)
	}
	return pid, at
}

func (p *fixtureProc) whoami(id int) string {
	p.t.Helper()
	p.send(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"whoami"}}`, id)
	return callText(p.t, p.next(), strconv.Itoa(id))
}

// Two fixtures with one -flock file: the second records that the lock is
// held, and takes it (and answers initialize) only once the first has
// exited.
func TestProcessFlock(t *testing.T) {
	t.Parallel()
	lock := filepath.Join(t.TempDir(), "replica.lock")
	first := startFixture(t, NewMarker(t), []string{"FIXTURE_TAG=first"}, "-flock", lock)
	first.initialize() // answered: it holds the lock
	if got, want := first.whoami(1), fmt.Sprintf("pid=%d tag=first", first.cmd.Process.Pid); got != want {
		t.Errorf("whoami = %q, want %q", got, want)
	}
	log := fileLines(t, lock+".log", 1)
	if pid, _ := parseLockLine(t, lockedLine, log[0]); pid != first.cmd.Process.Pid {
		t.Fatalf("lock log %q, want the first fixture's pid %d", log, first.cmd.Process.Pid)
	}

	second := startFixture(t, NewMarker(t), []string{"FIXTURE_TAG=second"}, "-flock", lock)
	second.send(initReq, "0", "2025-06-18")
	failures := fileLines(t, lock+".failures", 1)
	m := failedLine.FindStringSubmatch(failures[0])
	if len(failures) != 1 || m == nil || m[1] != strconv.Itoa(second.cmd.Process.Pid) || !strings.Contains(m[3], "temporarily unavailable") && !strings.Contains(m[3], "would block") {
		t.Fatalf("failures %q, want one line of the second fixture's (pid %d) saying the lock is held", failures, second.cmd.Process.Pid)
	}
	_, failedAt := parseLockLine(t, failedLine, failures[0])

	// The second is waiting: it has not locked, and (as far as can be
	// seen now) not answered.
	release := time.Now()
	if log := fileLines(t, lock+".log", 1); len(log) != 1 {
		t.Fatalf("lock log %q while the first fixture runs, want its line alone", log)
	}
	select {
	case line := <-second.lines:
		t.Fatalf("the second fixture answered while the first held the lock: %s", line)
	default:
	}
	first.stdin.Close()
	first.mustExit(0)

	var r map[string]any
	result(t, second.next(), "0", &r) // initialize, answered now
	log = fileLines(t, lock+".log", 2)
	pid, lockedAt := parseLockLine(t, lockedLine, log[1])
	if len(log) != 2 || pid != second.cmd.Process.Pid {
		t.Fatalf("lock log %q, want the second fixture's (pid %d) line after the first's", log, second.cmd.Process.Pid)
	}
	if !failedAt.Before(release) || !lockedAt.After(release) {
		t.Errorf("the second fixture failed at %v and locked at %v; the first was ended at %v, between them", failedAt, lockedAt, release)
	}
	if got, want := second.whoami(1), fmt.Sprintf("pid=%d tag=second", second.cmd.Process.Pid); got != want {
		t.Errorf("whoami = %q, want %q", got, want)
	}
}

// A -flock file that cannot be opened ends the fixture with code 1.
func TestFlockUnopenable(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	path := filepath.Join(t.TempDir(), "missing", "x.lock")
	if code := Main([]string{"-flock", path}, strings.NewReader(""), io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "-flock") {
		t.Errorf("Main -flock %s = %d, stderr %q; want 1 and a line about -flock", path, code, stderr.String())
	}
}
