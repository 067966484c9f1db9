package secret

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNotFound is wrapped by the error of a Get or Delete of a name the
// store does not hold.
var ErrNotFound = errors.New("not found")

// Store keeps named secrets. Every method is bounded: a keyring that
// does not answer (a locked one waiting on an unlock prompt) gives an
// error, never a hang.
type Store interface {
	Get(ctx context.Context, name string) (string, error) // ErrNotFound wrapped
	Set(ctx context.Context, name, value string) error
	Delete(ctx context.Context, name string) error // ErrNotFound wrapped if absent
	List(ctx context.Context) ([]string, error)    // names only, sorted
	// Backend names where the secrets are, for people:
	// "Secret Service keyring", "macOS Keychain",
	// "file /path/secrets.json (0600)".
	Backend() string
}

// Setter is what storing one secret takes (import --move-secrets).
type Setter interface {
	Set(ctx context.Context, name, value string) error
}

// DefaultTimeout bounds each keyring call, and the probe Open makes.
const DefaultTimeout = 5 * time.Second

// Options tune OpenWith.
type Options struct {
	// Timeout bounds each keyring call (default DefaultTimeout).
	Timeout time.Duration
	// NoKeyring uses the file even where a keyring answers.
	NoKeyring bool
}

// Open returns the OS keyring when it is usable — on Linux, a session bus
// is there and the Secret Service answers a probe within the timeout —
// else the file <stateDir>/secrets.json. Either way the names are listed
// from an index in stateDir.
func Open(stateDir string) Store { return OpenWith(stateDir, Options{}) }

// OpenWith is Open with options.
func OpenWith(stateDir string, opts Options) Store {
	s, _ := OpenReport(stateDir, opts)
	return s
}

// OpenReport is OpenWith, and says why the keyring is not used when it
// is not (for doctor): "" when it is.
func OpenReport(stateDir string, opts Options) (Store, string) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.NoKeyring {
		return OpenFile(stateDir), "the keyring is not to be used"
	}
	k, err := openKeyring(stateDir, osKeyring{}, opts.Timeout)
	if err != nil {
		return OpenFile(stateDir), err.Error()
	}
	return k, ""
}

// LazyReport is OpenWith(stateDir, opts) made at the first call of one of
// its methods (and Backend), not before: serve starts without waiting for
// the keyring's probe, and pays for it only when a server refers to a
// secret. It tells report (if set) once, when the store is opened, which
// back end it is and why the keyring is not used when it is not ("" when
// it is): a serve whose keyring did not answer its probe keeps the file
// for its life, and says so in its log.
func LazyReport(stateDir string, opts Options, report func(backend, why string)) Store {
	return &lazyStore{open: func() Store {
		s, why := OpenReport(stateDir, opts)
		if report != nil {
			report(s.Backend(), why)
		}
		return s
	}}
}

type lazyStore struct {
	once sync.Once
	open func() Store
	s    Store
}

func (l *lazyStore) get() Store {
	l.once.Do(func() { l.s = l.open() })
	return l.s
}

func (l *lazyStore) Get(ctx context.Context, name string) (string, error) {
	return l.get().Get(ctx, name)
}
func (l *lazyStore) Set(ctx context.Context, name, value string) error {
	return l.get().Set(ctx, name, value)
}
func (l *lazyStore) Delete(ctx context.Context, name string) error {
	return l.get().Delete(ctx, name)
}
func (l *lazyStore) List(ctx context.Context) ([]string, error) { return l.get().List(ctx) }
func (l *lazyStore) Backend() string                            { return l.get().Backend() }
