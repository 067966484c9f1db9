package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Definitions returns the definitions record of server as last written
// by PutDefinitions (a copy), or nil when there is none (also on a nil or
// closed store, and on a read error, which is logged).
//
// Unlike the cached lists, the record is keyed by the server's name
// alone: it outlives a change of the server's launch, so that what a new
// launch serves is compared with what the one before served, and the
// operator's approvals hold across both. The store does not read it.
func (s *Store) Definitions(server string) json.RawMessage {
	if s == nil || server == "" {
		return nil
	}
	var out json.RawMessage
	err := s.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketDefs).Get([]byte(server)); v != nil {
			out = bytes.Clone(v)
		}
		return nil
	})
	if err != nil {
		s.readFailed("definitions", err)
		return nil
	}
	return out
}

// PutDefinitions replaces server's definitions record (nil deletes it).
func (s *Store) PutDefinitions(server string, rec json.RawMessage) error {
	if s == nil {
		return nil
	}
	if err := checkKey(server, "-"); err != nil {
		return err
	}
	if rec != nil && !json.Valid(rec) {
		return errors.New("store: definitions record is not JSON")
	}
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDefs)
		if rec == nil {
			return b.Delete([]byte(server))
		}
		return b.Put([]byte(server), rec)
	})
}

// PruneDefinitions forgets the definitions records of servers no longer
// configured — those not in keep — once they have been gone for grace:
// a server removed and added again within it finds its approvals and its
// last known definitions (what it serves then is compared with them),
// instead of trusting whatever it serves as if new. A record's server is
// first seen gone at now, and no longer gone when it is kept again. It
// reports how many records it removed.
func (s *Store) PruneDefinitions(keep map[string]bool, now time.Time, grace time.Duration) (int, error) {
	if s == nil {
		return 0, nil
	}
	removed := 0
	err := s.update(func(tx *bolt.Tx) error {
		removed = 0
		defs, gone := tx.Bucket(bucketDefs), tx.Bucket(bucketGone)
		var drop, mark, back [][]byte
		err := defs.ForEach(func(k, _ []byte) error {
			if keep[string(k)] {
				return nil
			}
			since, err := time.Parse(time.RFC3339Nano, string(gone.Get(k)))
			switch {
			case gone.Get(k) == nil || err != nil:
				mark = append(mark, bytes.Clone(k))
			case now.Sub(since) >= grace:
				drop = append(drop, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = gone.ForEach(func(k, _ []byte) error {
			if keep[string(k)] || defs.Get(k) == nil {
				back = append(back, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range back {
			if err := gone.Delete(k); err != nil {
				return err
			}
		}
		for _, k := range mark {
			if err := gone.Put(k, []byte(now.UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
		}
		for _, k := range drop {
			if err := defs.Delete(k); err != nil {
				return err
			}
			if err := gone.Delete(k); err != nil {
				return err
			}
		}
		removed = len(drop)
		return nil
	})
	return removed, err
}
