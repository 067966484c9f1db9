package secret

import (
	"context"
	"errors"
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
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if !opts.NoKeyring {
		if k := openKeyring(stateDir, osKeyring{}, opts.Timeout); k != nil {
			return k
		}
	}
	return OpenFile(stateDir)
}
