package store

import (
	bolt "go.etcd.io/bbolt"
)

// Summary is what mcpvisor keeps in memory of one server's cached lists
// while the lists themselves stay on disk (read with Lists when asked
// for): its initialize result, and how many items each list that was
// fetched has.
type Summary struct {
	Init  []byte
	Count map[Kind]int
}

// Index returns, in one transaction, the Summary of every server in want
// (name → launch hash) whose entry has that hash; servers without a
// matching entry are absent. It reads no item but each list's keys.
func (s *Store) Index(want map[string]string) map[string]Summary {
	out := make(map[string]Summary, len(want))
	if s == nil || len(want) == 0 {
		return out
	}
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLists).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				continue
			}
			hash, ok := want[string(k)]
			if !ok {
				continue
			}
			b := c.Bucket().Bucket(k)
			if b == nil || string(b.Get(keyHash)) != hash {
				continue
			}
			sum := Summary{Count: map[Kind]int{}}
			if init := b.Get(keyInit); init != nil {
				sum.Init = append([]byte(nil), init...)
			}
			for _, kind := range kinds {
				kb := b.Bucket([]byte(kind))
				if kb == nil {
					continue
				}
				n := 0
				kc := kb.Cursor()
				for key, _ := kc.First(); key != nil; key, _ = kc.Next() {
					n++
				}
				sum.Count[kind] = n
			}
			out[string(k)] = sum
		}
		return nil
	})
	if err != nil {
		s.readFailed("index", err)
		return map[string]Summary{}
	}
	return out
}

// ReleaseMemory drops the pages of the state file that reads and writes
// brought into mcpvisor's resident memory (the file is mapped): they stay
// in the kernel's page cache, and the next read maps them again. It runs
// inside a read transaction, during which the map cannot move. A no-op
// where the platform has no way to do it.
func (s *Store) ReleaseMemory() error {
	if s == nil {
		return nil
	}
	return s.view(func(tx *bolt.Tx) error {
		return releaseMapped(tx.DB().Info().Data)
	})
}
