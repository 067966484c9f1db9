package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A daemon that exits when unused counts a client's request as activity
// while it runs, and its end as the last activity; a /metrics scrape or a
// /healthz probe is neither.
func TestDaemonActivityIgnoresScrapes(t *testing.T) {
	d := &daemonFront{unused: time.Minute}
	var during int
	h := d.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		_, during = d.activity.Snapshot()
	}))
	for _, c := range []struct {
		path   string
		counts bool
	}{{"/metrics", false}, {"/healthz", false}, {"/mcp", true}, {"/api/servers", true}, {"/", true}} {
		before, _ := d.activity.Snapshot()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", c.path, nil))
		after, open := d.activity.Snapshot()
		if counted := during == 1; counted != c.counts || open != 0 || (!c.counts && !after.Equal(before)) {
			t.Errorf("%s: in flight %d during the request, last activity %v → %v, %d after; want it counted: %v", c.path, during, before, after, open, c.counts)
		}
	}
}
