package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Event is one entry of the event history.
type Event struct {
	// Seq numbers events in the order they were appended, increasing across
	// restarts; AppendEvent assigns it (any value given is ignored).
	Seq     uint64          `json:"-"`
	Time    time.Time       `json:"time"`
	Server  string          `json:"server,omitempty"`
	Type    string          `json:"type"`
	Details json.RawMessage `json:"details,omitempty"` // kept byte for byte
}

// AppendEvent adds e to the history (Time defaults to now), dropping the
// oldest events beyond Options.MaxEvents. It costs one fsync: a caller
// with many events at hand should use AppendEvents.
func (s *Store) AppendEvent(e Event) error {
	return s.AppendEvents([]Event{e})
}

// AppendEvents appends es, in order, in one transaction.
func (s *Store) AppendEvents(es []Event) error {
	if s == nil || len(es) == 0 {
		return nil
	}
	vals := make([][]byte, len(es))
	now := time.Now()
	for i, e := range es {
		if e.Time.IsZero() {
			e.Time = now
		}
		v, err := encodeEvent(e)
		if err != nil {
			return fmt.Errorf("store: event %q: %w", e.Type, err)
		}
		vals[i] = v
	}
	max := uint64(s.opts.MaxEvents)
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		var last uint64
		for _, v := range vals {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(seqKey(seq), v); err != nil {
				return err
			}
			last = seq
		}
		// Keys are contiguous: appended at the end, dropped from the front.
		if last <= max {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= last-max; k, _ = c.First() {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Events returns the history's events whose Time is not before since (the
// zero time: all), oldest first; with limit > 0, only the newest limit of
// them. A nil or closed store, or a read error (logged), returns none.
func (s *Store) Events(since time.Time, limit int) []Event {
	if s == nil {
		return nil
	}
	var out []Event
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		// Newest first, so that limit stops the walk; clocks may step back,
		// so every event is checked rather than stopping at the first old one.
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if limit > 0 && len(out) >= limit {
				break
			}
			var e Event
			if len(k) != 8 || json.Unmarshal(v, &e) != nil {
				continue // unreadable entry: skip it, keep the rest
			}
			if e.Time.Before(since) {
				continue
			}
			e.Seq = binary.BigEndian.Uint64(k)
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		s.readFailed("events", err)
		return nil
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// encodeEvent writes e as JSON with Details spliced in as given:
// json.Marshal would compact it and escape HTML characters.
func encodeEvent(e Event) ([]byte, error) {
	details := e.Details
	e.Details = nil
	v, err := json.Marshal(e)
	if err != nil || len(details) == 0 {
		return v, err
	}
	if !json.Valid(details) {
		return nil, errors.New("details are not valid JSON")
	}
	v = append(v[:len(v)-1], `,"details":`...)
	v = append(v, details...)
	return append(v, '}'), nil
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}
