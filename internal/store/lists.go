package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Kind is a list a server serves, named as the member of its list result
// that holds the items.
type Kind string

const (
	Tools             Kind = "tools"             // tools/list
	Prompts           Kind = "prompts"           // prompts/list
	Resources         Kind = "resources"         // resources/list
	ResourceTemplates Kind = "resourceTemplates" // resources/templates/list
)

// kinds are all the kinds, in the order they are read and written.
var kinds = [...]Kind{Tools, Prompts, Resources, ResourceTemplates}

// Valid reports whether k is one of kinds.
func (k Kind) Valid() bool {
	for _, x := range kinds {
		if k == x {
			return true
		}
	}
	return false
}

var (
	keyHash    = []byte("hash")
	keyFetched = []byte("fetched")
	keyInit    = []byte("init")
)

// Lists is what is cached about one server. Items and Init are stored and
// returned byte for byte; the store does not parse or validate them.
type Lists struct {
	// Init is the server's initialize result (capabilities, serverInfo,
	// instructions, …); nil when none was stored.
	Init json.RawMessage
	// Items holds the items of each list that was fetched. A kind present
	// with no items was fetched and is empty; an absent kind was never
	// fetched (or the server does not offer it).
	Items map[Kind][]json.RawMessage
	// Fetched is when the entry was last written: the value given to
	// PutLists (time.Now() if zero), or the time of the last PutList or
	// PutInit.
	Fetched time.Time
}

// Get returns the items of kind k and whether that list was fetched.
func (l Lists) Get(k Kind) ([]json.RawMessage, bool) {
	items, ok := l.Items[k]
	return items, ok
}

// Entry is one server's lists, for PutMany.
type Entry struct {
	Server, Hash string
	Lists        Lists
}

// Lists returns what is cached for server under launch hash. It reports
// false when nothing is, when the entry was written with another hash, on a
// nil or closed store, and on a read error (which is logged).
func (s *Store) Lists(server, hash string) (Lists, bool) {
	if s == nil {
		return Lists{}, false
	}
	var l Lists
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLists).Bucket([]byte(server))
		if b == nil || !bytes.Equal(b.Get(keyHash), []byte(hash)) {
			return nil
		}
		l, ok = readLists(b), true
		return nil
	})
	if err != nil {
		s.readFailed("lists", err)
		return Lists{}, false
	}
	return l, ok
}

// Load returns, in one transaction, the cached lists of every server in
// want (name → launch hash) whose entry has that hash. Servers without a
// matching entry are absent from the result. It is how mcpvisor fills its
// catalog at start.
func (s *Store) Load(want map[string]string) map[string]Lists {
	out := make(map[string]Lists, len(want))
	err := s.eachEntry(want, func(name string, b *bolt.Bucket) { out[name] = readLists(b) })
	if err != nil {
		s.readFailed("load", err)
		return map[string]Lists{}
	}
	return out
}

// eachEntry calls fn, in one read transaction, with the bucket of every
// server in want (name → launch hash) whose entry has that hash. The
// bucket is valid during the call only.
func (s *Store) eachEntry(want map[string]string, fn func(name string, b *bolt.Bucket)) error {
	if s == nil || len(want) == 0 {
		return nil
	}
	return s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLists).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				continue
			}
			hash, ok := want[string(k)]
			if !ok {
				continue
			}
			if b := c.Bucket().Bucket(k); b != nil && string(b.Get(keyHash)) == hash {
				fn(string(k), b)
			}
		}
		return nil
	})
}

// readLists copies one server's entry out of the mapped file. All its
// bytes go into one allocation, sized by a first pass, that the returned
// slices share.
func readLists(b *bolt.Bucket) Lists {
	var l Lists
	if v := b.Get(keyFetched); len(v) == 8 {
		l.Fetched = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
	}
	var kbs [len(kinds)]*bolt.Bucket
	init := b.Get(keyInit)
	size, count, present := len(init), 0, 0
	for i, k := range kinds {
		if kbs[i] = b.Bucket([]byte(k)); kbs[i] == nil {
			continue
		}
		present++
		c := kbs[i].Cursor()
		for key, v := c.First(); key != nil; key, v = c.Next() {
			size += len(v)
			count++
		}
	}
	buf := make([]byte, 0, size)
	take := func(v []byte) json.RawMessage {
		start := len(buf)
		buf = append(buf, v...)
		return buf[start:len(buf):len(buf)]
	}
	if init != nil {
		l.Init = take(init)
	}
	all := make([]json.RawMessage, 0, count)
	l.Items = make(map[Kind][]json.RawMessage, present)
	for i, k := range kinds {
		if kbs[i] == nil {
			continue
		}
		first := len(all)
		c := kbs[i].Cursor()
		for key, v := c.First(); key != nil; key, v = c.Next() {
			all = append(all, take(v))
		}
		l.Items[k] = all[first:len(all):len(all)]
	}
	return l
}

// PutLists replaces server's entry with l under hash: kinds absent from
// l.Items are dropped, as is everything written under another hash.
func (s *Store) PutLists(server, hash string, l Lists) error {
	return s.PutMany([]Entry{{Server: server, Hash: hash, Lists: l}})
}

// PutMany does PutLists for every entry in one transaction (one fsync).
// Either all entries are written or none.
func (s *Store) PutMany(entries []Entry) error {
	if s == nil {
		return nil
	}
	for _, e := range entries {
		if err := checkKey(e.Server, e.Hash); err != nil {
			return err
		}
		for k := range e.Lists.Items {
			if !k.Valid() {
				return fmt.Errorf("store: unknown list kind %q", k)
			}
		}
	}
	now := time.Now()
	return s.update(func(tx *bolt.Tx) error {
		for _, e := range entries {
			fetched := e.Lists.Fetched
			if fetched.IsZero() {
				fetched = now
			}
			b, err := resetServer(tx, e.Server, e.Hash, fetched)
			if err != nil {
				return err
			}
			if e.Lists.Init != nil {
				if err := b.Put(keyInit, e.Lists.Init); err != nil {
					return err
				}
			}
			for _, k := range kinds {
				if items, ok := e.Lists.Items[k]; ok {
					if err := putKind(b, k, items); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
}

// PutList replaces one list of server's entry — after a list_changed —
// leaving its other lists as they are; nil or empty items record a fetched,
// empty list. Under a hash other than the
// entry's, the entry is replaced by one holding only this list.
func (s *Store) PutList(server, hash string, kind Kind, items []json.RawMessage) error {
	if s == nil {
		return nil
	}
	if err := checkKey(server, hash); err != nil {
		return err
	}
	if !kind.Valid() {
		return fmt.Errorf("store: unknown list kind %q", kind)
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := serverBucket(tx, server, hash)
		if err != nil {
			return err
		}
		return putKind(b, kind, items)
	})
}

// PutInit replaces server's initialize result, like PutList does a list.
func (s *Store) PutInit(server, hash string, init json.RawMessage) error {
	if s == nil {
		return nil
	}
	if err := checkKey(server, hash); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := serverBucket(tx, server, hash)
		if err != nil {
			return err
		}
		if init == nil {
			return b.Delete(keyInit)
		}
		return b.Put(keyInit, init)
	})
}

// Forget removes server's entry, whatever its hash.
func (s *Store) Forget(server string) error {
	if s == nil {
		return nil
	}
	if server == "" {
		return nil
	}
	return s.update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketLists).DeleteBucket([]byte(server))
		if errors.Is(err, bolterrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
}

// Servers returns the names of the servers with an entry, sorted.
func (s *Store) Servers() []string {
	if s == nil {
		return nil
	}
	var names []string
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLists).ForEachBucket(func(k []byte) error {
			names = append(names, string(k))
			return nil
		})
	})
	if err != nil {
		s.readFailed("servers", err)
		return nil
	}
	return names
}

// Prune removes the entries of servers not in keep (name → launch hash)
// and those written under another hash than keep's, and reports how many
// it removed. Call it with the configured servers after loading a config.
func (s *Store) Prune(keep map[string]string) (int, error) {
	if s == nil {
		return 0, nil
	}
	removed := 0
	err := s.update(func(tx *bolt.Tx) error {
		removed = 0
		lists := tx.Bucket(bucketLists)
		var drop [][]byte
		err := lists.ForEachBucket(func(k []byte) error {
			hash, ok := keep[string(k)]
			if !ok || string(lists.Bucket(k).Get(keyHash)) != hash {
				drop = append(drop, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range drop {
			if err := lists.DeleteBucket(k); err != nil {
				return err
			}
		}
		removed = len(drop)
		return nil
	})
	return removed, err
}

func checkKey(server, hash string) error {
	switch {
	case server == "":
		return errors.New("store: empty server name")
	case hash == "":
		return errors.New("store: empty launch hash")
	case len(server) > bolt.MaxKeySize:
		return errors.New("store: server name too long")
	}
	return nil
}

// resetServer replaces server's bucket with an empty one under hash.
func resetServer(tx *bolt.Tx, server, hash string, fetched time.Time) (*bolt.Bucket, error) {
	lists := tx.Bucket(bucketLists)
	if err := lists.DeleteBucket([]byte(server)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return nil, err
	}
	b, err := lists.CreateBucket([]byte(server))
	if err != nil {
		return nil, err
	}
	if err := b.Put(keyHash, []byte(hash)); err != nil {
		return nil, err
	}
	return b, putFetched(b, fetched)
}

// serverBucket returns server's bucket under hash, replacing one written
// under another hash, and stamps it fetched now.
func serverBucket(tx *bolt.Tx, server, hash string) (*bolt.Bucket, error) {
	b := tx.Bucket(bucketLists).Bucket([]byte(server))
	if b == nil || string(b.Get(keyHash)) != hash {
		return resetServer(tx, server, hash, time.Now())
	}
	return b, putFetched(b, time.Now())
}

func putFetched(b *bolt.Bucket, t time.Time) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(t.UnixNano()))
	return b.Put(keyFetched, v[:])
}

// putKind replaces one list: a fresh bucket, one key per item in order.
func putKind(b *bolt.Bucket, k Kind, items []json.RawMessage) error {
	name := []byte(k)
	if err := b.DeleteBucket(name); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return err
	}
	kb, err := b.CreateBucket(name)
	if err != nil {
		return err
	}
	kb.FillPercent = 1 // appended in key order: fill pages, do not split them half-empty
	for i, it := range items {
		var key [4]byte
		binary.BigEndian.PutUint32(key[:], uint32(i))
		if it == nil {
			it = json.RawMessage{}
		}
		if err := kb.Put(key[:], it); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) readFailed(op string, err error) {
	if !errors.Is(err, ErrClosed) {
		s.log.Warn("state read failed", "op", op, "error", err)
	}
}
