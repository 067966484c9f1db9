package logbuf

import "testing"

// Lookup finds the buffer Get made and never makes one: after Remove, the
// name has none until the writer's next Get, so a reader that looks a
// removed server's buffer up cannot bring back an open one that nobody
// writes to and whose followers are never told it ended.
func TestLookupNeverCreates(t *testing.T) {
	var r Registry
	if b := r.Lookup("s"); b != nil {
		t.Fatalf("Lookup of a name never used = %p, want nil", b)
	}
	if len(r.bufs) != 0 {
		t.Fatalf("Lookup made an entry: %v", r.bufs)
	}
	b := r.Get("s")
	if got := r.Lookup("s"); got != b {
		t.Fatalf("Lookup = %p, want Get's %p", got, b)
	}
	r.Remove("s")
	if got := r.Lookup("s"); got != nil {
		t.Fatalf("Lookup after Remove = %p, want nil", got)
	}
	if len(r.bufs) != 0 {
		t.Fatalf("Lookup after Remove made an entry: %v", r.bufs)
	}
	if again := r.Get("s"); again == b || again.Epoch() == b.Epoch() {
		t.Fatal("Get after Remove returned the closed buffer")
	}
}
