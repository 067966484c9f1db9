package secret

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zalando/go-keyring"
)

// Service is the keyring service under which mcpvisor's secrets are kept
// (the user name of each item is the secret's name).
const Service = "mcpvisor"

// IndexName is the file in the state directory that lists the names of
// the secrets kept in the keyring: go-keyring cannot list a service's
// items. It holds names only.
const IndexName = "secrets-index.json"

// probeName is looked up by Open's probe; it is never set (':' is no
// valid secret name).
const probeName = "mcpvisor:probe"

// maxStuck bounds the keyring calls left running after their timeout: a
// keyring that hangs (an unlock prompt nobody answers) holds that many
// goroutines (plus those of callers already waiting when the bound was
// reached); later calls fail at once until the keyring answers again.
const maxStuck = 4

// keyringAPI is go-keyring's API (a test swaps in one that hangs).
type keyringAPI interface {
	Get(service, user string) (string, error)
	Set(service, user, password string) error
	Delete(service, user string) error
}

type osKeyring struct{}

func (osKeyring) Get(s, u string) (string, error) { return keyring.Get(s, u) }
func (osKeyring) Set(s, u, p string) error        { return keyring.Set(s, u, p) }
func (osKeyring) Delete(s, u string) error        { return keyring.Delete(s, u) }

// keyringStore keeps secrets in the OS keyring, every call bounded by
// timeout, and their names in an index file.
type keyringStore struct {
	api     keyringAPI
	timeout time.Duration
	dir     string
	index   string
	name    string
	stuck   atomic.Int32
}

// keyringName is the keyring of this OS, for people.
func keyringName() string {
	switch runtime.GOOS {
	case "darwin":
		return "macOS Keychain"
	case "windows":
		return "Windows Credential Manager"
	}
	return "Secret Service keyring"
}

// openKeyring returns the keyring store if the keyring answers a probe
// within timeout, else nil and why not.
func openKeyring(stateDir string, api keyringAPI, timeout time.Duration) (*keyringStore, error) {
	if err := keyringPossible(); err != nil {
		return nil, err
	}
	k := newKeyringStore(stateDir, api, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := k.call(ctx, func() (string, error) { return k.api.Get(Service, probeName) }); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return k, nil
}

func newKeyringStore(stateDir string, api keyringAPI, timeout time.Duration) *keyringStore {
	return &keyringStore{api: api, timeout: timeout, dir: stateDir,
		index: filepath.Join(stateDir, IndexName), name: keyringName()}
}

func (k *keyringStore) Backend() string { return k.name }

// call runs fn in a goroutine bounded by ctx and the store's timeout,
// mapping go-keyring's not-found to ErrNotFound. A call whose caller
// stopped waiting is counted stuck until fn returns; calls answered in
// time are not counted, so any number of healthy calls may be in flight.
func (k *keyringStore) call(ctx context.Context, fn func() (string, error)) (string, error) {
	if n := k.stuck.Load(); n >= maxStuck {
		return "", fmt.Errorf("the %s does not answer (%d calls still waiting; is it locked?)", k.name, n)
	}
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	type result struct {
		v   string
		err error
	}
	done := make(chan result, 1)
	var mu sync.Mutex
	finished, abandoned := false, false
	go func() {
		v, err := fn()
		mu.Lock()
		finished = true
		if abandoned {
			k.stuck.Add(-1)
		}
		mu.Unlock()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if errors.Is(r.err, keyring.ErrNotFound) {
			return "", ErrNotFound
		}
		if r.err != nil {
			return "", fmt.Errorf("%s: %v", k.name, r.err)
		}
		return r.v, nil
	case <-ctx.Done():
		mu.Lock()
		if !finished {
			abandoned = true
			k.stuck.Add(1)
		}
		mu.Unlock()
		return "", fmt.Errorf("the %s did not answer within %v (is it locked?): %w", k.name, k.timeout, ctx.Err())
	}
}

func (k *keyringStore) Get(ctx context.Context, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	v, err := k.getItem(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return "", fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	h, ok := parseHead(v)
	if !ok {
		return v, nil
	}
	var b strings.Builder
	for i := range h.parts {
		p, err := k.getItem(ctx, partName(name, h.gen, i))
		if err != nil {
			return "", fmt.Errorf("secret %s: part %d of %d: %w", name, i+1, h.parts, err)
		}
		b.WriteString(p)
	}
	return b.String(), nil
}

func (k *keyringStore) getItem(ctx context.Context, item string) (string, error) {
	return k.call(ctx, func() (string, error) { return k.api.Get(Service, item) })
}

func (k *keyringStore) setItem(ctx context.Context, item, value string) error {
	_, err := k.call(ctx, func() (string, error) { return "", k.api.Set(Service, item, value) })
	if errors.Is(err, keyring.ErrSetDataTooBig) {
		return fmt.Errorf("too big for the %s", k.name)
	}
	return err
}

func (k *keyringStore) deleteItem(ctx context.Context, item string) error {
	_, err := k.call(ctx, func() (string, error) { return "", k.api.Delete(Service, item) })
	return err
}

// Set keeps value under name. A value longer than maxItem (an OAuth
// record with long tokens: macOS takes about 2.9 KB an item, Windows
// 2.5 KB) is kept in parts, and name's own item says where: the parts of
// a new generation are written first and the head last, so a Set cut
// short leaves the old value whole, and the old generation's parts are
// removed after.
func (k *keyringStore) Set(ctx context.Context, name, value string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	var old head
	switch v, err := k.getItem(ctx, name); {
	case err == nil:
		old, _ = parseHead(v)
	case !errors.Is(err, ErrNotFound):
		return fmt.Errorf("secret %s: %w", name, err) // no Set would answer either
	}
	item := value
	if len(value) > maxItem {
		h := head{gen: newGeneration(), parts: (len(value) + maxItem - 1) / maxItem}
		for i := range h.parts {
			part := value[i*maxItem : min(len(value), (i+1)*maxItem)]
			if err := k.setItem(ctx, partName(name, h.gen, i), part); err != nil {
				k.deleteParts(ctx, name, head{gen: h.gen, parts: i})
				return fmt.Errorf("secret %s: part %d of %d: %w", name, i+1, h.parts, err)
			}
		}
		item = h.String()
	} else if _, ok := parseHead(value); ok {
		return fmt.Errorf("secret %s: a value may not begin with %q", name, headPrefix)
	}
	if err := k.setItem(ctx, name, item); err != nil {
		if h, ok := parseHead(item); ok {
			k.deleteParts(ctx, name, h)
		}
		return fmt.Errorf("secret %s: %w", name, err)
	}
	k.deleteParts(ctx, name, old)
	return k.updateIndex(ctx, func(m map[string]string) { m[name] = "" })
}

// deleteParts removes the parts of generation h of name, as far as it
// can (a part left behind holds part of a value nothing points to).
func (k *keyringStore) deleteParts(ctx context.Context, name string, h head) {
	for i := range h.parts {
		_ = k.deleteItem(ctx, partName(name, h.gen, i))
	}
}

func (k *keyringStore) Delete(ctx context.Context, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	var old head
	if v, err := k.getItem(ctx, name); err == nil {
		old, _ = parseHead(v)
	}
	err := k.deleteItem(ctx, name)
	if errors.Is(err, ErrNotFound) {
		// Gone from the keyring (someone removed it there): gone from
		// the index too, but still reported.
		_ = k.updateIndex(ctx, func(m map[string]string) { delete(m, name) })
		return fmt.Errorf("secret %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return err
	}
	k.deleteParts(ctx, name, old)
	return k.updateIndex(ctx, func(m map[string]string) { delete(m, name) })
}

// maxItem is the longest value kept in one keyring item; longer ones are
// kept in parts of this size (macOS's limit is on the base64 of the value
// in a 4096-byte command line; Windows', 2560 bytes).
const maxItem = 1800

// headPrefix begins the item of a value kept in parts.
const headPrefix = "mcpvisor-parts:v1:"

// head is what the item of a value kept in parts holds: the generation
// of its parts and how many there are.
type head struct {
	gen   string
	parts int
}

func (h head) String() string { return headPrefix + h.gen + ":" + strconv.Itoa(h.parts) }

func parseHead(v string) (head, bool) {
	rest, ok := strings.CutPrefix(v, headPrefix)
	if !ok {
		return head{}, false
	}
	gen, n, ok := strings.Cut(rest, ":")
	parts, err := strconv.Atoi(n)
	if !ok || err != nil || parts < 1 || gen == "" {
		return head{}, false
	}
	return head{gen: gen, parts: parts}, true
}

// partName is the item of part i of generation gen of name: ':' is in no
// secret's name, so no part is ever another secret.
func partName(name, gen string, i int) string {
	return name + ":part:" + gen + ":" + strconv.Itoa(i)
}

func newGeneration() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (k *keyringStore) List(ctx context.Context) ([]string, error) {
	m, err := readJSONFile(k.index)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// updateIndex changes the index of names under the store's lock.
func (k *keyringStore) updateIndex(ctx context.Context, fn func(map[string]string)) error {
	unlock, err := lockDir(ctx, k.dir, k.index+".lock")
	if err != nil {
		return err
	}
	defer unlock()
	m, err := readJSONFile(k.index)
	if err != nil {
		return err
	}
	fn(m)
	return writeJSONFile(k.index, m)
}
