package secret

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zalando/go-keyring"
)

// helperEnv, when set, makes this test binary a helper process (see
// TestHelperSet and TestHelperKeyring).
const helperEnv = "MCPVISOR_SECRET_HELPER"

func checkStore(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Get(ctx, "gh-token"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an absent secret: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "gh-token"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete of an absent secret: %v, want ErrNotFound", err)
	}
	for name, v := range map[string]string{"gh-token": "v1", "oauth/linear": `{"a":1}`, "github.GITHUB_TOKEN": "x\ny"} {
		if err := s.Set(ctx, name, v); err != nil {
			t.Fatalf("Set %s: %v", name, err)
		}
	}
	if err := s.Set(ctx, "gh-token", "v2"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "gh-token"); err != nil || v != "v2" {
		t.Fatalf("Get = %q, %v; want v2", v, err)
	}
	if v, err := s.Get(ctx, "github.GITHUB_TOKEN"); err != nil || v != "x\ny" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	names, err := s.List(ctx)
	if err != nil || !slices.Equal(names, []string{"gh-token", "github.GITHUB_TOKEN", "oauth/linear"}) {
		t.Fatalf("List = %q, %v", names, err)
	}
	if err := s.Delete(ctx, "gh-token"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "gh-token"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if names, _ := s.List(ctx); slices.Contains(names, "gh-token") {
		t.Fatalf("List after Delete = %q", names)
	}
	if err := s.Set(ctx, "bad name", "x"); err == nil {
		t.Fatal("Set of a bad name: no error")
	}
}

func TestFileStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := OpenFile(dir)
	if got, want := s.Backend(), "file "+filepath.Join(dir, FileName)+" (0600)"; got != want {
		t.Errorf("Backend = %q, want %q", got, want)
	}
	checkStore(t, s)
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v, %v; want 0700", fi.Mode(), err)
	}
	fi, err = os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secret file mode %v, %v; want 0600", fi.Mode(), err)
	}
	// A file others may read is refused, for reading and for writing.
	if err := os.Chmod(filepath.Join(dir, FileName), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "oauth/linear"); err == nil || !strings.Contains(err.Error(), "has mode 0644: others may read it") {
		t.Errorf("Get of a 0644 file: %v", err)
	}
	if err := s.Set(context.Background(), "x", "y"); err == nil || !strings.Contains(err.Error(), "has mode 0644") {
		t.Errorf("Set into a 0644 file: %v", err)
	}
}

func TestFileStoreConcurrentGoroutines(t *testing.T) {
	dir := t.TempDir()
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Each its own Store, as separate commands would be.
			if err := OpenFile(dir).Set(context.Background(), fmt.Sprintf("s%02d", i), "v"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	names, err := OpenFile(dir).List(context.Background())
	if err != nil || len(names) != n {
		t.Fatalf("%d of %d secrets kept (%v): %q", len(names), n, err, names)
	}
}

// TestFileStoreConcurrentProcesses has two processes set secrets into one
// file at once: the lock keeps every one.
func TestFileStoreConcurrentProcesses(t *testing.T) {
	dir := t.TempDir()
	const perProc = 30
	var cmds []*exec.Cmd
	for p := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSet$")
		cmd.Env = append(os.Environ(), helperEnv+"=set", "HELPER_DIR="+dir, fmt.Sprintf("HELPER_PREFIX=p%d-", p), fmt.Sprintf("HELPER_N=%d", perProc))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("helper output: %s", out.String())
			}
		})
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper: %v", err)
		}
	}
	names, err := OpenFile(dir).List(context.Background())
	if err != nil || len(names) != 2*perProc {
		t.Fatalf("%d of %d secrets kept (%v)", len(names), 2*perProc, err)
	}
}

// TestHelperSet is the child of TestFileStoreConcurrentProcesses; run
// alone it does nothing.
func TestHelperSet(t *testing.T) {
	if os.Getenv(helperEnv) != "set" {
		return
	}
	s := OpenFile(os.Getenv("HELPER_DIR"))
	var n int
	fmt.Sscan(os.Getenv("HELPER_N"), &n)
	for i := range n {
		if err := s.Set(context.Background(), fmt.Sprintf("%s%02d", os.Getenv("HELPER_PREFIX"), i), "v"); err != nil {
			t.Fatal(err)
		}
	}
}

// hangingKeyring never answers, as a locked keyring whose unlock prompt
// nobody answers.
type hangingKeyring struct{ release chan struct{} }

func (h hangingKeyring) Get(string, string) (string, error) {
	<-h.release
	return "", errors.New("late")
}
func (h hangingKeyring) Set(string, string, string) error { <-h.release; return errors.New("late") }
func (h hangingKeyring) Delete(string, string) error      { <-h.release; return errors.New("late") }

func TestKeyringCallsBounded(t *testing.T) {
	h := hangingKeyring{release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	dir := t.TempDir()
	if k, err := openKeyring(dir, h, 50*time.Millisecond); k != nil || err == nil {
		t.Fatal("Open's probe chose a keyring that does not answer")
	}
	k := newKeyringStore(dir, h, 50*time.Millisecond)
	start := time.Now()
	_, err := k.Get(context.Background(), "x")
	if err == nil || !strings.Contains(err.Error(), "did not answer within 50ms (is it locked?)") {
		t.Fatalf("Get of a hanging keyring: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Get took %v", d)
	}
	for range maxStuck {
		_ = k.Set(context.Background(), "x", "y")
	}
	// Past the bound of stuck calls, a call fails at once.
	if err := k.Delete(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("Delete with %d stuck calls: %v", maxStuck, err)
	}
	if n := k.stuck.Load(); n > maxStuck+1 {
		t.Fatalf("%d calls stuck, want at most %d", n, maxStuck+1)
	}
	// Once the keyring answers, the calls left running are no longer
	// counted, and calls work again.
	close(h.release)
	released = true
	deadline := time.Now().Add(10 * time.Second)
	for k.stuck.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still counted stuck after the keyring answered", k.stuck.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// barrierKeyring answers each call only once n calls are in at the same
// time (or after limit): a healthy keyring serving concurrent callers.
type barrierKeyring struct {
	all   chan struct{}
	n     int
	count *int
	mu    *sync.Mutex
}

func newBarrierKeyring(n int) barrierKeyring {
	return barrierKeyring{all: make(chan struct{}), n: n, count: new(int), mu: new(sync.Mutex)}
}

func (b barrierKeyring) wait() {
	b.mu.Lock()
	*b.count++
	if *b.count == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(10 * time.Second):
	}
}

func (b barrierKeyring) Get(string, string) (string, error) { b.wait(); return "v", nil }
func (b barrierKeyring) Set(string, string, string) error   { b.wait(); return nil }
func (b barrierKeyring) Delete(string, string) error        { b.wait(); return nil }

// Many healthy calls in flight at once are no stuck calls: all succeed.
func TestKeyringConcurrentHealthyCalls(t *testing.T) {
	const n = 2*maxStuck + 1
	k := newKeyringStore(t.TempDir(), newBarrierKeyring(n), 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := k.Get(context.Background(), "x")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Get of a healthy keyring: %v", err)
		}
	}
	if s := k.stuck.Load(); s != 0 {
		t.Errorf("%d calls counted stuck after all answered", s)
	}
}

// inSession runs this test binary's test named run under a private D-Bus
// session with gnome-keyring's Secret Service, unlocked or not, with HOME
// in a temporary directory; it returns the output.
func inSession(t *testing.T, run string, unlock bool) (string, error) {
	t.Helper()
	for _, prog := range []string{"dbus-run-session", "gnome-keyring-daemon"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Fatalf("%s is missing: run scripts/test-deps.sh (it installs gnome-keyring)", prog)
		}
	}
	home := t.TempDir()
	flags := "--daemonize --components=secrets"
	if unlock {
		flags += " --unlock"
	}
	script := `mkdir -m 700 "$XDG_RUNTIME_DIR" && printf %s test-password | gnome-keyring-daemon ` + flags + ` >/dev/null && exec "$0" -test.run="$1" -test.v`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "dbus-run-session", "--", "sh", "-c", script, os.Args[0], run)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+filepath.Join(home, "run"),
		"XDG_DATA_HOME="+filepath.Join(home, "data"), helperEnv+"=keyring", "HELPER_DIR="+filepath.Join(home, "state"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestKeyringSecretService runs the Store checks against a real Secret
// Service (gnome-keyring), chosen by Open.
func TestKeyringSecretService(t *testing.T) {
	out, err := inSession(t, "^TestHelperKeyring$", true)
	if err != nil || !strings.Contains(out, "keyring store checked") {
		t.Fatalf("under dbus-run-session: %v\n%s", err, out)
	}
}

// TestKeyringLocked: a locked keyring is not chosen by Open, and a call
// on it ends with an error within its bound.
func TestKeyringLocked(t *testing.T) {
	out, err := inSession(t, "^TestHelperKeyringLocked$", false)
	if err != nil || !strings.Contains(out, "locked keyring checked") {
		t.Fatalf("under dbus-run-session: %v\n%s", err, out)
	}
}

// TestHelperKeyring is TestKeyringSecretService's child; run alone it
// does nothing.
func TestHelperKeyring(t *testing.T) {
	if os.Getenv(helperEnv) != "keyring" {
		return
	}
	dir := os.Getenv("HELPER_DIR")
	s := OpenWith(dir, Options{Timeout: 10 * time.Second})
	if s.Backend() != "Secret Service keyring" {
		t.Fatalf("Open chose %s", s.Backend())
	}
	checkStore(t, s)
	// The values are in the keyring, not in a file.
	if _, err := os.Stat(filepath.Join(dir, FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("secrets.json exists beside a keyring: %v", err)
	}
	idx, err := os.ReadFile(filepath.Join(dir, IndexName))
	if err != nil || strings.Contains(string(idx), "x\\ny") || !strings.Contains(string(idx), "oauth/linear") {
		t.Fatalf("index %q, %v", idx, err)
	}
	// A value past one item's size (an OAuth record with long tokens)
	// goes in parts and comes back whole.
	big := strings.Repeat("0123456789abcdef", 640) // 10 KiB
	if err := s.Set(context.Background(), "oauth/big", big); err != nil {
		t.Fatalf("Set of 10 KiB: %v", err)
	}
	if v, err := s.Get(context.Background(), "oauth/big"); err != nil || v != big {
		t.Fatalf("Get of 10 KiB: %d bytes, %v", len(v), err)
	}
	if err := s.Delete(context.Background(), "oauth/big"); err != nil {
		t.Fatal(err)
	}
	// A second store (another process's) reads what the first set.
	if v, err := OpenWith(dir, Options{}).Get(context.Background(), "oauth/linear"); err != nil || v != `{"a":1}` {
		t.Fatalf("Get from a second store = %q, %v", v, err)
	}
	fmt.Println("keyring store checked")
}

// TestHelperKeyringLocked is TestKeyringLocked's child.
func TestHelperKeyringLocked(t *testing.T) {
	if os.Getenv(helperEnv) != "keyring" {
		return
	}
	dir := os.Getenv("HELPER_DIR")
	const bound = 3 * time.Second
	start := time.Now()
	s := OpenWith(dir, Options{Timeout: bound})
	if d := time.Since(start); d > bound+time.Second {
		t.Fatalf("Open took %v", d)
	}
	if !strings.HasPrefix(s.Backend(), "file ") {
		t.Fatalf("Open chose %s for a locked keyring", s.Backend())
	}
	k := newKeyringStore(dir, osKeyring{}, bound)
	start = time.Now()
	err := k.Set(context.Background(), "x", "y")
	if err == nil {
		t.Fatal("Set into a locked keyring: no error")
	}
	if d := time.Since(start); d > bound+time.Second {
		t.Fatalf("Set took %v", d)
	}
	t.Logf("Set: %v", err)
	fmt.Println("locked keyring checked")
}

// sizedKeyring is an in-memory keyring that refuses values past a size,
// as Windows' (2560 bytes) and macOS's (a 4096-byte command line) do, and
// whose Set fails from its failAt-th call on, when set.
type sizedKeyring struct {
	mu     sync.Mutex
	items  map[string]string
	limit  int
	sets   int
	failAt int
}

func (k *sizedKeyring) Get(_, u string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.items[u]
	if !ok {
		return "", keyring.ErrNotFound
	}
	return v, nil
}

func (k *sizedKeyring) Set(_, u, p string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sets++
	if k.failAt > 0 && k.sets >= k.failAt {
		return errors.New("the keyring went away")
	}
	if len(p) > k.limit {
		return keyring.ErrSetDataTooBig
	}
	k.items[u] = p
	return nil
}

func (k *sizedKeyring) Delete(_, u string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.items[u]; !ok {
		return keyring.ErrNotFound
	}
	delete(k.items, u)
	return nil
}

func (k *sizedKeyring) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.items)
}

// A value longer than a keyring item holds is kept in parts: it comes
// back whole; a smaller value written over it leaves no part behind; a
// Set cut short leaves the old value whole; Delete removes every part.
func TestKeyringValuesInParts(t *testing.T) {
	ctx := context.Background()
	api := &sizedKeyring{items: map[string]string{}, limit: 2560}
	k := newKeyringStore(t.TempDir(), api, time.Second)
	big := strings.Repeat("x", 3*maxItem+5)
	if err := k.Set(ctx, "oauth/s", big); err != nil {
		t.Fatal(err)
	}
	if v, err := k.Get(ctx, "oauth/s"); err != nil || v != big {
		t.Fatalf("Get: %d bytes, %v", len(v), err)
	}
	if n := api.count(); n != 5 { // the head and four parts
		t.Fatalf("%d items, want 5", n)
	}
	// A new big value: a new generation, the old one's parts removed.
	bigger := strings.Repeat("y", 2*maxItem)
	if err := k.Set(ctx, "oauth/s", bigger); err != nil {
		t.Fatal(err)
	}
	if v, _ := k.Get(ctx, "oauth/s"); v != bigger || api.count() != 3 {
		t.Fatalf("after a second Set: %d bytes, %d items", len(v), api.count())
	}
	// Cut short while writing the parts: the old value stays whole.
	api.failAt = api.sets + 2
	if err := k.Set(ctx, "oauth/s", big); err == nil || !strings.Contains(err.Error(), "part 2 of 4") {
		t.Fatalf("Set cut short: %v", err)
	}
	if v, _ := k.Get(ctx, "oauth/s"); v != bigger {
		t.Fatal("a Set cut short lost the old value")
	}
	if n := api.count(); n != 3 {
		t.Fatalf("a Set cut short left %d items, want 3", n)
	}
	api.failAt = 0
	// A small value over a big one: one item left.
	if err := k.Set(ctx, "oauth/s", "small"); err != nil {
		t.Fatal(err)
	}
	if v, _ := k.Get(ctx, "oauth/s"); v != "small" || api.count() != 1 {
		t.Fatalf("after a small Set: %q, %d items", v, api.count())
	}
	if err := k.Set(ctx, "oauth/s", big); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(ctx, "oauth/s"); err != nil || api.count() != 0 {
		t.Fatalf("Delete: %v, %d items left", err, api.count())
	}
	// A value that looks like a head is refused, not misread.
	if err := k.Set(ctx, "x", headPrefix+"abc:2"); err == nil {
		t.Fatal("a value shaped like a head was taken")
	}
}

// LazyReport opens the store at its first use, not before, and says once
// which back end it chose and why not the keyring.
func TestLazyReportSaysWhichOnce(t *testing.T) {
	dir := t.TempDir()
	var reports []string
	s := LazyReport(dir, Options{NoKeyring: true}, func(backend, why string) { reports = append(reports, backend+": "+why) })
	if len(reports) != 0 {
		t.Fatalf("reported before any use: %v", reports)
	}
	if err := s.Set(context.Background(), "a", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || !strings.HasPrefix(reports[0], "file ") || !strings.Contains(reports[0], "not to be used") {
		t.Fatalf("reports %q, want one naming the file and why", reports)
	}
}
