package daemon

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A config file whose directory cannot be watched is reported at start
// (serve then says to reload with SIGHUP or mcpvisor reload), not watched
// in silence with no change ever seen.
func TestWatchReportsADirectoryItCannotWatch(t *testing.T) {
	r := &reloader{file: filepath.Join(t.TempDir(), "gone", "config.json")}
	var bg sync.WaitGroup
	t.Cleanup(bg.Wait) // after t.Context() ends
	if err := r.watch(t.Context(), &bg); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("watching a file in a missing directory: %v, want an error naming it", err)
	}
}
