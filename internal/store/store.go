// Package store is mcpvisor's persisted state: a bbolt file (by default
// $STATE_DIR/state.db) holding, per configured server, the lists mcpvisor
// caches so that a dormant or never-started server still lists its tools —
// the raw items of tools, prompts, resources and resource templates and the
// server's initialize result, kept byte-exact — and a bounded history of
// lifecycle events.
//
// Cache entries are keyed by server name and launch hash (a string the
// caller derives from the server's launch config, config.Server.LaunchHash):
// a lookup with another hash misses and a write with another hash replaces
// the entry, so a config change invalidates what was cached.
//
// The state is a cache: it is never worth failing for. A corrupt or
// unreadable file is logged, moved aside (state.db.corrupt-<time>) and
// replaced by a fresh one, at Open and if a fault shows up later. Open fails
// only when the file cannot be created at all or is in use by another
// mcpvisor (ErrLocked); the caller then runs without a store, which is what
// a nil *Store does: every method of a nil *Store is a no-op that finds
// nothing and returns no error.
//
// A Store is safe for concurrent use. Every write is one bbolt transaction
// and one fsync; PutMany and AppendEvents write many in one.
//
// Next to the state file, <path>.lock is the lock a running mcpvisor holds
// (it records its pid); bbolt's own lock on the state file stays as well.
//
// Layout, one bucket per concern (inspectable with the bbolt CLI):
//
//	meta/schema                       "1"
//	lists/<server>/hash               launch hash
//	lists/<server>/fetched            8-byte big-endian Unix nanoseconds
//	lists/<server>/init               initialize result, raw JSON
//	lists/<server>/<kind>/<index>     one raw JSON item; <index> is 4-byte big-endian
//	events/<seq>                      JSON {time, server, type, details}; <seq> 8-byte big-endian
//	definitions/<server>              JSON: the server's known and approved definitions (Definitions)
//	launches/<server>/hash            launch key (launch.Key) the record is for
//	launches/<server>/record          JSON: how the server's package launcher resolved (Launch)
//
// Items are stored one per key rather than as one encoded value per list so
// that they stay byte-exact and readable and loading them is a copy, not a
// decode (see BenchmarkLoad1000).
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Defaults for Options.
const (
	DefaultLockTimeout = time.Second
	DefaultMaxEvents   = 1000
)

const schemaVersion = "1"

var (
	bucketMeta   = []byte("meta")
	bucketLists  = []byte("lists")
	bucketEvents = []byte("events")
	bucketDefs   = []byte("definitions")
	// bucketLaunches holds, per server run through a package launcher,
	// how it resolved (Launch).
	bucketLaunches = []byte("launches")
	// bucketGone holds, per server no longer configured, when its
	// definitions record was first found so (PruneDefinitions).
	bucketGone = []byte("definitions-gone")
	keySchema  = []byte("schema")
)

var (
	// ErrLocked is returned by Open when the state file is held by another
	// mcpvisor (or another process holding its lock) for longer than
	// Options.LockTimeout.
	ErrLocked = errors.New("in use")
	// ErrClosed is returned by writes after Close.
	ErrClosed = errors.New("store: closed")
	// ErrCorrupt wraps faults found in the file; the store has then already
	// moved the file aside and started a fresh one.
	ErrCorrupt = errors.New("store: state file corrupt")
)

// Options configure Open. The zero value is usable.
type Options struct {
	// LockTimeout bounds how long Open waits for the file lock held by
	// another process (default DefaultLockTimeout).
	LockTimeout time.Duration
	// MaxEvents is how many events the history keeps (default
	// DefaultMaxEvents); older ones are dropped as new ones arrive.
	MaxEvents int
	// Logger reports recovered corruption (default slog.Default()).
	Logger *slog.Logger
}

// Store is an open state file. A nil *Store is a valid, empty, no-op store.
type Store struct {
	path string
	opts Options
	log  *slog.Logger
	lock *os.File // flock'ed path+".lock", held until Close

	// mu guards db: operations hold it shared, Close and recovery
	// exclusively. db is nil after Close or when no fresh file could be
	// made after a fault.
	mu     sync.RWMutex
	db     *bolt.DB
	closed bool
	// lost is set when a reopen closed the file and could not open it
	// again for a reason other than damage (the file system, a lock taken
	// meanwhile): the file is left as it is, and run tries to open it
	// again, at most once every reviveEvery (from lostAt).
	lost   bool
	lostAt time.Time
	// openFault, when set (tests), fails every openDB with its error.
	openFault func() error
}

// reviveEvery is how often an operation tries again to open a file a
// reopen lost.
const reviveEvery = time.Second

// Open opens or creates the state file at path, creating its directory
// (0700) and the file (0600) as needed, and takes an advisory lock on
// path+".lock" (which records the holder's pid and is left in place). If
// another mcpvisor — or another Open in this process — holds the lock,
// Open fails after opts.LockTimeout with an error wrapping ErrLocked that
// names the holder's pid. A corrupt or unreadable file is logged, moved
// aside and replaced. Close releases the file and the lock.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	lock, err := acquire(path, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	s := &Store{path: path, opts: opts, log: log.With("state", path), lock: lock}
	db, err := s.openOrRecover()
	if err != nil {
		release(lock)
		return nil, err
	}
	s.db = db
	return s, nil
}

// Path is the state file's path.
func (s *Store) Path() string {
	if s == nil {
		return ""
	}
	return s.path
}

// Close flushes nothing (every write is already durable), closes the file
// and releases its lock. Operations after Close find nothing and writes
// return ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.db != nil {
		err = protect(s.db.Close)
		s.db = nil
	}
	release(s.lock)
	return err
}

// acquire takes the advisory lock on path+".lock" — held by the running
// mcpvisor for as long as the store is open, including while a corrupt
// state file is moved aside — and writes our pid into it.
func acquire(path string, timeout time.Duration) (*os.File, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("store: lock %s: %w", name, err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, lockedError(path, readPid(name))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Best effort: the pid only makes the error of a second mcpvisor clearer.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func release(f *os.File) {
	if f != nil {
		_ = unlock(f)
		_ = f.Close()
	}
}

func readPid(lockName string) int {
	b, err := os.ReadFile(lockName)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func lockedError(path string, pid int) error {
	who := "another mcpvisor"
	if pid > 0 {
		who += " (pid " + strconv.Itoa(pid) + ")"
	}
	return fmt.Errorf("state file %s is %w by %s", path, ErrLocked, who)
}

// openOrRecover opens the state file; if that fails for any reason but a
// lock held elsewhere, it moves the file aside and starts a fresh one.
func (s *Store) openOrRecover() (*bolt.DB, error) {
	db, err := s.openDB()
	if err == nil || errors.Is(err, ErrLocked) {
		return db, err
	}
	if _, statErr := os.Lstat(s.path); errors.Is(statErr, fs.ErrNotExist) {
		return nil, err // nothing to move aside: the file cannot be created
	}
	aside, mvErr := s.moveAside()
	if mvErr != nil {
		return nil, fmt.Errorf("store: %s unusable (%v) and could not be moved aside: %w", s.path, err, mvErr)
	}
	s.log.Error("state file unusable; moved aside, starting empty", "error", err, "moved_to", aside)
	db, err2 := s.openDB()
	if err2 != nil {
		return nil, fmt.Errorf("store: fresh state file: %w", err2)
	}
	return db, nil
}

// openDB opens the file at s.path if it passes the checks: a sane header
// (preflight), a clean bbolt Open, our schema, and a walk of every page
// the data uses. Any panic or memory fault on the way is an error.
func (s *Store) openDB() (*bolt.DB, error) {
	if s.openFault != nil {
		if err := s.openFault(); err != nil {
			return nil, err
		}
	}
	if err := preflight(s.path); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	var file *os.File
	bopts := &bolt.Options{
		Timeout: s.opts.LockTimeout,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	}
	var db *bolt.DB
	err := protect(func() (err error) {
		db, err = bolt.Open(s.path, 0o600, bopts)
		return err
	})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, lockedError(s.path, 0)
		}
		if db == nil && file != nil && errors.Is(err, ErrCorrupt) {
			_ = file.Close() // bbolt panicked before it could clean up
		}
		return nil, err
	}
	if err := protect(func() error { return db.Update(s.prepare) }); err != nil {
		_ = protect(db.Close)
		return nil, err
	}
	return db, nil
}

// prepare makes the buckets, resets them if they hold another schema, and
// reads every list entry and launch record once so that structural damage
// shows up now, as an error, rather than later.
func (s *Store) prepare(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if v := meta.Get(keySchema); v != nil && string(v) != schemaVersion {
		s.log.Warn("state file has another schema; dropping its contents", "schema", string(v), "want", schemaVersion)
		for _, name := range [][]byte{bucketLists, bucketEvents, bucketDefs, bucketGone, bucketLaunches} {
			if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return err
			}
		}
	}
	if err := meta.Put(keySchema, []byte(schemaVersion)); err != nil {
		return err
	}
	lists, err := tx.CreateBucketIfNotExists(bucketLists)
	if err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(bucketEvents); err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(bucketGone); err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(bucketDefs); err != nil {
		return err
	}
	launches, err := tx.CreateBucketIfNotExists(bucketLaunches)
	if err != nil {
		return err
	}
	var sink byte
	var walk func(b *bolt.Bucket) error
	walk = func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				if sub := b.Bucket(k); sub != nil {
					return walk(sub)
				}
				return nil
			}
			if len(v) > 0 {
				sink ^= v[0] ^ v[len(v)-1] // touch overflow pages too
			}
			return nil
		})
	}
	_ = sink
	if err := walk(lists); err != nil {
		return err
	}
	return walk(launches)
}

// moveAside renames the state file to <path>.corrupt-<UTC time>.
func (s *Store) moveAside() (string, error) {
	base := s.path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")
	name := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			break
		}
		name = base + "-" + strconv.Itoa(i)
	}
	return name, os.Rename(s.path, name)
}

// protect runs fn, turning a panic — bbolt panics on a damaged page — or a
// memory fault — reading a page past the end of a truncated file — into
// an error wrapping ErrCorrupt.
func protect(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrCorrupt, r)
		}
	}()
	return fn()
}

// view and update run fn in a transaction on the current file. A fault
// makes the store replace the file; the operation then fails (a read
// finds nothing).
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	return s.run(false, fn)
}

func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	return s.run(true, fn)
}

func (s *Store) run(write bool, fn func(tx *bolt.Tx) error) error {
	s.mu.RLock()
	db := s.db
	if db == nil {
		closed, lost := s.closed, s.lost
		s.mu.RUnlock()
		if closed {
			return ErrClosed
		}
		if !lost || !s.revive() {
			return fmt.Errorf("%w: no usable state file", ErrCorrupt)
		}
		return s.run(write, fn)
	}
	var err error
	if write {
		err = protect(func() error { return db.Update(fn) })
	} else {
		err = protect(func() error { return db.View(fn) })
	}
	s.mu.RUnlock()
	if errors.Is(err, ErrCorrupt) {
		s.replaceFaulted(db, err)
	}
	return err
}

// reopenPages is how many pages the writes since the file was opened
// must have allocated for reopen to reopen it.
const reopenPages = 1024

// reopen closes the file and opens it again, with the checks of Open,
// once the writes since it was opened allocated reopenPages pages or
// more: bbolt keeps in memory, for as long as the file is open, which
// transaction allocated each page still in use that this process
// allocated (its freelist's allocs) — some 60 to 150 bytes a server after
// learning a fleet, kept for good — and a fresh open starts without. A
// file that cannot be opened for writing now (a file system gone
// read-only) is left open as it is: closing it could not be undone. See
// openAgainLocked for a reopen that fails all the same.
func (s *Store) reopen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		s.reviveLocked()
		return
	}
	if st := s.db.Stats(); st.TxStats.GetPageCount() < reopenPages {
		return
	}
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		s.log.Debug("state file: not reopened, it cannot be opened for writing now", "error", err)
		return
	}
	_ = f.Close()
	old := s.db
	s.db = nil
	if err := protect(old.Close); err != nil {
		s.log.Warn("state file: closing it to reopen it", "error", err)
	}
	s.openAgainLocked()
}

// openAgainLocked opens the file again after this process closed it
// (s.mu held). A damaged file is moved aside and replaced, as at Open;
// any other failure leaves the file as it is and the store without it
// (lost) until an operation, or ReleaseMemory, tries again (revive).
func (s *Store) openAgainLocked() {
	db, err := s.openDB()
	if errors.Is(err, ErrCorrupt) {
		db, err = s.openOrRecover()
	}
	if err != nil {
		if !s.lost {
			s.log.Error("state file could not be opened again; trying again as it is used", "error", err)
		}
		s.lost, s.lostAt = true, time.Now()
		return
	}
	s.db, s.lost = db, false
}

// revive tries to open again a file a reopen lost, at most once every
// reviveEvery; it reports whether the store has a file.
func (s *Store) revive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reviveLocked()
	return s.db != nil
}

func (s *Store) reviveLocked() {
	if s.db == nil && s.lost && !s.closed && time.Since(s.lostAt) >= reviveEvery {
		s.openAgainLocked()
	}
}

// replaceFaulted moves aside a file that faulted while in use and opens a
// fresh one, unless another goroutine already did.
func (s *Store) replaceFaulted(bad *bolt.DB, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db != bad {
		return
	}
	_ = protect(bad.Close)
	s.db = nil
	aside, err := s.moveAside()
	if err != nil {
		s.log.Error("state file faulted and could not be moved aside; running without it", "error", cause, "move_error", err)
		return
	}
	s.log.Error("state file faulted; moved aside, starting empty", "error", cause, "moved_to", aside)
	db, err := s.openDB()
	if err != nil {
		s.log.Error("fresh state file unusable; running without it", "error", err)
		return
	}
	s.db = db
}
