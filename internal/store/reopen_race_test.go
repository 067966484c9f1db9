package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// Close racing ReleaseMemory's reopen: the store ends closed
// (writes say ErrClosed), the file's lock is released, nothing panics.
func TestCloseRacesReopen(t *testing.T) {
	for round := range 5 {
		path := filepath.Join(t.TempDir(), "state.db")
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		learn(t, s, 300)
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.ReleaseMemory() })
		wg.Go(func() {
			for i := range 50 {
				err := s.PutDefinitions(fmt.Sprintf("x%d", i), json.RawMessage(`{}`))
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("round %d: write during reopen/close: %v", round, err)
					return
				}
			}
		})
		wg.Go(func() { _ = s.Close() })
		wg.Wait()
		if err := s.PutDefinitions("y", json.RawMessage(`{}`)); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: a write after Close: %v, want ErrClosed", round, err)
		}
		s2, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("round %d: the file after Close: %v", round, err)
		}
		s2.Close()
	}
}
