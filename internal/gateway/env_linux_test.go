package gateway

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// mcpvisor's own secrets never reach a server, also when the config gives
// the server an environment of its own (the variables are added to what
// the server inherits): every process of the server's tree lacks
// MCPVISOR_TOKEN and has the configured variable.
func TestServersDoNotInheritMcpvisorsToken(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "s3cret-token")
	w := newWorld(t, `{"a":{"command":"$FIXTURE","env":{"GIVEN":"yes"}}}`)
	sess := w.stdioClient(w.gw.Aggregate(), nil)
	if _, err := sess.CallTool(t.Context(), &mcp.CallToolParams{Name: "a__pid"}); err != nil {
		t.Fatal(err)
	}
	pids := testserver.LiveProcesses(w.marker)
	if len(pids) == 0 {
		t.Fatal("no process of the server's tree carries the test's marker")
	}
	for _, pid := range pids {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(env, []byte("MCPVISOR_TOKEN")) {
			t.Errorf("process %d of the server's tree has MCPVISOR_TOKEN in its environment", pid)
		}
		if !bytes.Contains(env, []byte("\x00GIVEN=yes\x00")) && !bytes.HasPrefix(env, []byte("GIVEN=yes\x00")) {
			t.Errorf("process %d lacks the configured GIVEN=yes", pid)
		}
	}
}
