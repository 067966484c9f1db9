package store

import (
	"bytes"
	"encoding/json"

	bolt "go.etcd.io/bbolt"
)

// Summary is what mcpvisor keeps in memory of one server's cached lists
// while the lists themselves stay on disk (read with List when asked
// for): its initialize result, and which lists were fetched — true for
// those that have items.
type Summary struct {
	Init  []byte
	Lists map[Kind]bool
}

// Index returns, in one transaction, the Summary of every server in want
// (name → launch hash) whose entry has that hash; servers without a
// matching entry are absent. It reads no item, only whether each list
// has a first one.
func (s *Store) Index(want map[string]string) map[string]Summary {
	out := make(map[string]Summary, len(want))
	err := s.eachEntry(want, func(name string, b *bolt.Bucket) {
		sum := Summary{Lists: map[Kind]bool{}}
		if init := b.Get(keyInit); init != nil {
			sum.Init = append([]byte(nil), init...)
		}
		for _, kind := range kinds {
			if kb := b.Bucket([]byte(kind)); kb != nil {
				first, _ := kb.Cursor().First()
				sum.Lists[kind] = first != nil
			}
		}
		out[name] = sum
	})
	if err != nil {
		s.readFailed("index", err)
		return map[string]Summary{}
	}
	return out
}

// List returns the items of one list of server's entry under launch hash,
// and whether that list was fetched (an empty one included); false, as for
// Lists, when the entry has another hash or on a nil store. A read error
// (a closed store included) is returned, and logged: the list may well be
// there, the caller cannot know.
func (s *Store) List(server, hash string, kind Kind) ([]json.RawMessage, bool, error) {
	if s == nil {
		return nil, false, nil
	}
	var items []json.RawMessage
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLists).Bucket([]byte(server))
		if b == nil || !bytes.Equal(b.Get(keyHash), []byte(hash)) {
			return nil
		}
		kb := b.Bucket([]byte(kind))
		if kb == nil {
			return nil
		}
		items, ok = []json.RawMessage{}, true
		c := kb.Cursor()
		for key, v := c.First(); key != nil; key, v = c.Next() {
			items = append(items, bytes.Clone(v))
		}
		return nil
	})
	if err != nil {
		s.readFailed("list", err)
		return nil, false, err
	}
	return items, ok, nil
}

// Init returns server's initialize result under launch hash, and whether
// one is stored; false, as for List, when the entry has another hash or
// on a nil store. A read error (a closed store included) is returned, and
// logged.
func (s *Store) Init(server, hash string) (json.RawMessage, bool, error) {
	if s == nil {
		return nil, false, nil
	}
	var init json.RawMessage
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLists).Bucket([]byte(server))
		if b == nil || !bytes.Equal(b.Get(keyHash), []byte(hash)) {
			return nil
		}
		if v := b.Get(keyInit); v != nil {
			init = bytes.Clone(v)
		}
		return nil
	})
	if err != nil {
		s.readFailed("init", err)
		return nil, false, err
	}
	return init, init != nil, nil
}

// ReleaseMemory drops the pages of the state file that reads and writes
// brought into mcpvisor's resident memory (the file is mapped): they stay
// in the kernel's page cache, and the next read maps them again. It runs
// inside a read transaction, during which the map cannot move. A no-op
// where the platform has no way to do it.
//
// First, once the writes since the file was opened allocated reopenPages
// pages or more, it reopens the file (see reopen). Other operations wait
// meanwhile, as they wait for Close.
func (s *Store) ReleaseMemory() error {
	if s == nil {
		return nil
	}
	s.reopen()
	return s.view(func(tx *bolt.Tx) error {
		return releaseMapped(tx.DB().Info().Data)
	})
}
