package fleet

import (
	"context"
	"testing"
)

// A server a reload removed reports it (the client book keeps nothing
// more of it, clientbook.Book.Sweep); the one it kept does not, nor does
// one added again under the removed one's name.
func TestReloadMarksRemoved(t *testing.T) {
	f, err := New(parseCfg(t, `"a":{"command":"a"},"b":{"command":"b"}`), Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	a, b := f.Get("a"), f.Get("b")
	if a.Removed() || b.Removed() {
		t.Fatal("removed before any reload")
	}
	if _, err := f.Reload(t.Context(), parseCfg(t, `"b":{"command":"b"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	if !a.Removed() || b.Removed() {
		t.Fatalf("after removing a: a removed %v, b removed %v", a.Removed(), b.Removed())
	}
	if _, err := f.Reload(t.Context(), parseCfg(t, `"a":{"command":"a"},"b":{"command":"b"}`), false, nil); err != nil {
		t.Fatal(err)
	}
	if again := f.Get("a"); again == a || again.Removed() {
		t.Fatal("a added again is the removed one, or removed")
	}
}
