package fleet

import (
	"context"
	"errors"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/logbuf"
)

// The history reads a server's kept stderr without ever making a buffer:
// an instance of a server a reload removed (its buffer closed and
// forgotten, logbuf.Registry.Remove) that fails as it drains does not
// bring back an open buffer that nothing would write to or close.
func TestHistoryDoesNotRecreateARemovedServersBuffer(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"mcpServers":{"s":{"command":"s"}}}`), "test.json", config.LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	reg := logbuf.NewRegistry(logbuf.Options{})
	f, err := New(cfg, Options{Logger: discardLogger(), Logs: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	s := f.Get("s")
	if reg.Lookup("s") == nil {
		t.Fatal("a stdio server has no buffer")
	}
	reg.Remove("s") // as a reload that removes s does
	in := s.sharedIn()
	in.startFailure(errors.New("handshake failed"), s.stderrMark())
	if b := reg.Lookup("s"); b != nil {
		t.Fatal("the history made a new buffer for the removed server")
	}
}
