package store

import (
	"bytes"
	"encoding/json"
	"errors"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

var keyRecord = []byte("record")

// Launch returns the launch record of server written under key (a copy),
// or nil when there is none, when it was written under another key (the
// server's launch changed since), on a nil or closed store, and on a read
// error (which is logged).
//
// A launch record is what the fleet found of how a server launched
// through a package launcher runs (package launch: its Resolution, or
// why it has none); key identifies the launch it is for (launch.Key: a
// hash, so the record holds no secret of the server's environment). The
// store does not read the record.
func (s *Store) Launch(server, key string) json.RawMessage {
	if s == nil || server == "" {
		return nil
	}
	var out json.RawMessage
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLaunches).Bucket([]byte(server))
		if b == nil || !bytes.Equal(b.Get(keyHash), []byte(key)) {
			return nil
		}
		if v := b.Get(keyRecord); v != nil {
			out = bytes.Clone(v)
		}
		return nil
	})
	if err != nil {
		s.readFailed("launch", err)
		return nil
	}
	return out
}

// PutLaunch replaces server's launch record with rec, written under key;
// a nil rec deletes the server's record, whatever its key.
func (s *Store) PutLaunch(server, key string, rec json.RawMessage) error {
	if s == nil {
		return nil
	}
	if err := checkKey(server, key); err != nil {
		return err
	}
	if rec != nil && !json.Valid(rec) {
		return errors.New("store: launch record is not JSON")
	}
	return s.update(func(tx *bolt.Tx) error {
		launches := tx.Bucket(bucketLaunches)
		if err := launches.DeleteBucket([]byte(server)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		if rec == nil {
			return nil
		}
		b, err := launches.CreateBucket([]byte(server))
		if err != nil {
			return err
		}
		if err := b.Put(keyHash, []byte(key)); err != nil {
			return err
		}
		return b.Put(keyRecord, rec)
	})
}

// PruneLaunches removes the launch records of servers not in keep (name →
// launch key) and those written under another key than keep's, and
// reports how many it removed.
func (s *Store) PruneLaunches(keep map[string]string) (int, error) {
	if s == nil {
		return 0, nil
	}
	removed := 0
	err := s.update(func(tx *bolt.Tx) error {
		removed = 0
		launches := tx.Bucket(bucketLaunches)
		var drop [][]byte
		err := launches.ForEachBucket(func(k []byte) error {
			key, ok := keep[string(k)]
			if !ok || string(launches.Bucket(k).Get(keyHash)) != key {
				drop = append(drop, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range drop {
			if err := launches.DeleteBucket(k); err != nil {
				return err
			}
		}
		removed = len(drop)
		return nil
	})
	return removed, err
}
