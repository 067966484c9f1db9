package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A server that exits on its own is a crash, whatever it did with its
// stdout first: it is reported (an exited event naming the exit code,
// lastError, a restart counted) and restarted by its policy at once, with
// no request coming to wake it.
func TestCrashIsReportedAndRestartedWithoutARequest(t *testing.T) {
	for _, code := range []int{3, 0} {
		t.Run("code"+string(rune('0'+code)), func(t *testing.T) {
			w := newWorld(t, twoFixtures)
			sess := w.stdioClient(w.gw.Aggregate(), nil)
			ctx := t.Context()
			if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__pid"}); err != nil {
				t.Fatal(err)
			}
			before := w.pid("a")
			_, _ = sess.CallTool(ctx, &mcp.CallToolParams{Name: "a__crash", Arguments: map[string]any{"code": code}})
			w.waitEvent("a", "exited", 1, 5*time.Second)
			w.waitEvent("a", "restarted", 1, 5*time.Second)
			ev := w.last("a", "exited")
			if got, want := ev.Details["code"], code; got != want {
				t.Errorf("exited event code = %v, want %d (details %v)", got, want, ev.Details)
			}
			st := w.fleet.Get("a").Status()
			if st.Restarts < 1 {
				t.Errorf("restarts = %d, want at least 1", st.Restarts)
			}
			if want := "exit code " + string(rune('0'+code)); !strings.Contains(st.LastError, want) {
				t.Errorf("lastError = %q, want it to name %q", st.LastError, want)
			}
			if after := w.pid("a"); after == 0 || after == before {
				t.Errorf("pid %d before the crash, %d after the restart", before, after)
			}
		})
	}
}
